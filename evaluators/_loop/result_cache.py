"""The judge-result cache: the same question to the same judge is paid for once.

A scored result is kept in the store under a key: the SHA-256 of the canonical JSON of the
metric's identity (``metric.cache_identity()``: class, name, parameters, prompt code digest),
the judge's model name and the rebuilt case's content. A later job with the same key (a backfill
after a rule change, a retried job, a second worker, a restart) reuses it within
``MonitorConfig.judge_cache_max_age_seconds`` and makes no judge call; its result says so
(``spanjudge.evaluation.cached = true``, no tokens, no cost). Errors and skips are never kept.

The case's content is what the judge sees; where it came from is left out (the case name and
the ``trace_id``/``span_id``/``conversation_id`` metadata), so two spans that ask the same
question share an entry. A metric without ``cache_identity()`` is never cached.

Example::

    cache = ResultCache(store, max_age_seconds=3600)
    hit = cache.lookup(key, now=t)          # an EvaluationRecord or None
    cache.remember(key, scored_record, now=t)
"""

from __future__ import annotations

import json
import logging
from typing import Any

from spanjudge._core.span_record import EvaluationRecord
from spanjudge._store.sql import SpanStore
from spanjudge.evaluators._judge.metrics.identity import digest

logger = logging.getLogger("spanjudge.monitor")

# Provenance, not content: the judge never sees these.
_PROVENANCE = frozenset({"trace_id", "span_id", "conversation_id"})
# The fields a cached result lends to a new one (the rest is the new job's own).
_OUTCOME = ("status", "score", "label", "success", "threshold", "strict_mode", "reason",
            "judge_model", "verdicts")  # fmt: skip


def _content(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` (a dumped case or turn) without the provenance keys of its metadata."""
    metadata = data.get("metadata")
    if isinstance(metadata, dict):
        data["metadata"] = {k: v for k, v in metadata.items() if k not in _PROVENANCE}
    for turn in data.get("turns") or ():
        if isinstance(turn, dict):
            _content(turn)
    return data


def cache_key(metric: Any, case: Any) -> str | None:
    """The key of ``metric`` judging ``case``, or None when the metric cannot say what it is
    (no ``cache_identity()``)."""
    identify = getattr(metric, "cache_identity", None)
    if not callable(identify):
        return None
    data = case.model_dump(mode="json", exclude={"name"})
    if getattr(metric, "reads_trajectory", False):
        _with_trajectories(case, data)
    return digest(
        {
            "metric": identify(),
            "judge_model": str(getattr(metric, "evaluation_model", "") or ""),
            "case_type": type(case).__name__,
            "case": _content(data),
        }
    )


def _with_trajectories(case: Any, data: dict[str, Any]) -> None:
    """A case's dump leaves its trajectory out (it is not a model field), yet a metric that
    reads it (``reads_trajectory``: the judged agent metrics) judges it: its content joins the
    key, so two turns that differ only in what the agent did never share a result."""
    own = getattr(case, "trajectory", None)
    if own is not None:
        data["trajectory"] = _trajectory_content(own)
    turns = getattr(case, "turns", None) or ()
    for turn, dumped in zip(turns, data.get("turns") or (), strict=False):
        trajectory = getattr(turn, "trajectory", None)
        if trajectory is not None and isinstance(dumped, dict):
            dumped["trajectory"] = _trajectory_content(trajectory)


def _trajectory_content(trajectory: Any) -> Any:
    as_dict = getattr(trajectory, "as_dict", None)
    raw = as_dict() if callable(as_dict) else repr(trajectory)
    # JSON-ready whatever the spans held; the ids are provenance, as for the case
    content = json.loads(json.dumps(raw, default=str))
    if isinstance(content, dict):
        content.pop("trace_id", None)
        content.pop("span_id", None)
        for step in content.get("steps") or ():
            if isinstance(step, dict):
                step.pop("span_id", None)
    return content


def reuse(record: EvaluationRecord, cached: EvaluationRecord) -> None:
    """Give ``record`` the outcome of ``cached``, marked as reused: no calls, tokens or cost."""
    for name in _OUTCOME:
        setattr(record, name, getattr(cached, name))
    record.error_type = record.error_message = None
    record.cached = True
    record.judge_calls = record.input_tokens = record.output_tokens = 0
    record.cost = 0.0 if cached.cost is not None else None


class ResultCache:
    """Looks results up in and writes them to a store's judge cache; store failures are logged
    and make a miss (or a result not kept), never a failed evaluation."""

    def __init__(self, store: SpanStore, *, max_age_seconds: float) -> None:
        self.store = store
        self.max_age_seconds = max_age_seconds

    def lookup(self, key: str, *, now: float) -> EvaluationRecord | None:
        try:
            return self.store.cached_result(key, since=now - self.max_age_seconds)
        except Exception as exc:
            logger.warning("judge cache lookup failed (judging instead): %s", exc)
            return None

    def remember(self, key: str, record: EvaluationRecord, *, now: float) -> None:
        if record.status != "scored" or record.cached:
            return
        try:
            self.store.put_cached_result(key, record, now=now)
        except Exception as exc:
            logger.warning("judge cache write failed (result kept, not cached): %s", exc)

    def prune(self, *, now: float) -> int:
        try:
            return self.store.prune_judge_cache(before=now - self.max_age_seconds)
        except Exception as exc:
            logger.warning("judge cache prune failed: %s", exc)
            return 0
