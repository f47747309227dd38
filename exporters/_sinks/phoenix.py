"""The Phoenix sink: a result as a Phoenix annotation, through Phoenix's REST API.

* an llm or agent target: a **span annotation** on the judged span;
* a trace or conversation target: a **trace annotation** on the judged trace (a conversation's
  is the trace of its last turn, where the evaluation span hangs), and for a conversation also
  a **session annotation** when Phoenix has the conversation as a session (the app's spans
  carry ``session.id``; without it Phoenix has no session and only the trace annotation is
  written);
* a person's label (``POST /v1/feedback``): a span annotation with ``annotator_kind`` HUMAN on
  the label's span (a trace annotation without one).

Each annotation is named after the metric with ``annotator_kind`` LLM, ``result`` = label
(pass/fail), score and explanation (the judge's reason), and metadata (rule, threshold, judge
model). Its ``identifier`` is the result's stable id (the evaluation span's id; for a label, the
annotator), and Phoenix upserts on (name, target, identifier): a result written twice is one
annotation, and a person's newer label replaces their older one. Writes are synchronous
(``sync=true``), so an unknown span is a 404 rather than a silent drop.

The UI then shows a score chip on the span in the trace tree, ``faithfulness`` columns in the
trace and span lists, and the filter ``annotations['faithfulness'].label == 'fail'``.

Example::

    sink = PhoenixSink("http://127.0.0.1:6006", api_key=os.environ.get("PHOENIX_API_KEY"))
    assert sink.export([SinkItem(record=record)])
"""

from __future__ import annotations

import logging
from collections import defaultdict
from typing import Any

from spanjudge._core.span_record import EvaluationRecord, FeedbackRecord
from spanjudge.exporters._sinks.base import HttpSink, SinkItem

__all__ = ["PhoenixSink", "annotation"]

logger = logging.getLogger("spanjudge.emitter")

SPAN_TARGETS = frozenset({"llm", "agent"})
# where each kind of annotation goes, and the field naming its target
ROUTES = {
    "span": ("/v1/span_annotations", "span_id"),
    "trace": ("/v1/trace_annotations", "trace_id"),
    "session": ("/v1/session_annotations", "session_id"),
}
IDENTIFIER_PREFIX = "spanjudge:"


def _result_annotation(record: EvaluationRecord) -> dict[str, Any]:
    metadata: dict[str, Any] = {"rule": record.rule, "target": record.target_type}
    for key, value in (
        ("threshold", record.threshold),
        ("judge_model", record.judge_model),
        ("evaluation_span_id", record.evaluation_span_id),
    ):
        if value is not None:
            metadata[key] = value
    result: dict[str, Any] = {"score": float(record.score) if record.score is not None else None}
    if record.label:
        result["label"] = record.label
    if record.reason:
        result["explanation"] = record.reason
    return {
        "name": record.metric,
        "annotator_kind": "LLM",
        "result": result,
        "metadata": metadata,
        "identifier": IDENTIFIER_PREFIX + record.evaluation_span_id,
    }


def _label_annotation(label: FeedbackRecord) -> dict[str, Any]:
    result: dict[str, Any] = {"label": label.label}
    if label.score is not None:
        result["score"] = float(label.score)
    if label.note:
        result["explanation"] = label.note
    metadata: dict[str, Any] = {"source": label.source, "feedback_id": label.feedback_id}
    if label.rule:
        metadata["rule"] = label.rule
    who = label.annotator or label.source
    return {
        "name": label.metric,
        "annotator_kind": "HUMAN",
        "result": result,
        "metadata": metadata,
        "identifier": f"{IDENTIFIER_PREFIX}human:{who}",
    }


def annotation(item: SinkItem) -> list[tuple[str, dict[str, Any]]]:
    """The annotations ``item`` becomes: ``(kind, body)`` pairs, kind one of ``span``,
    ``trace``, ``session`` (see the module docstring)."""
    if item.label is not None:
        body = _label_annotation(item.label)
        if item.span_id:
            return [("span", {**body, "span_id": item.span_id})]
        return [("trace", {**body, "trace_id": item.label.trace_id})]
    record = item.record
    assert record is not None
    body = _result_annotation(record)
    if record.target_type in SPAN_TARGETS and record.span_id:
        return [("span", {**body, "span_id": record.span_id})]
    out = [("trace", {**body, "trace_id": record.trace_id})]
    if record.target_type == "conversation":
        out.append(("session", {**body, "session_id": record.target_id}))
    return out


class PhoenixSink(HttpSink):
    """Results as Phoenix annotations (module docstring); ``api_key`` goes as a bearer token."""

    name = "phoenix"

    def __init__(self, endpoint: str, *, api_key: str | None = None, **kwargs: Any) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        super().__init__(endpoint, headers=headers, **kwargs)

    def write(self, items: list[SinkItem]) -> list[bool]:
        by_kind: dict[str, list[tuple[int, dict[str, Any]]]] = defaultdict(list)
        for index, item in enumerate(items):
            for kind, body in annotation(item):
                by_kind[kind].append((index, body))
        settled = [True] * len(items)
        for kind, pairs in by_kind.items():
            for index, ok in self._post(kind, pairs, items):
                settled[index] = settled[index] and ok
        return settled

    def _post(
        self, kind: str, pairs: list[tuple[int, dict[str, Any]]], items: list[SinkItem]
    ) -> list[tuple[int, bool]]:
        """Post one kind of annotation; a 404 for the batch (one target Phoenix does not know
        fails them all) is retried one annotation at a time to tell which."""
        path, _ = ROUTES[kind]
        answer = self.request(
            "POST", path, params={"sync": "true"}, json={"data": [b for _, b in pairs]}
        )
        what = f"{kind} annotations"
        if answer.status_code == 404 and len(pairs) > 1:
            return [pair for one in pairs for pair in self._post(kind, [one], items)]
        if answer.status_code == 404 and kind == "session":
            # the app's spans name no session.id: Phoenix has no session for the conversation;
            # its result is on the trace annotation already
            return [(index, True) for index, _ in pairs]
        ok = self.answer_settles(answer, [items[index] for index, _ in pairs], what)
        return [(index, ok) for index, _ in pairs]
