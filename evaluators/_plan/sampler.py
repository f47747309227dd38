"""Deterministic sampling and judge budgets.

:func:`is_sampled` hashes (rule name, target id), so every process, every worker and every
replay picks the same targets without coordination. A rule may instead sample by trace or by
conversation (:data:`SAMPLE_BY`, :func:`rule_keeps`): then the decision is OpenTelemetry's
consistent probability sampling (:mod:`~spanjudge.evaluators._plan.consistent`), the
same for every rule at the same rate, for an SDK sampler and for a Collector
``probabilistic_sampler``; :func:`upstream_rate` says how much of the traffic the rules can
ever pick, so the Collector may drop the rest. :class:`Budget` caps how many targets a rule
admits per minute and how much judge money it spends per UTC day.
"""

from __future__ import annotations

import hashlib
import math
import threading
from collections import deque
from collections.abc import Iterable
from typing import TYPE_CHECKING, Literal, Protocol

from spanjudge.errors import ConfigError
from spanjudge.evaluators._plan.consistent import keeps, key_kept

if TYPE_CHECKING:
    from spanjudge.evaluators._rebuild.targets import Target

_TWO_64 = float(2**64)
RATE_BUDGET = "rate_budget"
COST_BUDGET = "cost_budget"
DAY_BUDGET = "day_budget"
_WINDOW_SECONDS = 60.0
_DAY_SECONDS = 86400


def sample_point(rule_name: str, target_id: str) -> float:
    """The target's fixed position in [0, 1) for this rule (64 bits of BLAKE2b)."""
    digest = hashlib.blake2b(f"{rule_name}\x1f{target_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / _TWO_64


def is_sampled(rule_name: str, target_id: str, rate: float) -> bool:
    """Whether ``rule_name`` evaluates ``target_id`` at sample ``rate``.

    The same answer in every process and every replay (no ``hash()`` salt, no random state);
    raising the rate only adds targets. Rate 1 samples all, rate 0 none.

    Example::

        >>> is_sampled("faithfulness-llm", "00f067aa0ba902b7", 1.0)
        True
        >>> is_sampled("faithfulness-llm", "00f067aa0ba902b7", 0.0)
        False
    """
    if rate >= 1.0:
        return True
    if not rate > 0.0:  # also NaN
        return False
    return sample_point(rule_name, target_id) < rate


SampleBy = Literal["target", "trace", "conversation"]
SAMPLE_BY: tuple[SampleBy, ...] = ("target", "trace", "conversation")
"""What a rule's sample decision is keyed on: ``"target"`` (the default: a hash of the rule's
name and the target id, independent per rule), ``"trace"`` (the trace id's randomness, as
OpenTelemetry's samplers decide) or ``"conversation"`` (a hash of the conversation id)."""


def rule_keeps(
    rule_name: str,
    sample_by: str,
    target_id: str,
    trace_id: str | None,
    conversation_id: str | None,
    rate: float,
) -> bool:
    """Whether a rule sampling by ``sample_by`` at ``rate`` keeps this target.

    ``"trace"``: the trace is in OpenTelemetry's consistent sample at ``rate``.
    ``"conversation"``: the conversation id's 56-bit hash clears the same threshold; a target
    outside any conversation is decided by its trace. ``"target"``: :func:`is_sampled`.

    Example::

        >>> rule_keeps("r", "trace", "s1", "4bf92f3577b34da6a3ce929d0e0e4736", None, 0.5)
        True
    """
    if sample_by == "conversation" and conversation_id:
        return key_kept(conversation_id, rate)
    if sample_by in ("trace", "conversation") and trace_id:
        return keeps(trace_id, rate)
    return is_sampled(rule_name, target_id, rate)


def target_kept(rule: SamplingRule, target: Target, rate: float) -> bool:
    """:func:`rule_keeps` for a planned ``target`` (its id, trace and conversation)."""
    return rule_keeps(
        rule.name, rule.sample_by, target.target_id, target.trace_id, target.conversation_id, rate
    )


class SamplingRule(Protocol):
    """What :func:`upstream_rate` reads of a rule (a
    :class:`~spanjudge.evaluators._plan.rules.Rule` has it all)."""

    @property
    def name(self) -> str: ...
    @property
    def target(self) -> str: ...
    @property
    def sample_rate(self) -> float: ...
    @property
    def sample_by(self) -> str: ...
    @property
    def has_target(self) -> bool: ...


def presample_blockers(rules: Iterable[SamplingRule]) -> list[tuple[str, str]]:
    """The rules that keep a trace sampler upstream from dropping anything, each with why:
    ``(rule name, reason)``. Empty when every rule samples by trace at a fixed rate."""
    blockers: list[tuple[str, str]] = []
    for rule in rules:
        if rule.sample_by != "trace":
            blockers.append((rule.name, f"samples by {rule.sample_by}, not by trace"))
        elif rule.has_target:
            blockers.append(
                (rule.name, "states a budget or precision target: its rate changes over time")
            )
    return blockers


def upstream_rate(rules: Iterable[SamplingRule]) -> float:
    """The share of traces an upstream trace sampler (the Collector's
    ``probabilistic_sampler`` in proportional mode, an SDK's trace-id-ratio sampler) must
    keep so that every trace these rules can pick still arrives: the highest rate when every
    rule samples by trace at a fixed rate, else 1.0 (see :func:`presample_blockers`).

    Example::

        rules = [Rule(m1, target="trace", sample_rate=0.02, sample_by="trace"),
                 Rule(m2, target="llm", sample_rate=0.01, sample_by="trace")]
        upstream_rate(rules)   # 0.02: the Collector may drop 98% of the traces
    """
    listed = list(rules)
    if not listed or presample_blockers(listed):
        return 1.0
    return max(min(1.0, max(0.0, rule.sample_rate)) for rule in listed)


class Budget:
    """Per-rule admission budget, on the caller's clock (Unix seconds). Thread-safe.

    * ``max_per_minute``: at most this many admissions in any sliding 60-second window.
      :meth:`allow` counts an admission when it returns ``None`` (targets are admitted at
      planning time, before their cost is known).
    * ``max_cost_per_day``: once the judge cost recorded for the current UTC day reaches this
      amount, nothing more is admitted until the day rolls over. :meth:`record` adds a finished
      evaluation's cost; :meth:`seed` restores the day's spend after a restart.
    * ``max_per_day``: at most this many admissions in the current UTC day (a rule's
      ``budget_per_day``: the allocation plans under it, this makes it a cap);
      :meth:`seed_count` restores the day's count after a restart.

    Example::

        budget = Budget(max_per_minute=2, max_cost_per_day=1.0)
        budget.allow(now=0.0)    # None: admitted
        budget.allow(now=1.0)    # None
        budget.allow(now=2.0)    # "rate_budget"
        budget.record(1.5, now=3.0)
        budget.allow(now=61.0)   # "cost_budget": 1.5 spent today
    """

    def __init__(
        self,
        max_per_minute: int | None = None,
        max_cost_per_day: float | None = None,
        max_per_day: float | None = None,
    ) -> None:
        if max_per_minute is not None and (
            isinstance(max_per_minute, bool)
            or not isinstance(max_per_minute, int)
            or max_per_minute <= 0
        ):
            raise ConfigError(f"max_per_minute must be a positive integer, got {max_per_minute!r}")
        if max_cost_per_day is not None and (
            isinstance(max_cost_per_day, bool)
            or not isinstance(max_cost_per_day, (int, float))
            or not math.isfinite(max_cost_per_day)
            or max_cost_per_day <= 0
        ):
            raise ConfigError(
                f"max_cost_per_day must be a positive number, got {max_cost_per_day!r}"
            )
        if max_per_day is not None and (
            isinstance(max_per_day, bool)
            or not isinstance(max_per_day, (int, float))
            or not max_per_day > 0
        ):
            raise ConfigError(f"max_per_day must be a positive number, got {max_per_day!r}")
        self.max_per_minute = max_per_minute
        self.max_per_day = max_per_day
        self.max_cost_per_day = None if max_cost_per_day is None else float(max_cost_per_day)
        self._lock = threading.Lock()
        self._admitted: deque[float] = deque()
        self._spent = 0.0
        self._count = 0  # admissions in the budget day
        self._day: int | None = None  # UTC day number the spend belongs to; None: next call's

    # -------------------------------------------------------------- internals (lock held)
    def _roll(self, now: float) -> None:
        day = int(now // _DAY_SECONDS)
        if self._day is None:
            self._day = day
        elif day != self._day:
            # a new UTC day: yesterday's spend no longer counts (time going back also resets,
            # which is the safe side for a clock the caller controls)
            self._day = day
            self._spent = 0.0
            self._count = 0

    def _prune(self, now: float) -> None:
        horizon = now - _WINDOW_SECONDS
        while self._admitted and self._admitted[0] <= horizon:
            self._admitted.popleft()

    # -------------------------------------------------------------- API
    def allow(self, now: float) -> str | None:
        """``None`` and one admission counted, or the skip reason ``"cost_budget"`` /
        ``"rate_budget"`` (nothing counted)."""
        with self._lock:
            self._roll(now)
            if self.max_cost_per_day is not None and self._spent >= self.max_cost_per_day:
                return COST_BUDGET
            if self.max_per_day is not None and self._count + 1 > self.max_per_day:
                return DAY_BUDGET
            if self.max_per_minute is not None:
                self._prune(now)
                if len(self._admitted) >= self.max_per_minute:
                    return RATE_BUDGET
                self._admitted.append(now)
            self._count += 1
            return None

    def record(self, cost: float | None, now: float) -> None:
        """Add a finished evaluation's judge cost (USD) to the day's spend."""
        if (
            cost is None
            or not isinstance(cost, (int, float))
            or not math.isfinite(cost)
            or cost <= 0
        ):
            return
        with self._lock:
            self._roll(now)
            self._spent += float(cost)

    def seed(self, spent_today: float, now: float | None = None) -> None:
        """Resume the day's spend read from the store after a restart.

        With ``now`` the spend belongs to that UTC day; without it, to the day of the next
        :meth:`allow`/:meth:`record` call.
        """
        with self._lock:
            self._spent = max(0.0, float(spent_today or 0.0))
            self._day = None if now is None else int(now // _DAY_SECONDS)

    def seed_count(self, admitted_today: int, now: float) -> None:
        """Resume the day's admissions (the rule's results of that UTC day) after a restart."""
        with self._lock:
            self._roll(now)
            self._count = max(0, int(admitted_today))

    @property
    def spent_today(self) -> float:
        """Cost recorded for the current budget day."""
        with self._lock:
            return self._spent

    def admitted_in_window(self, now: float) -> int:
        """Admissions counted in the 60 seconds before ``now``."""
        with self._lock:
            self._prune(now)
            return len(self._admitted)
