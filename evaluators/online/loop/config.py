"""How the online loop runs: one settings object for :class:`~spanjudge.evaluators.online.Monitor`.

Example::

    config = MonitorConfig(interval_seconds=10, settle_seconds=5, concurrency=4)
    mon = Monitor(rules, store="sqlite:///spanjudge.db", config=config)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields


@dataclass(frozen=True, slots=True)
class MonitorConfig:
    """Timing, concurrency and retry settings of the online loop (every time in seconds).

    * ``interval_seconds``: between two ticks of the scheduler;
    * ``settle_seconds``: a trace is settled once its root ended and no span arrived for this
      long; ``idle_seconds``: a conversation is idle after this long without a new span;
    * ``concurrency``: evaluations run at once; ``batch_size``: the most jobs claimed at once
      (a claim never takes more than the free evaluation slots: a job is claimed when a slot
      frees, so leased jobs do not wait behind others);
    * ``lease_seconds``: how long a claimed job is ours before another evaluator may take it
      (a crash costs at most this much delay); it also ages results before they are re-sent;
    * ``max_attempts`` / ``retry_delay_seconds``: transient judge failures (timeouts, 429, 5xx,
      connection errors) are retried in later ticks, ``retry_delay_seconds * attempt`` apart;
    * ``retention_seconds``: stored spans older than this are deleted (``None``: kept);
    * ``flush_timeout_seconds``: the longest a tick waits for the exporters to confirm;
    * ``judge_cache``: reuse a scored result for the same metric (parameters, prompts), judge
      model and rebuilt case instead of calling the judge again (on by default), within
      ``judge_cache_max_age_seconds`` (default a day); older entries are pruned each tick.
    """

    interval_seconds: float = 30.0
    settle_seconds: float = 10.0
    idle_seconds: float = 300.0
    concurrency: int = 8
    batch_size: int = 64
    lease_seconds: float = 300.0
    max_attempts: int = 3
    retry_delay_seconds: float = 30.0
    retention_seconds: float | None = 7 * 24 * 3600
    flush_timeout_seconds: float = 2.0
    judge_cache: bool = True
    judge_cache_max_age_seconds: float = 24 * 3600

    def __post_init__(self) -> None:
        if not isinstance(self.judge_cache, bool):
            raise ValueError(
                f"MonitorConfig.judge_cache must be true or false, got {self.judge_cache!r}"
            )
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "judge_cache":
                continue
            if value is None and f.name == "retention_seconds":
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"MonitorConfig.{f.name} must be a number, got {value!r}")
            if not math.isfinite(value):
                raise ValueError(f"MonitorConfig.{f.name} must be finite, got {value!r}")
        for name in ("concurrency", "batch_size", "max_attempts"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"MonitorConfig.{name} must be an integer >= 1, got {value!r}")
        for name in ("interval_seconds", "lease_seconds"):
            if getattr(self, name) <= 0:
                raise ValueError(f"MonitorConfig.{name} must be positive")
        for name in ("settle_seconds", "idle_seconds", "retry_delay_seconds"):
            if getattr(self, name) < 0:
                raise ValueError(f"MonitorConfig.{name} must not be negative")
        if self.flush_timeout_seconds < 0:
            raise ValueError("MonitorConfig.flush_timeout_seconds must not be negative")
        if self.judge_cache_max_age_seconds <= 0:
            raise ValueError("MonitorConfig.judge_cache_max_age_seconds must be positive")
        if self.retention_seconds is not None and self.retention_seconds <= 0:
            raise ValueError("MonitorConfig.retention_seconds must be positive or None")
