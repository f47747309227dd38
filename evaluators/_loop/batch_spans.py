"""A claim batch's traces, each read once for all the batch's jobs of it (issue 30 item 7).

Each job used to read its whole trace: a trace of 50,000 spans with 1,000 LLM calls was read
once per call, and kept a core busy while other clients' evaluations waited. The drain makes
one :class:`BatchSpans` per claim and hands it to every job of that claim.

Example::

    shared = BatchSpans(jobs)
    spans, targets = shared.take(store, rule, job.trace_id)  # read on the first take only
    target = targets.get(job.target_id)
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

from spanjudge._core.span_record import SpanRecord
from spanjudge._store.models import Job
from spanjudge._store.sql import SpanStore
from spanjudge.evaluators._plan.rules import Rule
from spanjudge.evaluators._rebuild.loading import load_trace
from spanjudge.evaluators._rebuild.targets import Target, find_targets

__all__ = ["BatchSpans", "by_id"]


class BatchSpans:
    """The traces of one claim batch, each loaded (and its targets found, per rule) once and
    shared by the batch's jobs of that trace; a trace is dropped when its last job took it, so
    the batch holds no more spans than the jobs still to prepare need.

    Not thread-safe: a batch's jobs are prepared one at a time (on the drain's store thread,
    or on the event loop). Spans are shared, not copied: rebuilding a case only reads them.
    """

    def __init__(self, jobs: Sequence[Job]) -> None:
        self._jobs: Sequence[Job] | None = jobs  # counted on the first take
        self._waiting: Counter[str] = Counter()
        self._spans: dict[str, list[SpanRecord]] = {}
        self._targets: dict[tuple[str, str], dict[str, Target]] = {}

    def take(
        self, store: SpanStore, rule: Rule, trace_id: str
    ) -> tuple[list[SpanRecord], dict[str, Target]]:
        """A trace's spans and ``rule``'s targets in it by target id, for one job of it."""
        if self._jobs is not None:
            self._waiting.update(
                job.trace_id
                for job in self._jobs
                if job.target_type != "conversation" and job.trace_id
            )
            self._jobs = None
        try:
            spans = self._spans.get(trace_id)
            if spans is None:
                spans = self._spans[trace_id] = load_trace(store, trace_id)
            targets = self._targets.get((trace_id, rule.name))
            if targets is None:
                targets = by_id(find_targets(rule, spans))
                self._targets[(trace_id, rule.name)] = targets
            return spans, targets
        finally:
            # counted whether or not the load failed: a failed job is released, not retaken
            self._waiting[trace_id] -= 1
            if self._waiting[trace_id] <= 0:
                del self._waiting[trace_id]
                self._spans.pop(trace_id, None)
                for key in [key for key in self._targets if key[0] == trace_id]:
                    del self._targets[key]


def by_id(targets: Iterable[Target]) -> dict[str, Target]:
    """Targets by target id, the first of an id kept (as the scan for one job's found it)."""
    found: dict[str, Target] = {}
    for target in targets:
        found.setdefault(target.target_id, target)
    return found
