"""Human feedback: a person's pass/fail label on an evaluated target, stored beside the judge's.

Three entry points write the same rows: :func:`feedback` (Python), the worker's
``POST /v1/feedback`` (:func:`feedback_http_sink`) and ``spanjudge feedback``. Each input is
checked the same way (:func:`parse_feedback`, :func:`record_feedback`): a known metric, ``pass``
or ``fail``, a score in [0, 1], hex ids, a note of at most :data:`MAX_NOTE_CHARS` characters,
and a target the store knows (its spans or its results). A label on a target that was not
evaluated yet is kept and joins the result when there is one. Each label then leaves once as a
``spanjudge.feedback`` log event on the target span, through the score emitter's event output.

Example::

    import spanjudge

    spanjudge.feedback(
        "4bf92f3577b34da6a3ce929d0e0e4736",
        metric="faithfulness",
        label="fail",
        note="the refund window is 30 days, not 90",
        annotator="dana",
    )
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection, Mapping
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from spanjudge._core.checked_model import message_of
from spanjudge._core.kinds import NAMED_METRICS, FeedbackSource, Label
from spanjudge._core.span_record import FeedbackRecord
from spanjudge._receive.feedback_route import AnnotatedSink, AnnotatorTokens
from spanjudge.errors import FeedbackError

if TYPE_CHECKING:
    from spanjudge._store.sql import SpanStore

__all__ = [
    "MAX_ANNOTATOR_CHARS",
    "MAX_NOTE_CHARS",
    "FeedbackIn",
    "feedback",
    "feedback_http_sink",
    "parse_feedback",
    "record_feedback",
]

MAX_NOTE_CHARS = 4096
MAX_ANNOTATOR_CHARS = 200
_TRACE_ID = re.compile(r"[0-9a-f]{32}")
_SPAN_ID = re.compile(r"[0-9a-f]{16}")
SOURCES = ("python", "http", "cli")


class FeedbackIn(BaseModel):
    """The JSON body of ``POST /v1/feedback`` (and the arguments of :func:`feedback`).

    Example::

        FeedbackIn(trace_id="4bf92f3577b34da6a3ce929d0e0e4736", metric="bias", label="pass")
    """

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    trace_id: str | None = None
    span_id: str | None = None
    conversation_id: str | None = Field(None, min_length=1, max_length=512)
    metric: str = Field(min_length=1, max_length=200)
    rule: str | None = Field(None, min_length=1, max_length=200)
    label: Label
    score: float | None = Field(None, ge=0.0, le=1.0, allow_inf_nan=False)
    note: str | None = Field(None, max_length=MAX_NOTE_CHARS)
    annotator: str | None = Field(None, max_length=MAX_ANNOTATOR_CHARS)

    @field_validator("trace_id", "span_id")
    @classmethod
    def _hex(cls, value: str | None, info: Any) -> str | None:
        if value is None:
            return None
        value = value.lower()
        pattern, size = (_TRACE_ID, 32) if info.field_name == "trace_id" else (_SPAN_ID, 16)
        if not pattern.fullmatch(value) or not int(value, 16):
            raise ValueError(f"expected {size} hex characters, not all zero")
        return value


def _describe(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        key = ".".join(str(p) for p in err["loc"]) or "body"
        message = "unknown field" if err["type"] == "extra_forbidden" else message_of(err)
        parts.append(f"{key}: {message}")
    return "invalid feedback: " + "; ".join(parts)


def parse_feedback(data: Mapping[str, Any], *, source: FeedbackSource = "python") -> FeedbackRecord:
    """Check one feedback object (the JSON schema of :class:`FeedbackIn`) and make the record.

    Raises :class:`FeedbackError` (400) naming every bad field.
    """
    if not isinstance(data, Mapping):
        raise FeedbackError("invalid feedback: the body must be a JSON object")
    try:
        item = FeedbackIn.model_validate(dict(data))
    except ValidationError as exc:
        raise FeedbackError(_describe(exc)) from None
    if item.span_id is not None and item.trace_id is None:
        raise FeedbackError("invalid feedback: span_id needs its trace_id")
    if item.conversation_id is None and item.trace_id is None:
        raise FeedbackError("invalid feedback: give trace_id (and span_id) or conversation_id")
    if item.conversation_id is not None and item.span_id is not None:
        raise FeedbackError("invalid feedback: a conversation label takes no span_id")
    return FeedbackRecord(
        metric=item.metric,
        label=item.label,
        trace_id=item.trace_id,
        span_id=item.span_id,
        conversation_id=item.conversation_id,
        rule=item.rule,
        score=item.score,
        note=item.note or None,
        annotator=item.annotator or None,
        source=source,
    )


def _check_metric(store: SpanStore, metric: str, extra: Collection[str]) -> None:
    known = set(NAMED_METRICS) | set(extra)
    if metric in known or store.results(metric=metric, limit=1):
        return
    raise FeedbackError(f"unknown metric {metric!r}; known: {', '.join(sorted(known))}")


def record_feedback(
    store: SpanStore,
    item: FeedbackRecord,
    *,
    metrics: Collection[str] = (),
    now: float | None = None,
) -> FeedbackRecord:
    """Store ``item`` once its metric is known (a built-in one, one of ``metrics``, or one
    with stored results) and its target is in the store; returns it with its id.

    Raises :class:`FeedbackError`: 400 for an unknown metric, 404 for an unknown target.
    """
    _check_metric(store, item.metric, metrics)
    found = _target(store, item)
    if found is None:
        if item.conversation_id:
            what = f"conversation {item.conversation_id!r}"
        elif item.span_id:
            what = f"span {item.span_id} of trace {item.trace_id}"
        else:
            what = f"trace {item.trace_id}"
        raise FeedbackError(
            f"unknown target: {what} is not in the store (wrong id, not arrived yet, or "
            "deleted by retention)",
            status=404,
        )
    if item.conversation_id and not item.trace_id:
        item.trace_id = found[0]  # the trace the label's event goes to
    [item.feedback_id] = store.add_feedback([item], now=now)
    return item


def _target(store: SpanStore, item: FeedbackRecord) -> tuple[str, str | None] | None:
    return store.feedback_target(
        trace_id=item.trace_id, span_id=item.span_id, conversation_id=item.conversation_id
    )


def feedback(
    trace_id: str | None = None,
    span_id: str | None = None,
    *,
    metric: str,
    label: str,
    score: float | None = None,
    note: str | None = None,
    annotator: str | None = None,
    conversation_id: str | None = None,
    rule: str | None = None,
    store: SpanStore | str | None = None,
) -> FeedbackRecord:
    """Record a person's ``label`` (``"pass"``/``"fail"``) on a target's ``metric``.

    The target is a span (``trace_id`` + ``span_id``), a whole trace (``trace_id``) or a
    conversation (``conversation_id=``). ``store`` is a store or its URL (default
    ``$SPANJUDGE_STORE_URL``, else ``./spanjudge.db``); the trace must be stored already, so an
    app that labels its own traces flushes its tracing first. Raises :class:`FeedbackError`.

    Example::

        spanjudge.feedback(trace_id, metric="bias", label="pass", annotator="dana")
    """
    from spanjudge._store import open_store
    from spanjudge._store.sql import SpanStore as StoreType

    item = parse_feedback(
        {
            key: value
            for key, value in (
                ("trace_id", trace_id),
                ("span_id", span_id),
                ("conversation_id", conversation_id),
                ("metric", metric),
                ("rule", rule),
                ("label", label),
                ("score", score),
                ("note", note),
                ("annotator", annotator),
            )
            if value is not None
        }
    )
    if isinstance(store, StoreType):
        return record_feedback(store, item)
    with open_store(store) as opened:
        return record_feedback(opened, item)


def feedback_http_sink(
    store: SpanStore,
    *,
    metrics: Collection[str] = (),
    stored: Callable[[FeedbackRecord], Any] | None = None,
    annotator_tokens: Mapping[str, str] | None = None,
) -> AnnotatedSink:
    """What ``POST /v1/feedback`` runs on a body: JSON in, the stored label's id out;
    ``stored(label)`` then runs (the worker sends the label's event at once).

    With ``annotator_tokens`` (``{name: token}``) a request is authenticated by its annotator's
    token, and the label's annotator is that name: a body naming another one is refused (403).

    Raises :class:`FeedbackError` for a bad body (400), another annotator's name (403) or an
    unknown target (404).
    """

    def sink(body: bytes, annotator: str | None) -> dict[str, Any]:
        try:
            data = json.loads(body)
        except (ValueError, UnicodeDecodeError) as exc:
            raise FeedbackError(f"invalid feedback: the body is not JSON ({exc})") from None
        except RecursionError:
            # a body nested deeper than the parser recurses is the client's mistake: a 400,
            # not a 503 that would have it sent again forever
            raise FeedbackError("invalid feedback: the JSON body is nested too deeply") from None
        item = parse_feedback(data, source="http")
        if annotator is not None:
            if item.annotator not in (None, annotator):
                raise FeedbackError(
                    f"invalid feedback: annotator {item.annotator!r} is not the one this "
                    "token belongs to",
                    status=403,
                )
            item.annotator = annotator
        item = record_feedback(store, item, metrics=metrics)
        if stored is not None:
            stored(item)
        return {"feedback_id": item.feedback_id, "trace_id": item.trace_id}

    tokens = AnnotatorTokens(annotator_tokens) if annotator_tokens else None
    return AnnotatedSink(sink, tokens)
