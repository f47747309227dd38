"""What the worker keeps of what it receives: decided at ingest, from the rules.

A rule that samples by trace (``sample_by = "trace"``) picks only traces in the consistent
sample at its rate (:mod:`~spanjudge.evaluators._plan.consistent`), and a sample at
``p`` holds every sample at a lower rate: a trace no such rule keeps at the highest rate among
them can never be picked, so its spans are not stored at all (not decoded either, when the
receiver screens the request: :meth:`IngestKeep.wanted`). A rule that samples by conversation
picks the traces of sampled conversations; a trace's spans wait in a bounded buffer until one
of them names its conversation (the naming span is often the root, the last to arrive), and
the trace is then stored or dropped as a whole. Such a rule decides a target outside any
conversation by its trace, so a trace its id keeps is stored at once, and one that names no
conversation within ``hold_seconds`` is dropped (no rule can pick it). A rule that samples by target
(the default) may pick any span, so with one of them, or a rule whose rate changes by segment
(a budget), everything is stored as before.

What is not stored is not planned, so planning's counters (rules without a target,
unrecognised spans) count the stored sample only; the spans passed over are counted here
(``spanjudge.ingest.spans``, by outcome) instead.

Example::

    plan = KeepPlan.of(rules)          # rules sampling by trace at 1% and 2%
    keep = IngestKeep(plan, max_held_spans=100_000, hold_seconds=60)
    stored = keep.admit(records, now=time.time())   # the spans of traces kept at 2%
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

from spanjudge._core.span_record import SpanRecord
from spanjudge.evaluators._plan.consistent import (
    MIN_PROBABILITY,
    keeps,
    key_kept,
    threshold_for,
)

if TYPE_CHECKING:
    from spanjudge._core.telemetry import Telemetry

logger = logging.getLogger("spanjudge.worker.keep_policy")

DECIDED_MEMORY = 100_000
"""Traces whose conversation decision is remembered (later spans of a kept trace often carry
no conversation id themselves); the oldest is forgotten first."""
WARN_EVERY_SECONDS = 60.0
"""At most one WARNING a minute about spans dropped from a full buffer."""


def _sample_by(rule: Any) -> str:
    return str(getattr(rule, "sample_by", "target"))


def _rate(rule: Any) -> float | None:
    """The rule's fixed probability, or None when it may rise for some targets (a budget or a
    precision target allocates per segment, up to its risk rate)."""
    if getattr(rule, "has_target", False):
        return None
    return float(rule.sample_rate)


@dataclass(frozen=True)
class KeepPlan:
    """Which traces some rule can still pick, read once from the rules.

    ``everything``: a rule may pick any span (it samples by target, or its rate changes by
    segment), so all is stored. Else ``trace_rate`` is the highest rate of all the rules (a
    trace kept by its id at that rate is stored at once: rules sampling by conversation decide
    a target outside any conversation by its trace) and ``conversation_rate`` that of the rules
    sampling by conversation (None: there are none).
    """

    everything: bool = True
    trace_rate: float | None = None
    conversation_rate: float | None = None

    @classmethod
    def of(cls, rules: Sequence[Any]) -> KeepPlan:
        """The plan for these rules (no rules: nothing can be picked, all is stored as
        before, so a worker started without rules loses nothing)."""
        trace: list[float] = []
        conversation: list[float] = []
        for rule in rules:
            by, rate = _sample_by(rule), _rate(rule)
            if by not in ("trace", "conversation") or rate is None:
                return cls()
            (trace if by == "trace" else conversation).append(rate)
        if not trace and not conversation:
            return cls()
        # a rule sampling by conversation decides a target outside any conversation by its
        # trace (sampler.rule_keeps): such traces are kept at its rate too, without waiting
        return cls(
            everything=False,
            trace_rate=max(trace + conversation),
            conversation_rate=max(conversation) if conversation else None,
        )

    @property
    def waits_for_conversations(self) -> bool:
        return not self.everything and self.conversation_rate is not None

    def trace_kept(self, trace_id: str) -> bool:
        """Whether a rule sampling by trace can pick this trace (True when all is stored)."""
        if self.everything:
            return True
        if self.trace_rate is None:
            return False
        try:
            return keeps(trace_id, self.trace_rate)
        except ValueError:  # text no codec takes (never from the decoder): stored, the safe side
            return True

    @cached_property
    def _threshold(self) -> int | None:
        """The rejection threshold of ``trace_rate`` (None: keep all, or none at all)."""
        rate = self.trace_rate
        if rate is None or rate <= 0.0 or rate >= 1.0:
            return None
        return threshold_for(max(rate, MIN_PROBABILITY))

    def raw_kept(self, trace_id: bytes) -> bool:
        """:meth:`trace_kept` of a well-formed raw id (16 bytes, not all zero), for the
        receiver's screen: the randomness is its last 7 bytes, read without making the hex
        text (``consistent.keeps`` on the hex costs ~15 us an id, this ~0.3 us, measured on the
        shared 2-core machine; tests/worker/test_ingest_keep.py holds the two together)."""
        if self.everything:
            return True
        threshold = self._threshold
        if threshold is None:
            return self.trace_rate is not None and self.trace_rate >= 1.0
        return int.from_bytes(trace_id[9:], "big") >= threshold

    def conversation_kept(self, conversation_id: str) -> bool:
        rate = self.conversation_rate
        if rate is None:
            return False
        try:
            return key_kept(conversation_id, rate)
        except ValueError:  # as in trace_kept
            return True

    def describe(self) -> str:
        """One line for the worker's start log."""
        if self.everything:
            return "every span received is stored (a rule samples by target, or enrich mode)"
        parts = []
        if self.trace_rate is not None:
            parts.append(f"traces sampled at {self.trace_rate:.4g} (by trace id)")
        if self.conversation_rate is not None:
            parts.append(f"conversations sampled at {self.conversation_rate:.4g}")
        return "only the spans of " + " and of ".join(parts) + " are stored"


@dataclass
class _Held:
    first_arrival: float
    spans: list[SpanRecord]


class IngestKeep:
    """The ingest decision with its buffer (see the module docstring). Thread-safe: the
    receiver calls it from a thread per request.

    ``max_held_spans``: spans waiting for their conversation at most; past it the traces held
    longest are dropped (counted, one WARNING a minute). ``hold_seconds``: how long a trace
    may wait for the span that names its conversation.
    """

    def __init__(
        self,
        plan: KeepPlan,
        *,
        max_held_spans: int,
        hold_seconds: float,
        telemetry: Telemetry | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.plan = plan
        self.max_held_spans = max_held_spans
        self.hold_seconds = hold_seconds
        self.telemetry = telemetry
        self.clock = clock
        self._lock = threading.Lock()
        self._count_lock = threading.Lock()  # passed_over comes from outside admit's lock
        self._held: OrderedDict[str, _Held] = OrderedDict()  # by first arrival
        self._held_spans = 0
        self._decided: OrderedDict[str, bool] = OrderedDict()
        self._warned_at = -float("inf")
        #: spans by outcome since start (the same as the telemetry counter)
        self.counts: dict[str, int] = {}

    # ------------------------------------------------------------------ receiver screen
    def wanted(self, trace_id: bytes) -> bool:
        """Whether the receiver should decode a span of this (raw) trace id: False only for a
        well-formed id of a trace no rule can pick (a malformed id is decoded, and refused by
        the decoder as before)."""
        if self.plan.everything or self.plan.waits_for_conversations:
            return True
        if len(trace_id) != 16 or not any(trace_id):
            return True
        return self.plan.raw_kept(trace_id)

    def passed_over(self, count: int) -> None:
        """Spans the receiver did not decode (:meth:`wanted` said no)."""
        self._count("not_sampled", count)

    # ------------------------------------------------------------------ decision
    @property
    def held_spans(self) -> int:
        return self._held_spans

    def admit(self, records: Sequence[SpanRecord], now: float | None = None) -> list[SpanRecord]:
        """The spans to store now, out of ``records`` and the buffer; the rest are held or
        dropped, and counted."""
        if self.plan.everything:
            return list(records)
        now = self.clock() if now is None else now
        by_trace: dict[str, list[SpanRecord]] = {}
        for record in records:
            by_trace.setdefault(record.trace_id, []).append(record)
        stored: list[SpanRecord] = []
        with self._lock:
            self._expire(now)
            for trace_id, spans in by_trace.items():
                self._decide(trace_id, spans, stored, now)
            overflow = self._bound()
        if overflow:
            self._overflowed(overflow, now)
        return stored

    def _decide(
        self, trace_id: str, spans: list[SpanRecord], stored: list[SpanRecord], now: float
    ) -> None:
        if self.plan.trace_kept(trace_id):
            stored.extend(spans)
            self._count("stored", len(spans))
            return
        if not self.plan.waits_for_conversations:
            self._count("not_sampled", len(spans))
            return
        named = {c for c in (s.conversation_id for s in spans) if c}
        if named:
            # a kept trace stays kept (its first conversation was sampled); a trace naming a
            # second conversation is kept when either is sampled
            kept = bool(self._decided.get(trace_id)) or any(
                self.plan.conversation_kept(c) for c in sorted(named)
            )
            self._remember(trace_id, kept)
        else:
            kept = self._decided.get(trace_id)  # type: ignore[assignment]
            if kept is None:
                self._hold(trace_id, spans, now)
                return
        held = self._held.pop(trace_id, None)
        if held is not None:
            self._held_spans -= len(held.spans)
            if kept:
                stored.extend(held.spans)
                self._count("released", len(held.spans))
                ids = {s.span_id for s in held.spans}
                spans = [s for s in spans if s.span_id not in ids]
            else:
                self._count("not_sampled", len(held.spans))
        if kept:
            stored.extend(spans)
            self._count("stored", len(spans))
        else:
            self._count("not_sampled", len(spans))

    def _hold(self, trace_id: str, spans: list[SpanRecord], now: float) -> None:
        held = self._held.get(trace_id)
        if held is None:
            held = self._held[trace_id] = _Held(now, [])
        # a client retrying a request sends its held spans again: each is held once
        ids = {s.span_id for s in held.spans}
        new = [s for s in spans if s.span_id not in ids]
        held.spans.extend(new)
        self._held_spans += len(new)
        self._count("held", len(new))

    def _remember(self, trace_id: str, kept: bool) -> None:
        self._decided[trace_id] = kept
        self._decided.move_to_end(trace_id)
        while len(self._decided) > DECIDED_MEMORY:
            self._decided.popitem(last=False)

    def _expire(self, now: float) -> None:
        """Traces that named no conversation within ``hold_seconds``: no rule can pick them."""
        cutoff = now - self.hold_seconds
        while self._held:
            trace_id, held = next(iter(self._held.items()))
            if held.first_arrival > cutoff:
                break
            del self._held[trace_id]
            self._held_spans -= len(held.spans)
            self._count("expired", len(held.spans))

    def _bound(self) -> int:
        dropped = 0
        while self._held_spans > self.max_held_spans and self._held:
            _, held = self._held.popitem(last=False)
            self._held_spans -= len(held.spans)
            dropped += len(held.spans)
        if dropped:
            self._count("overflow", dropped)
        return dropped

    def _overflowed(self, dropped: int, now: float) -> None:
        if now - self._warned_at < WARN_EVERY_SECONDS:
            return
        self._warned_at = now
        logger.warning(
            "the ingest buffer of traces waiting for their conversation id is full "
            "(ingest_hold_max_spans = %d): %d spans dropped, the oldest first; a conversation "
            "sampled among them loses those turns. Raise ingest_hold_max_spans or lower "
            'ingest_hold_seconds (spanjudge_ingest_spans_total{outcome="overflow"} counts them)',
            self.max_held_spans,
            dropped,
        )

    def give_back(self, spans: Sequence[SpanRecord], now: float | None = None) -> None:
        """Spans :meth:`admit` let through whose write failed: the client retries its own
        spans, not the ones released to it from the buffer, so the spans of traces decided
        by their conversation wait again (the retry decides them anew); the others are the
        client's, kept by their trace id, and come again with the retry."""
        now = self.clock() if now is None else now
        with self._lock:
            for trace_id in {s.trace_id for s in spans}:
                self._decided.pop(trace_id, None)
            waiting = [s for s in spans if not self.plan.trace_kept(s.trace_id)]
            by_trace: dict[str, list[SpanRecord]] = {}
            for span in waiting:
                by_trace.setdefault(span.trace_id, []).append(span)
            for trace_id, held in by_trace.items():
                self._hold(trace_id, held, now)
            overflow = self._bound()
        if overflow:
            self._overflowed(overflow, now)

    def sweep(self, now: float | None = None) -> None:
        """Drop what waited past ``hold_seconds`` (also done on every :meth:`admit`)."""
        with self._lock:
            self._expire(self.clock() if now is None else now)

    def _count(self, outcome: str, count: int) -> None:
        if not count:
            return
        with self._count_lock:
            self.counts[outcome] = self.counts.get(outcome, 0) + count
        if self.telemetry is not None:
            self.telemetry.record_ingest(outcome, count)
