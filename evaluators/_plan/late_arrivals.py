"""Late arrivals, counted and said: what planning does again for spans that came after their
trace was planned and for conversations that got new turns after they were judged.

:class:`LateCounts` is what :class:`~spanjudge.evaluators._plan.planner.Planner`
counts (``planner.late``, since start, for the metrics endpoint); :class:`LateLog` says it at
INFO at most once a minute; :func:`among` and :func:`covers` are the two questions planning asks.

Example::

    log = LateLog()
    log.add(LateCounts(traces=1, spans=2, targets=1))   # INFO now; the next within 60 s waits
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from spanjudge._core.span_record import EvaluationRecord, SpanRecord
from spanjudge.evaluators._plan.coverage import is_evaluation
from spanjudge.evaluators._rebuild.targets import Target

logger = logging.getLogger("spanjudge.planner")

# The shortest time between two INFO lines about late arrivals (counts add up in between).
LATE_LOG_SECONDS = 60.0


def among(targets: list[Target], late: set[str] | None) -> list[Target]:
    """``targets`` whose span is among ``late`` (all of them when ``late`` is None)."""
    return targets if late is None else [t for t in targets if t.span_id in late]


def late_among(spans: list[SpanRecord], late: set[str] | None) -> set[str] | None:
    """The ids of ``spans`` among the store's ``late`` ones, our own evaluation spans left out
    (None when the trace is planned for the first time)."""
    if late is None:
        return None
    return {s.span_id for s in spans if s.span_id in late and not is_evaluation(s)}


def covers(result: EvaluationRecord | None, target: Target) -> bool:
    """Whether ``result`` judged the conversation ``target`` over the turns it has now: the
    same last turn (the result hangs under the last turn it saw) and the same end."""
    return (
        result is not None
        and result.span_id == target.span_id
        and result.target_end_unix_nano == target.end_unix_nano
    )


@dataclass
class LateCounts:
    """Late arrivals planned again since the planner started (for the metrics endpoint), and
    since the last INFO line about them."""

    traces: int = 0  # traces planned again for late spans
    spans: int = 0  # the late spans
    targets: int = 0  # targets among them planned (sampled, within budget)
    conversations: int = 0  # conversations judged again over new turns

    def trace(self, trace_id: str, spans: set[str], *, targets: int) -> None:
        """Count one trace planned again for its late ``spans`` (``targets``: planned)."""
        self.traces += 1
        self.spans += len(spans)
        self.targets += targets
        logger.debug(
            "trace %s planned again: %d span(s) arrived after it was planned, %d new target(s)",
            trace_id,
            len(spans),
            targets,
        )

    def add(self, other: LateCounts) -> None:
        self.traces += other.traces
        self.spans += other.spans
        self.targets += other.targets
        self.conversations += other.conversations


class LateLog:
    """Says at INFO what arrived late and was planned again: at once the first time, then at
    most every ``every`` seconds with the counts since the line before (steady late traffic is
    one line a minute, not one a tick). Each trace and conversation is logged at DEBUG."""

    def __init__(self, every: float = LATE_LOG_SECONDS) -> None:
        self.every = every
        self.pending = LateCounts()
        self._next = 0.0

    def add(self, counts: LateCounts) -> None:
        self.pending.add(counts)
        moment = time.monotonic()
        if moment < self._next or not (self.pending.traces or self.pending.conversations):
            return
        late, self.pending, self._next = self.pending, LateCounts(), moment + self.every
        logger.info(
            "late arrivals planned again: %d trace(s) with %d span(s) that came after the trace "
            "was planned (%d new target(s) planned), %d conversation(s) judged again over new "
            "turns (earlier results kept as superseded)",
            late.traces,
            late.spans,
            late.targets,
            late.conversations,
        )
