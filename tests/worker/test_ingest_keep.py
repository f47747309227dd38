"""The ingest decision alone (spanjudge/worker/keep_policy.py): which rules let the worker store
little, which traces it stores, and the bounded buffer of traces waiting for the span that
names their conversation (held, released, expired, dropped on overflow: all counted)."""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass

import pytest

from spanjudge._core.span_record import SpanRecord
from spanjudge.evaluators._plan.consistent import keeps, key_kept
from spanjudge.tracer import _attributes as attrs
from spanjudge.worker.keep_policy import IngestKeep, KeepPlan


@dataclass
class FakeRule:
    """What the plan reads of a rule (the real Rule has these fields and more)."""

    sample_by: str = "target"
    sample_rate: float = 1.0
    has_target: bool = False


def trace_ids(n: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    return [f"{rng.getrandbits(128) | 1:032x}" for _ in range(n)]


def waiting_ids(n: int, rate: float) -> list[str]:
    """Trace ids a conversation rule at ``rate`` does not keep by themselves: they wait."""
    return [t for t in trace_ids(40 * n + 40) if not keeps(t, rate)][:n]


def span(trace_id: str, n: int, conversation: str | None = None) -> SpanRecord:
    attributes = {attrs.CONVERSATION_ID_KEYS[0]: conversation} if conversation else {}
    return SpanRecord(
        trace_id=trace_id,
        span_id=f"{n + 1:016x}",
        name=f"step {n}",
        start_time_unix_nano=1,
        end_time_unix_nano=2,
        parent_span_id=None if n == 0 else f"{1:016x}",
        attributes=attributes,
    )


def test_a_rule_sampling_by_target_or_a_budget_keeps_every_span() -> None:
    assert KeepPlan.of([]).everything
    assert KeepPlan.of([FakeRule("trace", 0.01), FakeRule("target", 0.01)]).everything
    assert KeepPlan.of([FakeRule("trace", 0.01, has_target=True)]).everything
    keep = IngestKeep(KeepPlan.of([FakeRule()]), max_held_spans=10, hold_seconds=5)
    spans = [span(t, 0) for t in trace_ids(50)]
    assert keep.admit(spans, now=0.0) == spans
    assert all(keep.wanted(bytes.fromhex(t)) for t in trace_ids(50))


def test_trace_rules_keep_exactly_the_traces_sampled_at_their_highest_rate() -> None:
    plan = KeepPlan.of([FakeRule("trace", 0.01), FakeRule("trace", 0.1)])
    assert (plan.everything, plan.trace_rate, plan.conversation_rate) == (False, 0.1, None)
    keep = IngestKeep(plan, max_held_spans=10, hold_seconds=5)
    ids = trace_ids(2000)
    spans = [span(t, n) for t in ids for n in range(2)]
    stored = keep.admit(spans, now=0.0)
    kept = {t for t in ids if keeps(t, 0.1)}
    assert 120 < len(kept) < 280  # about 10% of 2000
    assert {s.trace_id for s in stored} == kept
    assert len(stored) == 2 * len(kept)
    assert keep.counts == {"stored": 2 * len(kept), "not_sampled": 2 * (2000 - len(kept))}
    # the receiver's screen agrees with the decision, on raw ids
    assert {t for t in ids if keep.wanted(bytes.fromhex(t))} == kept
    assert keep.held_spans == 0


@pytest.mark.parametrize("rate", [0.0, 1e-20, 0.001, 0.02, 0.1, 0.5, 0.999, 1.0])
def test_the_screen_on_raw_ids_decides_as_consistent_keeps(rate: float) -> None:
    plan = KeepPlan.of([FakeRule("trace", rate)])
    rng = random.Random(rate)
    ids = [rng.getrandbits(128).to_bytes(16, "big") for _ in range(5000)]
    # 64-bit ids (upper half zero) and ids whose randomness sits right at the threshold
    ids += [bytes(8) + rng.getrandbits(64).to_bytes(8, "big") for _ in range(500)]
    ids += [bytes(9) + (0xFFFFFFFFFFFFFF - n).to_bytes(7, "big") for n in range(3)]
    ids += [bytes(9) + n.to_bytes(7, "big") for n in range(1, 4)]
    if 0 < rate < 1:
        from spanjudge.evaluators._plan.consistent import threshold_for

        edge = threshold_for(max(rate, 2**-56))
        ids += [b"\x01" * 9 + (edge + d).to_bytes(7, "big") for d in (-1, 0, 1) if edge + d < 2**56]
    assert [plan.raw_kept(raw) for raw in ids] == [keeps(raw.hex(), rate) for raw in ids]


@pytest.mark.parametrize(
    "raw",
    [b"", b"\x00" * 16, b"\x01" * 8, b"\xff" * 17, bytes(15) + b"\x01"],
)
def test_malformed_trace_ids_are_decoded_for_the_decoder_to_judge(raw: bytes) -> None:
    keep = IngestKeep(KeepPlan.of([FakeRule("trace", 0.0001)]), max_held_spans=1, hold_seconds=1)
    # bytes(15) + b"\x01" is a valid id (non-zero) whose randomness is tiny: never kept
    assert keep.wanted(raw) is (raw != bytes(15) + b"\x01")


def test_odd_trace_ids_in_records_never_raise() -> None:
    keep = IngestKeep(KeepPlan.of([FakeRule("trace", 0.5)]), max_held_spans=1, hold_seconds=1)
    odd = [span(t, 0) for t in ("", "zz", "0" * 32, "ab" * 40, "\udcff" * 32)]
    stored = keep.admit(odd, now=0.0)
    # decided by the key's hash (consistent.keeps falls back), each trace once, nothing raised
    assert sum(keep.counts.values()) == len(odd)
    assert {s.trace_id for s in stored} <= {s.trace_id for s in odd}


def conversation_keep(rate: float = 0.5, **kwargs: float) -> IngestKeep:
    plan = KeepPlan.of([FakeRule("conversation", rate)])
    bounds = {"max_held_spans": 100, "hold_seconds": 30.0, **kwargs}
    return IngestKeep(
        plan, max_held_spans=int(bounds["max_held_spans"]), hold_seconds=bounds["hold_seconds"]
    )


def sampled_conversation(rate: float, want: bool) -> str:
    return next(c for c in (f"conv-{i}" for i in range(1000)) if key_kept(c, rate) is want)


def test_turns_before_the_naming_span_wait_and_are_stored_with_it() -> None:
    keep = conversation_keep()
    conv = sampled_conversation(0.5, True)
    (trace,) = waiting_ids(1, 0.5)
    children = [span(trace, 1), span(trace, 2)]
    assert keep.admit(children, now=0.0) == []
    assert keep.held_spans == 2
    root = span(trace, 0, conversation=conv)
    stored = keep.admit([root], now=1.0)
    assert stored == [*children, root]
    # a late span of a kept trace names nothing itself: the decision is remembered
    late = span(trace, 3)
    assert keep.admit([late], now=2.0) == [late]
    assert keep.counts == {"held": 2, "released": 2, "stored": 2}
    assert keep.held_spans == 0


def test_a_trace_of_a_conversation_not_sampled_is_dropped_as_a_whole() -> None:
    keep = conversation_keep()
    conv = sampled_conversation(0.5, False)
    (trace,) = waiting_ids(1, 0.5)
    assert keep.admit([span(trace, 1)], now=0.0) == []
    assert keep.admit([span(trace, 0, conversation=conv)], now=1.0) == []
    assert keep.admit([span(trace, 2)], now=2.0) == []  # remembered: not held again
    assert keep.counts == {"held": 1, "not_sampled": 3}
    assert keep.held_spans == 0


def test_a_trace_that_names_no_conversation_in_time_expires() -> None:
    keep = conversation_keep(hold_seconds=10.0)
    first, second = waiting_ids(2, 0.5)
    keep.admit([span(first, 1), span(first, 2)], now=0.0)
    keep.admit([span(second, 1)], now=8.0)
    keep.sweep(now=10.5)
    assert keep.counts["expired"] == 2 and keep.held_spans == 1
    keep.admit([], now=18.5)
    assert keep.counts["expired"] == 3 and keep.held_spans == 0


def test_a_full_buffer_drops_the_oldest_traces_counted_and_warned(
    caplog: pytest.LogCaptureFixture,
) -> None:
    keep = conversation_keep(max_held_spans=5)
    ids = waiting_ids(4, 0.5)
    with caplog.at_level(logging.WARNING, logger="spanjudge.worker.keep_policy"):
        for n, trace in enumerate(ids):
            keep.admit([span(trace, 1), span(trace, 2)], now=float(n))
    assert keep.held_spans == 4  # the two newest traces
    assert keep.counts == {"held": 8, "overflow": 4}
    warnings = [r for r in caplog.records if "ingest_hold_max_spans" in r.getMessage()]
    assert len(warnings) == 1  # one a minute, not one per overflow
    # the dropped trace's naming span still finds its conversation: stored alone, not lost
    conv = sampled_conversation(0.5, True)
    root = span(ids[0], 0, conversation=conv)
    assert keep.admit([root], now=5.0) == [root]


def test_trace_and_conversation_rules_together() -> None:
    plan = KeepPlan.of([FakeRule("trace", 0.1), FakeRule("conversation", 0.2)])
    # the conversation rule decides a target outside any conversation by its trace (as
    # sampler.rule_keeps does): traces kept by their id at 20% are stored at once
    assert (plan.trace_rate, plan.conversation_rate) == (0.2, 0.2)
    keep = IngestKeep(plan, max_held_spans=100, hold_seconds=30)
    ids = trace_ids(400)
    by_trace = [t for t in ids if keeps(t, 0.2)]
    stored = keep.admit([span(t, 1) for t in by_trace], now=0.0)
    assert len(stored) == len(by_trace) > 40 and keep.held_spans == 0
    others = [t for t in ids if not keeps(t, 0.2)][:5]
    keep.admit([span(t, 1) for t in others], now=0.0)
    assert keep.held_spans == 5
    # every trace must be decoded: its conversation id is in its attributes
    assert all(keep.wanted(bytes.fromhex(t)) for t in others)


def test_a_trace_naming_two_conversations_is_kept_when_either_is_sampled() -> None:
    keep = conversation_keep()
    (trace,) = waiting_ids(1, 0.5)
    yes, no = sampled_conversation(0.5, True), sampled_conversation(0.5, False)
    assert keep.admit([span(trace, 1, conversation=no)], now=0.0) == []
    both = [span(trace, 2, conversation=yes), span(trace, 3, conversation=no)]
    assert keep.admit(both, now=1.0) == both
    assert keep.admit([span(trace, 4, conversation=no)], now=2.0) != []  # stays kept


def test_telemetry_counts_each_outcome() -> None:
    counted: list[tuple[str, int]] = []

    class Telemetry:
        def record_ingest(self, outcome: str, count: int) -> None:
            counted.append((outcome, count))

    plan = KeepPlan.of([FakeRule("trace", 0.5)])
    keep = IngestKeep(plan, max_held_spans=1, hold_seconds=1, telemetry=Telemetry())  # type: ignore[arg-type]
    ids = trace_ids(20)
    keep.admit([span(t, 0) for t in ids], now=0.0)
    keep.passed_over(3)
    assert sum(n for o, n in counted if o != "not_sampled") == sum(keeps(t, 0.5) for t in ids)
    assert ("not_sampled", 3) in counted


def test_spans_given_back_after_a_failed_write_wait_for_the_retry() -> None:
    keep = conversation_keep()
    conv = sampled_conversation(0.5, True)
    (trace,) = waiting_ids(1, 0.5)
    children = [span(trace, 1), span(trace, 2)]
    keep.admit(children, now=0.0)
    root = span(trace, 0, conversation=conv)
    stored = keep.admit([root], now=1.0)
    assert stored == [*children, root]
    keep.give_back(stored, now=1.5)  # the store refused the write: the client retries the root
    assert keep.held_spans == 3
    again = keep.admit([root], now=2.0)
    assert sorted(s.span_id for s in again) == sorted(s.span_id for s in stored)  # each once
    assert keep.held_spans == 0


def test_a_retried_request_holds_each_span_once() -> None:
    keep = conversation_keep()
    (trace,) = waiting_ids(1, 0.5)
    children = [span(trace, 1), span(trace, 2)]
    keep.admit(children, now=0.0)
    keep.admit(children, now=0.5)  # the client did not see the 200 and sent them again
    assert keep.held_spans == 2


def test_the_gate_gives_released_spans_back_when_the_store_fails() -> None:
    from spanjudge._receive.ingest import IngestGate

    class FlakyStore:
        def __init__(self) -> None:
            self.fail = True
            self.written: list[SpanRecord] = []

        def write_spans(self, spans: list[SpanRecord], *, now: float) -> None:
            if self.fail:
                raise RuntimeError("database is locked")
            self.written.extend(spans)

    store = FlakyStore()
    keep = conversation_keep()
    gate = IngestGate(store, max_pending_spans=100, clock=lambda: 1.0, keep=keep)  # type: ignore[arg-type]
    (trace,) = waiting_ids(1, 0.5)
    children = [span(trace, 1), span(trace, 2)]
    gate.write(children)
    root = span(trace, 0, conversation=sampled_conversation(0.5, True))
    with pytest.raises(RuntimeError):
        gate.write([root])
    store.fail = False
    gate.write([root])  # the client's retry
    assert sorted(s.span_id for s in store.written) == sorted(s.span_id for s in [*children, root])
