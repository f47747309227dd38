"""Judge outages, said once and counted: a judge that stops answering is one WARNING when it
starts failing and one INFO when it answers again, however many evaluations it fails meanwhile.

The loop retries a transiently failed evaluation (:data:`TRANSIENT_ERRORS`: timeouts, 429, 5xx,
connection errors) on its retry schedule (``max_attempts``, ``retry_delay_seconds``,
``retry_max_delay_seconds``); :class:`JudgeHealth` watches the outcomes. The first transient
failure while the judge was answering starts an outage; the first evaluation that gives up
(its attempts used up) inside it is a second WARNING, since results are now recorded as errors;
the first answer ends it with an INFO line: how long it lasted, attempts failed, evaluations
given up (``spanjudge backfill --retry-errors`` evaluates those again).

Example::

    health = JudgeHealth(clock=time.time, retry_window=1950.0)
    health.observe(errored_record, retried=True)   # WARNING: the judge is failing
    health.observe(errored_record, retried=True)   # counted, not logged
    health.observe(scored_record, retried=False)   # INFO: answering again after ...
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from spanjudge._core.log_text import log_text
from spanjudge._core.span_record import EvaluationRecord

logger = logging.getLogger("spanjudge.monitor")

# Judge failures worth another attempt in a later tick; anything else is recorded at once.
TRANSIENT_ERRORS = frozenset(
    {"judge_timeout", "judge_rate_limited", "judge_connection", "judge_server_error"}
)
# Characters of the judge's error message quoted in the outage WARNING (it may echo the provider).
MESSAGE_CHARS = 300


def duration(seconds: float) -> str:
    """``"45 s"``, ``"32.5 min"``, ``"2.0 h"``."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


class JudgeHealth:
    """Whether the judge answers, as this process's evaluations see it; see the module
    docstring. Counters for the metrics endpoint: :attr:`outages` (begun), :attr:`failed`
    (attempts failed transiently), :attr:`gave_up` (evaluations recorded as errors after their
    last attempt); :attr:`down_since` is when the current outage began (None: answering)."""

    def __init__(self, *, clock: Callable[[], float], retry_window: float) -> None:
        self.clock = clock
        self.retry_window = retry_window
        self.outages = 0
        self.failed = 0
        self.gave_up = 0
        self.down_since: float | None = None
        self._failed_now = 0  # in the current outage
        self._gave_up_now = 0

    @property
    def down(self) -> bool:
        return self.down_since is not None

    def observe(self, record: EvaluationRecord, *, retried: bool) -> None:
        """Take one finished attempt: ``record`` as the metric left it, ``retried`` when the
        job was given back for another attempt."""
        if record.status == "error" and record.error_type in TRANSIENT_ERRORS:
            self._failing(record, retried=retried)
        elif record.judge_calls and self.down_since is not None:
            self._recovered()

    def _failing(self, record: EvaluationRecord, *, retried: bool) -> None:
        self.failed += 1
        if self.down_since is None:
            self.down_since = self.clock()
            self.outages += 1
            self._failed_now = self._gave_up_now = 0
            logger.warning(
                "the judge is failing (%s: %s); evaluations are retried for up to %s before "
                "they are recorded as errors (max_attempts, retry_delay_seconds, "
                "retry_max_delay_seconds). Further failures are counted, not logged, until it "
                "answers again",
                record.error_type,
                log_text(record.error_message or "no message", MESSAGE_CHARS),
                duration(self.retry_window),
            )
        self._failed_now += 1
        if retried:
            return
        self.gave_up += 1
        self._gave_up_now += 1
        if self._gave_up_now == 1:
            logger.warning(
                "the judge has been failing for %s, longer than the retry schedule: "
                "evaluations are now recorded as errors; once it answers, "
                "`spanjudge backfill --retry-errors --since <when>` evaluates them again",
                duration(self.clock() - self.down_since),
            )

    def _recovered(self) -> None:
        assert self.down_since is not None
        lasted = self.clock() - self.down_since
        self.down_since = None
        logger.info(
            "the judge answers again after %s: %d attempt(s) failed meanwhile, %d evaluation(s) "
            "recorded as errors%s",
            duration(lasted),
            self._failed_now,
            self._gave_up_now,
            " (`spanjudge backfill --retry-errors` evaluates them again)"
            if self._gave_up_now
            else "",
        )
