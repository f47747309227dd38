"""Score attributes for ``enrich`` mode: the evaluated span carries its own scores.

One key set per metric, so a user filters spans by score directly (Jaeger tag search, TraceQL
``{ span.spanjudge.score.faithfulness.value < 0.5 }``):

=====================================  =====================================================
``spanjudge.score.<metric>.value``     float score (scored only)
``spanjudge.score.<metric>.label``     ``pass`` / ``fail`` (scored only)
``spanjudge.score.<metric>.success``   bool (scored only)
``spanjudge.score.<metric>.reason``    the judge's explanation, when given
``spanjudge.score.<metric>.error_type``  why there is no score (error or skipped records)
=====================================  =====================================================

Example::

    span.attributes.update(score_attributes(records_for_this_span))
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from spanjudge.exporters.emitter import MISSING_FIELD
from spanjudge.exporters.records import EvaluationRecord

SCORE_PREFIX = "spanjudge.score."
# Reasons are cut here: they ride on the user's span, which backends limit in size.
MAX_REASON_CHARS = 2048


def score_key(metric: str, field: str) -> str:
    """``spanjudge.score.<metric>.<field>`` with the metric name normalised (lower, ``_``)."""
    name = "_".join(metric.strip().lower().split()) or "metric"
    return f"{SCORE_PREFIX}{name}.{field}"


def score_attributes(records: Iterable[EvaluationRecord]) -> dict[str, Any]:
    """The enrich-mode attributes of one span from its evaluation records.

    When two records share a metric (two rules), the scored one wins over an error, and among
    equals the later one in ``records`` wins, so the result is deterministic.
    """
    chosen: dict[str, EvaluationRecord] = {}
    for record in records:
        previous = chosen.get(record.metric)
        if previous is None or record.status == "scored" or previous.status != "scored":
            chosen[record.metric] = record
    out: dict[str, Any] = {}
    for metric, record in chosen.items():
        if record.status == "scored":
            if record.score is not None:
                out[score_key(metric, "value")] = float(record.score)
            if record.label:
                out[score_key(metric, "label")] = record.label
            if record.success is not None:
                out[score_key(metric, "success")] = bool(record.success)
        else:
            fallback = MISSING_FIELD if record.status == "skipped" else "_OTHER"
            out[score_key(metric, "error_type")] = record.error_type or fallback
        if record.reason:
            out[score_key(metric, "reason")] = record.reason[:MAX_REASON_CHARS]
    return out
