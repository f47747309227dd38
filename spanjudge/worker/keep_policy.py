"""What the worker keeps of what it receives: decided at ingest, from the rules.

A rule that samples by trace (``sample_by = "trace"``) picks only traces in the consistent
sample at its rate (:mod:`~spanjudge.evaluators._plan.consistent`), and a sample at
``p`` holds every sample at a lower rate: a trace no such rule keeps at the highest rate among
them can never be picked, so its spans are not stored at all (not decoded either, when the
receiver screens the request: :meth:`IngestKeep.wanted`). A rule that samples by conversation
picks the traces of sampled conversations; a trace's spans wait in the store's hold table
(written before the receiver answers: :mod:`spanjudge._store.holds`) until one of them names
its conversation (the naming span is often the root, the last to arrive), and the trace is
then stored or dropped as a whole. Such a rule decides a target outside any conversation by its
trace, so a trace its id keeps is stored at once. The hold is bounded by spans and by bytes
(the oldest go first, counted); a late span of a trace already stored is stored. Content log
records follow their trace's decision. A rule that samples by target
(the default) may pick any span, so with one of them, or a rule whose rate changes by segment
(a budget), everything is stored as before.

What is not stored is not planned, so planning's counters (rules without a target,
unrecognised spans) count the stored sample only; the spans passed over are counted here
(``spanjudge.ingest.spans``, by outcome) instead.

Example::

    plan = KeepPlan.of(rules)          # rules sampling by trace at 1% and 2%
    keep = IngestKeep(plan, max_held_spans=100_000, hold_seconds=60)
    admission = keep.admit(records, now=time.time())   # .store: the spans of traces kept at 2%
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter, OrderedDict, deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from spanjudge._core.span_record import LogEvent, SpanRecord
from spanjudge.evaluators._plan.consistent import (
    MIN_PROBABILITY,
    keeps,
    key_kept,
    threshold_for,
)
from spanjudge.settings import WorkerSettings

if TYPE_CHECKING:
    from spanjudge._core.telemetry import Telemetry

logger = logging.getLogger("spanjudge.worker.keep_policy")

DECIDED_MEMORY = 100_000
"""Traces whose conversation decision is remembered, to drop the later spans of a trace not
sampled without holding them; the oldest is forgotten first. A later span of a kept trace is
decided by the store, which keeps the trace (a memory forgets: a restart, 250,000 other
traces)."""
DEFAULT_MAX_HELD_BYTES: int = WorkerSettings.model_fields["ingest_hold_max_bytes"].default
"""The hold's byte bound by default: the worker setting ``ingest_hold_max_bytes``'s."""
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

    def trace_kept(self, trace_id: str, trace_state: str | None = None) -> bool:
        """Whether a rule sampling by trace can pick this trace (True when all is stored); the
        ``rv`` of a W3C ``trace_state`` is its randomness when present, as the Collector's
        sampler reads it."""
        if self.everything:
            return True
        if self.trace_rate is None:
            return False
        try:
            return keeps(trace_id, self.trace_rate, trace_state or None)
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
    """A trace with spans in the store's hold table, as this process counts it."""

    first_arrival: float
    spans: int = 0
    size: int = 0
    expired: bool = False
    #: ids held since this process started (a client retrying sends them again: counted once)
    ids: set[str] = field(default_factory=set)


def span_size(span: SpanRecord) -> int:
    """About the bytes a span takes held: its text and its attributes' (the hold's byte bound
    counts this, before the span is encoded)."""
    size = 64 + len(span.name) + _value_size(span.attributes) + _value_size(span.resource)
    for event in span.events:
        size += 32 + len(event.name) + _value_size(event.attributes)
    return size


def _value_size(value: Any, depth: int = 0) -> int:
    if isinstance(value, str):
        return len(value) + 2
    if isinstance(value, dict):
        if depth > 8:
            return 16
        return sum(len(str(k)) + 3 + _value_size(v, depth + 1) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        if depth > 8:
            return 16
        return sum(1 + _value_size(v, depth + 1) for v in value)
    return 8


@dataclass
class Admission:
    """What one request's spans become: written now (``store``), held in the store
    (``hold``), and the held spans of earlier requests released into the spans or discarded.
    :meth:`IngestKeep.admit` makes it; the gate writes it in one transaction, then
    :meth:`IngestKeep.confirm` (or, when the write failed, :meth:`IngestKeep.give_back`)."""

    store: list[SpanRecord] = field(default_factory=list)
    hold: list[SpanRecord] = field(default_factory=list)
    release: list[str] = field(default_factory=list)
    discard: list[str] = field(default_factory=list)
    #: spans by outcome, counted once the write is in
    counts: Counter[str] = field(default_factory=Counter)
    # what admit changed in the view of the hold, undone by give_back
    _added: dict[str, tuple[int, int, bool]] = field(default_factory=dict)
    _added_ids: dict[str, set[str]] = field(default_factory=dict)
    _removed: dict[str, _Held] = field(default_factory=dict)

    @property
    def holds(self) -> bool:
        """True when the write touches the hold table."""
        return bool(self.hold or self.release or self.discard)


class IngestKeep:
    """The ingest decision and its view of the hold (see the module docstring). Thread-safe:
    the receiver calls it from a thread per request.

    Spans waiting for their conversation are written to the store's hold table with the rest
    of their request (:meth:`~spanjudge._store.holds.HoldQueries.admit_spans`), so an
    acknowledged span is never only in memory; this class keeps per trace only how many spans
    and bytes the table holds. ``max_held_spans`` and ``max_held_bytes`` bound the table: past
    either, the traces held longest are discarded (counted ``overflow``, one WARNING a minute).
    ``hold_seconds``: held spans that waited that long without their conversation are counted
    ``expired``; they stay held (their conversation may still be named, by a root that comes
    late) until the bounds or retention take them.
    """

    def __init__(
        self,
        plan: KeepPlan,
        *,
        max_held_spans: int,
        hold_seconds: float,
        max_held_bytes: int = DEFAULT_MAX_HELD_BYTES,
        telemetry: Telemetry | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.plan = plan
        self.max_held_spans = max_held_spans
        self.max_held_bytes = max_held_bytes
        self.hold_seconds = hold_seconds
        self.telemetry = telemetry
        self.clock = clock
        self._lock = threading.Lock()
        self._count_lock = threading.Lock()  # passed_over comes from outside admit's lock
        self._held: OrderedDict[str, _Held] = OrderedDict()  # by first arrival
        self._held_spans = 0
        self._held_bytes = 0
        # (first arrival, trace) of the held traces not counted as expired yet, oldest first
        self._waiting: deque[tuple[float, str]] = deque()
        self._decided: OrderedDict[str, bool] = OrderedDict()
        self._warned_at = -float("inf")
        #: spans by outcome since start (the same as the telemetry counter)
        self.counts: dict[str, int] = {}
        #: content log records not stored: their trace is not in the sample
        self.logs_not_sampled = 0

    # ------------------------------------------------------------------ receiver screen
    def wanted(self, trace_id: bytes, trace_state: str = "") -> bool:
        """Whether the receiver should decode a span of this (raw) trace id: False only for a
        well-formed id of a trace no rule can pick (a malformed id is decoded, and refused by
        the decoder as before). An ``rv`` in ``trace_state`` is the trace's randomness, as
        the Collector reads it."""
        if self.plan.everything or self.plan.waits_for_conversations:
            return True
        if len(trace_id) != 16 or not any(trace_id):
            return True
        if trace_state and "rv:" in trace_state:
            return self.plan.trace_kept(trace_id.hex(), trace_state)
        return self.plan.raw_kept(trace_id)

    def passed_over(self, count: int) -> None:
        """Spans the receiver did not decode (:meth:`wanted` said no)."""
        self._count("not_sampled", count)

    # ------------------------------------------------------------------ the hold
    @property
    def held_spans(self) -> int:
        return self._held_spans

    @property
    def held_bytes(self) -> int:
        return self._held_bytes

    def load(self, held: Iterable[tuple[str, float, int, int]]) -> None:
        """The store's hold as it is (``(trace_id, first held at, spans, bytes)``, oldest
        first): what a process starting again counts."""
        with self._lock:
            self._held.clear()
            self._waiting.clear()
            self._held_spans = self._held_bytes = 0
            for trace_id, first, spans, size in held:
                self._held[trace_id] = _Held(first, spans, size)
                self._waiting.append((first, trace_id))
                self._held_spans += spans
                self._held_bytes += size

    # ------------------------------------------------------------------ decision
    def admit(self, records: Sequence[SpanRecord], now: float | None = None) -> Admission:
        """What becomes of ``records`` (and of the held spans their traces decide)."""
        if self.plan.everything:
            return Admission(store=list(records))
        now = self.clock() if now is None else now
        by_trace: dict[str, list[SpanRecord]] = {}
        for record in records:
            by_trace.setdefault(record.trace_id, []).append(record)
        out = Admission()
        with self._lock:
            self._expire(now, out)
            for trace_id, spans in by_trace.items():
                self._decide(trace_id, spans, out, now)
            overflow = self._bound(out)
        if overflow:
            self._overflowed(overflow, now)
        return out

    def _decide(self, trace_id: str, spans: list[SpanRecord], out: Admission, now: float) -> None:
        if self.plan.trace_kept(trace_id, spans[0].trace_state):
            out.store.extend(spans)
            out.counts["stored"] += len(spans)
            return
        if not self.plan.waits_for_conversations:
            out.counts["not_sampled"] += len(spans)
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
            decided = self._decided.get(trace_id)
            if decided is None:  # the store decides a trace it already keeps (admit_spans)
                self._hold(trace_id, spans, out, now)
                return
            kept = decided
        held = self._take(trace_id, out)
        if kept:
            out.store.extend(spans)
            out.counts["stored"] += len(spans)
            # every kept trace, known held or not: the table is the truth (a restart, or a
            # view of the hold that could not be read)
            out.release.append(trace_id)
            if held is not None:
                out.counts["released"] += held.spans
        else:
            out.counts["not_sampled"] += len(spans)
            if held is not None:
                out.discard.append(trace_id)
                out.counts["not_sampled"] += held.spans

    def _hold(self, trace_id: str, spans: list[SpanRecord], out: Admission, now: float) -> None:
        held = self._held.get(trace_id)
        if held is None:
            held = self._held[trace_id] = _Held(now)
            self._waiting.append((now, trace_id))
            created = True
        else:
            created = False
        # a client retrying sends its held spans again: the table holds each once
        spans = [s for s in spans if s.span_id not in held.ids]
        if not spans:
            return
        held.ids.update(s.span_id for s in spans)
        size = sum(span_size(s) for s in spans)
        held.spans += len(spans)
        held.size += size
        self._held_spans += len(spans)
        self._held_bytes += size
        out.hold.extend(spans)
        out.counts["held"] += len(spans)
        out._added_ids.setdefault(trace_id, set()).update(s.span_id for s in spans)
        spans_before, size_before, was_created = out._added.get(trace_id, (0, 0, False))
        out._added[trace_id] = (
            spans_before + len(spans),
            size_before + size,
            was_created or created,
        )

    def _take(self, trace_id: str, out: Admission) -> _Held | None:
        held = self._held.pop(trace_id, None)
        if held is not None:
            self._held_spans -= held.spans
            self._held_bytes -= held.size
            out._removed.setdefault(trace_id, held)
        return held

    def _remember(self, trace_id: str, kept: bool) -> None:
        self._decided[trace_id] = kept
        self._decided.move_to_end(trace_id)
        while len(self._decided) > DECIDED_MEMORY:
            self._decided.popitem(last=False)

    def _expire(self, now: float, out: Admission | None) -> None:
        """Count the held traces that waited ``hold_seconds`` without their conversation
        (they stay held)."""
        cutoff = now - self.hold_seconds
        waiting = self._waiting
        while waiting and waiting[0][0] <= cutoff:  # (each trace looked at once)
            first, trace_id = waiting.popleft()
            held = self._held.get(trace_id)
            if held is not None and held.first_arrival == first and not held.expired:
                held.expired = True
                self._count("expired", held.spans)

    def _bound(self, out: Admission) -> int:
        dropped = 0
        while self._held and (
            self._held_spans > self.max_held_spans or self._held_bytes > self.max_held_bytes
        ):
            trace_id = next(iter(self._held))
            held = self._take(trace_id, out)
            assert held is not None
            if trace_id in out._added:  # held by this very request: not written at all
                out.hold = [s for s in out.hold if s.trace_id != trace_id]
                out.counts["held"] -= out._added[trace_id][0]
            if trace_id not in out._added or held.spans > out._added[trace_id][0]:
                out.discard.append(trace_id)
            dropped += held.spans
        if dropped:
            out.counts["overflow"] += dropped
        return dropped

    def _overflowed(self, dropped: int, now: float) -> None:
        if now - self._warned_at < WARN_EVERY_SECONDS:
            return
        self._warned_at = now
        logger.warning(
            "the ingest hold of traces waiting for their conversation id is full "
            "(ingest_hold_max_spans = %d, ingest_hold_max_bytes = %d): %d spans dropped, the "
            "oldest first; a conversation sampled among them loses those turns. Raise the "
            'bounds (spanjudge_ingest_spans_total{outcome="overflow"} counts them)',
            self.max_held_spans,
            self.max_held_bytes,
            dropped,
        )

    def confirm(self, out: Admission, stored_by_store: Iterable[str] = ()) -> None:
        """The gate wrote ``out``: count it. ``stored_by_store``: traces whose spans asked
        to be held were stored, the store keeping the trace already."""
        with self._lock:
            for trace_id in stored_by_store:
                held = self._held.get(trace_id)
                added = out._added.get(trace_id, (0, 0, False))
                if held is not None:
                    held.spans -= added[0]
                    held.size -= added[1]
                    self._held_spans -= added[0]
                    self._held_bytes -= added[1]
                    if held.spans <= 0:
                        del self._held[trace_id]
                out.counts["held"] -= added[0]
                out.counts["stored"] += added[0]
                self._remember(trace_id, True)
        for outcome, count in out.counts.items():
            self._count(outcome, count)

    def give_back(self, out: Admission) -> None:
        """The write of ``out`` failed (nothing of it is in the store): the view of the hold
        goes back to what the table holds. The client retries its own spans; the held ones of
        earlier requests are still in the table."""
        with self._lock:
            for trace_id, (spans, size, created) in out._added.items():
                held = self._held.get(trace_id)
                if held is None:
                    continue
                held.spans -= spans
                held.size -= size
                held.ids -= out._added_ids.get(trace_id, set())
                self._held_spans -= spans
                self._held_bytes -= size
                if created and held.spans <= 0:
                    del self._held[trace_id]
            for trace_id, held in out._removed.items():
                spans, size, _ = out._added.get(trace_id, (0, 0, False))
                ids = held.ids - out._added_ids.get(trace_id, set())
                restored = _Held(held.first_arrival, held.spans - spans, held.size - size, ids=ids)
                if restored.spans > 0:
                    self._held[trace_id] = restored
                    self._waiting.appendleft((restored.first_arrival, trace_id))
                    self._held.move_to_end(trace_id, last=False)  # (oldest first, roughly)
                    self._held_spans += restored.spans
                    self._held_bytes += restored.size

    # ------------------------------------------------------------------ content logs
    def logs_kept(self, events: Sequence[LogEvent]) -> list[LogEvent]:
        """The content log records to store: those of traces some rule can still pick, as
        for their spans (a trace still undecided by its conversation keeps its records)."""
        if self.plan.everything:
            return list(events)
        kept: list[LogEvent] = []
        with self._lock:
            for event in events:
                if self.plan.trace_kept(event.trace_id) or (
                    self.plan.waits_for_conversations
                    and self._decided.get(event.trace_id) is not False
                ):
                    kept.append(event)
        self.logs_not_sampled += len(events) - len(kept)
        return kept

    def sweep(self, now: float | None = None) -> None:
        """Count what waited past ``hold_seconds`` (also done on every :meth:`admit`)."""
        with self._lock:
            self._expire(self.clock() if now is None else now, None)

    def _count(self, outcome: str, count: int) -> None:
        if not count:
            return
        with self._count_lock:
            self.counts[outcome] = self.counts.get(outcome, 0) + count
        if self.telemetry is not None:
            self.telemetry.record_ingest(outcome, count)
