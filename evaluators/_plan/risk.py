"""Risk signals: what raises a target's sampling probability under a target rule.

A rule with a budget or a precision target samples a target showing a risk signal with at least
its ``risk_sample_rate`` (1 by default: always), and records that probability, so the weight
``1/p`` keeps estimates unbiased. The signals are read from the trace's spans and the
allocation state, so the decision is as deterministic as the rest of the sampler:

* ``human_fail``: a person labelled the trace ``fail`` (``spanjudge feedback``,
  ``POST /v1/feedback``) before it was planned;
* ``error``: a span of the trace has an error status;
* ``new_version``: the target's ``service.version`` had its first result less than
  :data:`NEW_VERSION_SECONDS` before the target started, or none yet;
* ``low_retrieval``: a retrieved document's score (OpenInference
  ``retrieval.documents.N.document.score``, or a ``score`` in ``gen_ai.retrieval.documents``)
  is under :data:`LOW_RETRIEVAL_SCORE`.

Example::

    signals = risk_signals(target, spans, first_seen={"1.4.0": 0.0}, labelled_fail=False)
    # ("error",) when a span of the trace failed
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final

from spanjudge.tracer import _attributes as attrs

if TYPE_CHECKING:
    from spanjudge._core.span_record import SpanRecord
    from spanjudge.evaluators._rebuild.targets import Target

__all__ = [
    "ERROR",
    "HUMAN_FAIL",
    "LOW_RETRIEVAL",
    "LOW_RETRIEVAL_SCORE",
    "NEW_VERSION",
    "NEW_VERSION_SECONDS",
    "risk_signals",
]

HUMAN_FAIL: Final = "human_fail"
ERROR: Final = "error"
NEW_VERSION: Final = "new_version"
LOW_RETRIEVAL: Final = "low_retrieval"
NEW_VERSION_SECONDS: Final = 6 * 3600.0
"""A version is new for its first six hours of traffic."""
LOW_RETRIEVAL_SCORE: Final = 0.3
"""A retrieved document scored under this (a cosine similarity, a reranker's relevance) is a
retrieval that likely missed."""
_DOC_SCORE_SUFFIX: Final = ".document.score"


def _scores(value: Any) -> Iterable[float]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return
    if isinstance(value, list):
        for item in value:
            score = item.get("score") if isinstance(item, dict) else None
            if isinstance(score, (int, float)) and not isinstance(score, bool):
                yield float(score)


def _low_retrieval(span: SpanRecord) -> bool:
    for key, value in span.attributes.items():
        if (
            key.endswith(_DOC_SCORE_SUFFIX)
            and isinstance(value, (int, float))
            and not isinstance(value, bool)
            and value < LOW_RETRIEVAL_SCORE
        ):
            return True
    docs = span.attributes.get(attrs.GEN_AI_RETRIEVAL_DOCUMENTS)
    return docs is not None and any(s < LOW_RETRIEVAL_SCORE for s in _scores(docs))


def _new_version(target: Target, first_seen: Mapping[str, float]) -> bool:
    span = target.span
    if span is None:
        return False
    version = span.resource.get("service.version")
    if not isinstance(version, str) or not version:
        return False
    first = first_seen.get(version)
    if first is None:
        return True
    started = span.start_time_unix_nano / 1e9
    return started - first < NEW_VERSION_SECONDS


def risk_signals(
    target: Target,
    spans: Iterable[SpanRecord],
    *,
    first_seen: Mapping[str, float],
    labelled_fail: bool,
) -> tuple[str, ...]:
    """The risk signals ``target`` shows, in a fixed order (empty: none). ``spans``: its
    trace's (a conversation's) spans; ``first_seen``: when each ``service.version`` got its
    first result; ``labelled_fail``: a person labelled its trace ``fail``."""
    found: list[str] = []
    if labelled_fail:
        found.append(HUMAN_FAIL)
    listed = list(spans)
    if any(s.status_code == "ERROR" for s in listed):
        found.append(ERROR)
    if _new_version(target, first_seen):
        found.append(NEW_VERSION)
    if any(_low_retrieval(s) for s in listed):
        found.append(LOW_RETRIEVAL)
    return tuple(found)
