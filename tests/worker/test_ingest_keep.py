"""The ingest decision (spanjudge/worker/keep_policy.py): which rules let the worker store
little, which traces it stores, and the hold of traces waiting for the span that names their
conversation: in the store's hold table, written before the answer (held, released, expired,
dropped on overflow: all counted), through the ingest gate over a real store."""

from __future__ import annotations

import logging
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace

import pytest

from spanjudge._core.span_record import LogEvent, SpanRecord
from spanjudge._receive.ingest import IngestGate
from spanjudge._store import open_store
from spanjudge._store.sql import SpanStore
from spanjudge.evaluators._plan.consistent import keeps, key_kept
from spanjudge.tracer import _attributes as attrs
from spanjudge.worker.keep_policy import IngestKeep, KeepPlan, span_size


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


def admitted(keep: IngestKeep, spans: Sequence[SpanRecord], now: float) -> list[SpanRecord]:
    """The spans to store now (the decision alone, counted as if written)."""
    admission = keep.admit(spans, now=now)
    keep.confirm(admission)
    return admission.store


def test_a_rule_sampling_by_target_or_a_budget_keeps_every_span() -> None:
    assert KeepPlan.of([]).everything
    assert KeepPlan.of([FakeRule("trace", 0.01), FakeRule("target", 0.01)]).everything
    assert KeepPlan.of([FakeRule("trace", 0.01, has_target=True)]).everything
    keep = IngestKeep(KeepPlan.of([FakeRule()]), max_held_spans=10, hold_seconds=5)
    spans = [span(t, 0) for t in trace_ids(50)]
    assert admitted(keep, spans, now=0.0) == spans
    assert all(keep.wanted(bytes.fromhex(t)) for t in trace_ids(50))


def test_trace_rules_keep_exactly_the_traces_sampled_at_their_highest_rate() -> None:
    plan = KeepPlan.of([FakeRule("trace", 0.01), FakeRule("trace", 0.1)])
    assert (plan.everything, plan.trace_rate, plan.conversation_rate) == (False, 0.1, None)
    keep = IngestKeep(plan, max_held_spans=10, hold_seconds=5)
    ids = trace_ids(2000)
    spans = [span(t, n) for t in ids for n in range(2)]
    stored = admitted(keep, spans, now=0.0)
    kept = {t for t in ids if keeps(t, 0.1)}
    assert 120 < len(kept) < 280  # about 10% of 2000
    assert {s.trace_id for s in stored} == kept
    assert len(stored) == 2 * len(kept)
    assert keep.counts == {"stored": 2 * len(kept), "not_sampled": 2 * (2000 - len(kept))}
    # the receiver's screen agrees with the decision, on raw ids
    assert {t for t in ids if keep.wanted(bytes.fromhex(t))} == kept
    assert keep.held_spans == 0


def test_the_rv_in_tracestate_is_the_randomness_as_the_collector_reads_it() -> None:
    # 50 traces whose ids a 2% sample rejects, each carrying an rv a 2% sample keeps (a
    # Collector's probabilistic_sampler in proportional mode kept them by it)
    keep = IngestKeep(KeepPlan.of([FakeRule("trace", 0.02)]), max_held_spans=10, hold_seconds=5)
    ids = [t for t in trace_ids(400) if not keeps(t, 0.02)][:50]
    state = "ot=th:fae148;rv:ffffffffffff00,vendor=x"
    assert all(keeps(t, 0.02, state) for t in ids)
    spans = [replace(span(t, 0), trace_state=state) for t in ids]
    assert len(admitted(keep, spans, now=0.0)) == 50
    assert all(keep.wanted(bytes.fromhex(t), state) for t in ids)
    assert not any(keep.wanted(bytes.fromhex(t)) for t in ids)  # by the id alone: not kept
    # an rv below the threshold rejects a trace its id would keep
    low = "ot=rv:00000000000001"
    kept_by_id = [t for t in trace_ids(400) if keeps(t, 0.02)][:5]
    assert admitted(keep, [replace(span(t, 0), trace_state=low) for t in kept_by_id], 1.0) == []


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
    stored = admitted(keep, odd, now=0.0)
    # decided by the key's hash (consistent.keeps falls back), each trace once, nothing raised
    assert sum(keep.counts.values()) == len(odd)
    assert {s.trace_id for s in stored} <= {s.trace_id for s in odd}


# ---------------------------------------------------------------- the hold, over a store


@pytest.fixture
def store() -> Iterator[SpanStore]:
    with open_store(":memory:") as opened:
        yield opened


class Ingest:
    """A conversation rule's ingest: the decision and the gate over ``store``."""

    def __init__(self, store: SpanStore, rate: float = 0.5, **bounds: float) -> None:
        plan = KeepPlan.of([FakeRule("conversation", rate)])
        options = {"max_held_spans": 100, "hold_seconds": 30.0, **bounds}
        self.now = 0.0
        self.store = store
        self.keep = IngestKeep(
            plan,
            max_held_spans=int(options["max_held_spans"]),
            hold_seconds=options["hold_seconds"],
            max_held_bytes=int(options.get("max_held_bytes", 2**30)),
        )
        self.gate = IngestGate(store, max_pending_spans=10_000, clock=self.clock, keep=self.keep)

    def clock(self) -> float:
        return self.now

    def send(self, spans: Sequence[SpanRecord], now: float) -> None:
        self.now = now
        self.gate.write(spans)

    def stored(self) -> set[str]:
        return {
            s.span_id
            for trace_id, _, _, _ in [(t, 0, 0, 0) for t in self.traces()]
            for s in self.store.trace_spans(trace_id)
        }

    def traces(self) -> list[str]:
        with self.store.transaction() as cur:
            cur.execute("SELECT trace_id FROM traces")
            return [row[0] for row in cur.fetchall()]

    def held(self) -> int:
        with self.store.transaction() as cur:
            cur.execute("SELECT COUNT(*) FROM held_spans")
            return int(cur.fetchone()[0])


def sampled_conversation(rate: float, want: bool) -> str:
    return next(c for c in (f"conv-{i}" for i in range(1000)) if key_kept(c, rate) is want)


def ids(*spans: SpanRecord) -> set[str]:
    return {s.span_id for s in spans}


def test_turns_before_the_naming_span_are_held_in_the_store_and_stored_with_it(
    store: SpanStore,
) -> None:
    ingest = Ingest(store)
    conv = sampled_conversation(0.5, True)
    (trace,) = waiting_ids(1, 0.5)
    children = [span(trace, 1), span(trace, 2)]
    ingest.send(children, now=0.0)
    # acknowledged: in the store's hold table before the answer, nowhere else
    assert ingest.held() == 2 and ingest.keep.held_spans == 2 and ingest.stored() == set()
    root = span(trace, 0, conversation=conv)
    ingest.send([root], now=1.0)
    assert ingest.stored() == ids(*children, root) and ingest.held() == 0
    late = span(trace, 3)  # a late span of a kept trace names nothing itself
    ingest.send([late], now=2.0)
    assert ingest.stored() == ids(*children, root, late)
    assert ingest.keep.counts == {"held": 2, "released": 2, "stored": 2}
    assert ingest.keep.held_spans == 0


def test_a_restart_loses_no_held_span(store: SpanStore) -> None:
    conv = sampled_conversation(0.5, True)
    (trace,) = waiting_ids(1, 0.5)
    children = [span(trace, 1), span(trace, 2)]
    Ingest(store).send(children, now=0.0)
    # the process is killed (SIGKILL or SIGTERM: nothing was only in memory); a new one starts
    again = Ingest(store)
    assert again.keep.held_spans == 2  # its view of the hold, read from the table
    again.send([span(trace, 0, conversation=conv)], now=5.0)
    assert again.stored() == ids(*children) | {span(trace, 0).span_id}


def test_a_root_after_hold_seconds_still_finds_its_children(store: SpanStore) -> None:
    ingest = Ingest(store, hold_seconds=3.0)
    conv = sampled_conversation(0.5, True)
    (trace,) = waiting_ids(1, 0.5)
    children = [span(trace, 1), span(trace, 2)]
    ingest.send(children, now=0.0)
    ingest.keep.sweep(now=4.0)
    assert ingest.keep.counts["expired"] == 2  # counted as waiting past the hold ...
    ingest.send([span(trace, 0, conversation=conv)], now=5.0)  # ... the root comes at 5 s
    assert ingest.stored() == ids(*children) | {span(trace, 0).span_id}


def test_a_late_span_of_a_kept_trace_is_decided_by_the_store(store: SpanStore) -> None:
    conv = sampled_conversation(0.5, True)
    (trace,) = waiting_ids(1, 0.5)
    Ingest(store).send([span(trace, 0, conversation=conv)], now=0.0)
    # a new process (or one whose memory of decisions moved on): nothing remembered
    again = Ingest(store)
    late = span(trace, 7)
    again.send([late], now=10.0)
    assert late.span_id in again.stored() and again.held() == 0
    assert again.keep.counts == {"stored": 1}


def test_a_trace_of_a_conversation_not_sampled_is_dropped_as_a_whole(store: SpanStore) -> None:
    ingest = Ingest(store)
    conv = sampled_conversation(0.5, False)
    (trace,) = waiting_ids(1, 0.5)
    ingest.send([span(trace, 1)], now=0.0)
    ingest.send([span(trace, 0, conversation=conv)], now=1.0)
    ingest.send([span(trace, 2)], now=2.0)  # remembered: not held again
    assert ingest.stored() == set() and ingest.held() == 0
    assert ingest.keep.counts == {"held": 1, "not_sampled": 3}
    assert ingest.keep.held_spans == 0


def test_a_full_hold_drops_the_oldest_traces_counted_and_warned(
    store: SpanStore, caplog: pytest.LogCaptureFixture
) -> None:
    ingest = Ingest(store, max_held_spans=5)
    traces = waiting_ids(4, 0.5)
    with caplog.at_level(logging.WARNING, logger="spanjudge.worker.keep_policy"):
        for n, trace in enumerate(traces):
            ingest.send([span(trace, 1), span(trace, 2)], now=float(n))
    assert ingest.keep.held_spans == 4 and ingest.held() == 4  # the two newest traces
    assert ingest.keep.counts == {"held": 8, "overflow": 4}
    warnings = [r for r in caplog.records if "ingest_hold_max_spans" in r.getMessage()]
    assert len(warnings) == 1  # one a minute, not one per overflow
    # the dropped trace's naming span still finds its conversation: stored alone
    root = span(traces[0], 0, conversation=sampled_conversation(0.5, True))
    ingest.send([root], now=5.0)
    assert root.span_id in ingest.stored()


def test_the_hold_is_bounded_by_bytes_too(store: SpanStore) -> None:
    # 64 spans with a 1 MiB attribute each, a hold of 8 MiB: the newest eight traces stay,
    # in the store; the process keeps none of their bytes
    big = "x" * 2**20
    ingest = Ingest(store, max_held_spans=100_000, max_held_bytes=8 * 2**20 + 8 * 2**12)
    traces = waiting_ids(64, 0.5)
    for n, trace in enumerate(traces):
        child = replace(span(trace, 1), attributes={"payload": big})
        assert span_size(child) > 2**20
        ingest.send([child], now=float(n))
    assert ingest.held() == ingest.keep.held_spans == 8
    assert ingest.keep.held_bytes <= 8 * 2**20 + 8 * 2**12
    assert ingest.keep.counts == {"held": 64, "overflow": 56}
    assert all(not held.ids or len(held.ids) == 1 for held in ingest.keep._held.values())


def test_trace_and_conversation_rules_together(store: SpanStore) -> None:
    plan = KeepPlan.of([FakeRule("trace", 0.1), FakeRule("conversation", 0.2)])
    # the conversation rule decides a target outside any conversation by its trace (as
    # sampler.rule_keeps does): traces kept by their id at 20% are stored at once
    assert (plan.trace_rate, plan.conversation_rate) == (0.2, 0.2)
    keep = IngestKeep(plan, max_held_spans=100, hold_seconds=30)
    all_ids = trace_ids(400)
    by_trace = [t for t in all_ids if keeps(t, 0.2)]
    stored = admitted(keep, [span(t, 1) for t in by_trace], now=0.0)
    assert len(stored) == len(by_trace) > 40 and keep.held_spans == 0
    others = [t for t in all_ids if not keeps(t, 0.2)][:5]
    assert len(keep.admit([span(t, 1) for t in others], now=0.0).hold) == 5
    assert keep.held_spans == 5
    # every trace must be decoded: its conversation id is in its attributes
    assert all(keep.wanted(bytes.fromhex(t)) for t in others)


def test_a_trace_naming_two_conversations_is_kept_when_either_is_sampled(
    store: SpanStore,
) -> None:
    ingest = Ingest(store)
    (trace,) = waiting_ids(1, 0.5)
    yes, no = sampled_conversation(0.5, True), sampled_conversation(0.5, False)
    ingest.send([span(trace, 1, conversation=no)], now=0.0)
    assert ingest.stored() == set()
    both = [span(trace, 2, conversation=yes), span(trace, 3, conversation=no)]
    ingest.send(both, now=1.0)
    ingest.send([span(trace, 4, conversation=no)], now=2.0)  # stays kept
    assert ingest.stored() == ids(*both, span(trace, 4))


def test_telemetry_counts_each_outcome() -> None:
    counted: list[tuple[str, int]] = []

    class Telemetry:
        def record_ingest(self, outcome: str, count: int) -> None:
            counted.append((outcome, count))

    plan = KeepPlan.of([FakeRule("trace", 0.5)])
    keep = IngestKeep(plan, max_held_spans=1, hold_seconds=1, telemetry=Telemetry())  # type: ignore[arg-type]
    traces = trace_ids(20)
    admitted(keep, [span(t, 0) for t in traces], now=0.0)
    keep.passed_over(3)
    assert sum(n for o, n in counted if o != "not_sampled") == sum(keeps(t, 0.5) for t in traces)
    assert ("not_sampled", 3) in counted


def test_a_retried_request_holds_each_span_once(store: SpanStore) -> None:
    ingest = Ingest(store)
    (trace,) = waiting_ids(1, 0.5)
    children = [span(trace, 1), span(trace, 2)]
    ingest.send(children, now=0.0)
    ingest.send(children, now=0.5)  # the client did not see the 200 and sent them again
    assert ingest.keep.held_spans == 2 and ingest.held() == 2


def test_a_failed_write_changes_nothing_and_the_retry_stores_each_span_once(
    store: SpanStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    ingest = Ingest(store)
    (trace,) = waiting_ids(1, 0.5)
    children = [span(trace, 1), span(trace, 2)]
    ingest.send(children, now=0.0)
    root = span(trace, 0, conversation=sampled_conversation(0.5, True))
    real = store.admit_spans

    def locked(*args: object, **kwargs: object) -> object:
        raise RuntimeError("database is locked")

    monkeypatch.setattr(store, "admit_spans", locked)
    with pytest.raises(RuntimeError):
        ingest.send([root], now=1.0)
    assert ingest.keep.held_spans == 2 and ingest.held() == 2  # still held, still counted
    monkeypatch.setattr(store, "admit_spans", real)
    ingest.send([root], now=2.0)  # the client's retry
    assert ingest.stored() == ids(*children, root) and ingest.held() == 0
    assert ingest.keep.held_spans == 0


def test_log_records_follow_their_traces_sampling(store: SpanStore) -> None:
    # trace sampling at 1%: 200 traces, each with a content log record; only the sampled
    # traces' records are stored
    keep = IngestKeep(KeepPlan.of([FakeRule("trace", 0.01)]), max_held_spans=1, hold_seconds=1)
    gate = IngestGate(store, max_pending_spans=10_000, clock=lambda: 1.0, keep=keep)
    traces = trace_ids(200)
    events = [
        LogEvent(trace_id=t, span_id="1" * 16, event_name="gen_ai.user.message",
                 time_unix_nano=1, body={"content": "x" * 2048})
        for t in traces
    ]  # fmt: skip
    gate.write_logs(events)
    kept = {t for t in traces if keeps(t, 0.01)}
    assert {e.trace_id for e in store.trace_logs(traces)} == kept
    assert keep.logs_not_sampled == 200 - len(kept)
