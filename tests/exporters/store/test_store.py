"""The span store contract, run on SQLite and on PostgreSQL alike (see conftest.py)."""

from __future__ import annotations

import math
import threading
from collections.abc import Callable

import pytest

from spanjudge._core.span_record import EvaluationRecord, SpanEvent, SpanRecord
from spanjudge._store import sql as sql_module
from spanjudge._store.models import ORPHAN_SETTLE_FACTOR, JobSpec
from spanjudge._store.schema import SCHEMA_VERSION
from spanjudge._store.sql import SpanStore
from spanjudge.errors import StoreError
from spanjudge.tracer import _attributes as attrs

SETTLE = 10.0
T0 = 1_700_000_000.0  # a fixed "now": every store call takes the caller's clock


def tid(n: int) -> str:
    return f"{n:032x}"


def sid(n: int) -> str:
    return f"{n:016x}"


def span(
    trace: int,
    n: int,
    *,
    parent: int | None = None,
    start: int = 0,
    name: str = "step",
    conversation: str | None = None,
    attributes: dict[str, object] | None = None,
) -> SpanRecord:
    attributes = dict(attributes or {})
    if conversation is not None:
        attributes[attrs.GEN_AI_CONVERSATION_ID] = conversation
    return SpanRecord(
        trace_id=tid(trace),
        span_id=sid(n),
        name=name,
        start_time_unix_nano=1_000 + start,
        end_time_unix_nano=2_000 + start,
        parent_span_id=sid(parent) if parent is not None else None,
        attributes=attributes,
        resource={"service.name": "shop"},
    )


def job(target: str, rule: str = "faithfulness-llm", target_type: str = "trace") -> JobSpec:
    return JobSpec(
        rule=rule,
        target_type=target_type,
        target_id=target,
        trace_id=target,
        span_id=None,
        sample_rate=0.5,
    )


def result(
    spec: JobSpec,
    *,
    score: float = 0.8,
    cost: float | None = 0.01,
    status: str = "scored",
    metric: str = "faithfulness",
) -> EvaluationRecord:
    return EvaluationRecord(
        rule=spec.rule,
        metric=metric,
        target_type=spec.target_type,
        target_id=spec.target_id,
        trace_id=spec.trace_id,
        span_id=spec.span_id,
        status=status,
        score=score if status == "scored" else None,
        label="pass",
        success=True,
        threshold=0.5,
        reason="all claims supported",
        cost=cost,
        verdicts=[{"verdict": "yes", "reason": None}],
        error_type="JudgeTimeout" if status == "error" else None,
    )


# ------------------------------------------------------------------------------ schema, spans
def test_schema_is_created_and_versioned(store: SpanStore) -> None:
    assert store.schema_version() == SCHEMA_VERSION >= 1


def test_reopening_an_existing_database_keeps_data_and_version(
    store_factory: Callable[[], SpanStore],
) -> None:
    first = store_factory()
    first.write_spans([span(1, 1)], now=T0)
    second = store_factory()
    assert second.schema_version() == SCHEMA_VERSION
    assert [s.span_id for s in second.trace_spans(tid(1))] == [sid(1)]


def test_a_later_release_migrates_an_existing_database(
    store_factory: Callable[[], SpanStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    old = store_factory()
    old.write_spans([span(1, 1)], now=T0)
    extra = [
        "CREATE TABLE IF NOT EXISTS release_two_notes (note TEXT NOT NULL)",
        "ALTER TABLE spans ADD COLUMN release_two_flag INTEGER",
    ]
    monkeypatch.setattr(sql_module, "MIGRATIONS", [*sql_module.MIGRATIONS, extra])
    new = store_factory()  # opening runs the pending migration once
    assert new.schema_version() == SCHEMA_VERSION + 1
    assert isinstance(new, sql_module.SpanStore)
    with new.transaction() as cur:
        cur.execute("INSERT INTO release_two_notes (note) VALUES ('x')")
        cur.execute("SELECT COUNT(*), MAX(version) FROM schema_version")
        assert tuple(cur.fetchone()) == (SCHEMA_VERSION + 1, SCHEMA_VERSION + 1)
    assert [s.span_id for s in new.trace_spans(tid(1))] == [sid(1)]  # data kept
    third = store_factory()  # nothing left to do: no second run of the migration
    assert third.schema_version() == SCHEMA_VERSION + 1


def test_span_round_trip_keeps_every_field_and_attribute_type(store: SpanStore) -> None:
    record = SpanRecord(
        trace_id=tid(7),
        span_id=sid(70),
        parent_span_id=sid(69),
        name="chat gpt-4o ✓",
        start_time_unix_nano=1_700_000_000_123_456_789,
        end_time_unix_nano=1_700_000_001_123_456_789,
        kind="CLIENT",
        status_code="ERROR",
        status_message="boom",
        attributes={
            "s": "text with 'quotes'; DROP TABLE spans; --",
            "unicode": "héllo \u4e16\u754c \U0001f600",
            "b": True,
            "i": -(2**62),
            "f": 0.125,
            "nan": float("nan"),
            "strs": ["a", "b"],
            "bools": [True, False],
            "ints": [1, 2, 3],
            "floats": [1.5, -2.25],
            "empty": [],
            attrs.GEN_AI_CONVERSATION_ID: "conv-1",
        },
        resource={"service.name": "shop", "service.version": "1.2"},
        events=[SpanEvent("gen_ai.evaluation.result", 1_700_000_000_500_000_000, {"x": [1, 2]})],
        scope_name="spanjudge",
    )
    store.write_spans([record], now=T0)
    [back] = store.trace_spans(tid(7))
    nan = back.attributes.pop("nan")
    assert math.isnan(nan)
    expected = dict(record.attributes)
    del expected["nan"]
    assert back.attributes == expected
    assert (back.trace_id, back.span_id, back.parent_span_id) == (tid(7), sid(70), sid(69))
    assert (back.name, back.kind, back.status_code, back.status_message) == (
        "chat gpt-4o ✓",
        "CLIENT",
        "ERROR",
        "boom",
    )
    assert back.start_time_unix_nano == record.start_time_unix_nano
    assert back.end_time_unix_nano == record.end_time_unix_nano
    assert back.resource == record.resource
    assert back.events == record.events
    assert back.scope_name == "spanjudge"
    assert back.service_name == "shop" and back.conversation_id == "conv-1"


def test_large_batches_with_repeats_store_each_span_once(store: SpanStore) -> None:
    batch = [span(n % 3, n, start=n) for n in range(1, 301)]
    store.write_spans(batch + batch[:50], now=T0)  # a retried chunk inside the same batch
    store.write_spans(batch[100:200], now=T0 + 1)  # and a retried batch
    for trace in range(3):
        got = store.trace_spans(tid(trace))
        assert [s.span_id for s in got] == [sid(n) for n in range(1, 301) if n % 3 == trace]
    settled = store.settled_traces(settle_seconds=SETTLE, now=T0 + 1 + SETTLE)
    assert sorted(settled) == [tid(0), tid(1), tid(2)]


def test_hostile_text_is_stored_cleaned_instead_of_failing_the_batch(store: SpanStore) -> None:
    bad = span(
        3,
        1,
        name="chat\x00evil\ud800",
        conversation="c\x00",
        attributes={"k\x00": "v\x00\udfff", "bytes": b"\xff"},
    )  # type: ignore[dict-item]
    bad.status_message = "oops\x00"
    store.write_spans([bad, span(3, 2, parent=1)], now=T0)
    got = {s.span_id: s for s in store.trace_spans(tid(3))}
    assert set(got) == {sid(1), sid(2)}
    assert got[sid(1)].name == "chat\ufffdevil?"
    assert got[sid(1)].status_message == "oops\ufffd"
    assert got[sid(1)].attributes["k\x00"] == "v\x00\udfff"  # JSON escapes keep it exact
    assert got[sid(1)].attributes["bytes"] == "b'\\xff'"
    assert store.idle_conversations(idle_seconds=1, now=T0 + 5) == ["c\ufffd"]


def test_trace_spans_are_ordered_by_start_and_duplicates_are_ignored(store: SpanStore) -> None:
    store.write_spans([span(1, 3, parent=1, start=30), span(1, 1, start=0)], now=T0)
    store.write_spans([span(1, 2, parent=1, start=10), span(1, 3, parent=1, start=30)], now=T0)
    store.write_spans([span(1, 4, parent=1, start=40), span(1, 4, parent=1, start=40)], now=T0)
    assert [s.span_id for s in store.trace_spans(tid(1))] == [sid(1), sid(2), sid(3), sid(4)]
    assert store.trace_spans(tid(99)) == []


# ------------------------------------------------------------------------------ settling
def test_trace_settles_after_root_ended_and_quiet_period(store: SpanStore) -> None:
    store.write_spans([span(1, 2, parent=1)], now=T0)  # child first: no root yet
    store.write_spans([span(1, 1)], now=T0 + 1)  # root arrives
    assert store.settled_traces(settle_seconds=SETTLE, now=T0 + 1 + SETTLE - 0.5) == []
    assert store.settled_traces(settle_seconds=SETTLE, now=T0 + 1 + SETTLE) == [tid(1)]


def test_a_late_span_restarts_the_quiet_period(store: SpanStore) -> None:
    store.write_spans([span(1, 1)], now=T0)
    store.write_spans([span(1, 2, parent=1)], now=T0 + 8)
    assert store.settled_traces(settle_seconds=SETTLE, now=T0 + 12) == []
    assert store.settled_traces(settle_seconds=SETTLE, now=T0 + 18) == [tid(1)]


def test_settling_uses_arrival_time_not_span_time(store: SpanStore) -> None:
    # Span timestamps in 1970 (start 1000 ns) do not make the trace settled on arrival.
    store.write_spans([span(1, 1)], now=T0)
    assert store.settled_traces(settle_seconds=SETTLE, now=T0 + 1) == []


def test_orphan_trace_without_root_settles_after_the_fallback(store: SpanStore) -> None:
    store.write_spans([span(2, 5, parent=4)], now=T0)
    fallback = ORPHAN_SETTLE_FACTOR * SETTLE
    assert store.settled_traces(settle_seconds=SETTLE, now=T0 + SETTLE * 2) == []
    assert store.settled_traces(settle_seconds=SETTLE, now=T0 + fallback - 1) == []
    assert store.settled_traces(settle_seconds=SETTLE, now=T0 + fallback) == [tid(2)]


def test_planned_traces_are_not_offered_again_and_limit_applies(store: SpanStore) -> None:
    for n in range(1, 6):
        store.write_spans([span(n, n)], now=T0 + n)
    now = T0 + 100
    assert store.settled_traces(settle_seconds=SETTLE, now=now, limit=2) == [tid(1), tid(2)]
    store.mark_planned(traces=[tid(1), tid(2)], now=now)
    assert store.settled_traces(settle_seconds=SETTLE, now=now) == [tid(3), tid(4), tid(5)]
    store.write_spans([span(1, 1)], now=now)  # delivered again after planning
    assert tid(1) not in store.settled_traces(settle_seconds=SETTLE, now=now + 100)
    # (a span new to the trace makes it settle again: tests/exporters/store/test_late_spans.py)


# ------------------------------------------------------------------------------ conversations
def test_conversation_goes_idle_after_its_last_turn(store: SpanStore) -> None:
    store.write_spans([span(1, 1, conversation="c1")], now=T0)
    store.write_spans([span(2, 2, conversation="c1")], now=T0 + 200)
    store.write_spans([span(3, 3)], now=T0)  # no conversation id
    assert store.idle_conversations(idle_seconds=300, now=T0 + 400) == []
    assert store.idle_conversations(idle_seconds=300, now=T0 + 500) == ["c1"]
    store.mark_planned(conversations=["c1"], now=T0 + 500)
    assert store.idle_conversations(idle_seconds=300, now=T0 + 10_000) == []


def test_conversation_spans_cover_whole_traces_across_turns(store: SpanStore) -> None:
    # Turn 1: the agent span carries the id; its retriever child does not.
    store.write_spans(
        [span(1, 1, conversation="c1", start=0), span(1, 2, parent=1, start=5, name="retrieval")],
        now=T0,
    )
    # Turn 2 in another trace (another worker, another time).
    store.write_spans([span(2, 3, conversation="c1", start=100)], now=T0 + 50)
    store.write_spans([span(3, 4, conversation="c2", start=50)], now=T0)
    got = store.conversation_spans("c1")
    assert [(s.trace_id, s.span_id) for s in got] == [
        (tid(1), sid(1)),
        (tid(1), sid(2)),
        (tid(2), sid(3)),
    ]
    assert store.conversation_spans("nope") == []


def test_targets_since_lists_traces_and_conversations_in_window(store: SpanStore) -> None:
    store.write_spans([span(1, 1, conversation="c1")], now=T0)
    store.write_spans([span(2, 2)], now=T0 + 100)
    traces, conversations = store.targets_since(since=T0 + 50, until=T0 + 200)
    assert (traces, conversations) == ([tid(2)], [])
    traces, conversations = store.targets_since(since=T0 - 1, until=T0 + 200)
    assert (traces, conversations) == ([tid(1), tid(2)], ["c1"])


# ------------------------------------------------------------------------------ jobs
def test_enqueue_is_idempotent_per_rule_and_target_forever(store: SpanStore) -> None:
    specs = [job("t1"), job("t2"), job("t1", rule="bias-llm")]
    assert store.enqueue_jobs(specs, now=T0) == 3
    assert store.enqueue_jobs([job("t1"), job("t3")], now=T0) == 1
    claimed = store.claim_jobs(owner="a", limit=10, lease_seconds=60, now=T0)
    for j in claimed:
        assert store.complete_job(j.job_id, owner="a", record=result(j), now=T0)
    # Even done, the pair is never enqueued again.
    assert store.enqueue_jobs([job("t1")], now=T0 + 1) == 0
    assert store.enqueue_jobs([], now=T0) == 0


def test_claim_leases_oldest_first_and_keeps_the_spec(store: SpanStore) -> None:
    spec = JobSpec(
        rule="r",
        target_type="conversation",
        target_id="c1",
        trace_id=None,
        span_id=None,
        conversation_id="c1",
        sample_rate=0.25,
    )
    store.enqueue_jobs([spec, job("t2")], now=T0)
    [first] = store.claim_jobs(owner="w1", limit=1, lease_seconds=30, now=T0 + 1)
    assert (first.rule, first.target_type, first.target_id) == ("r", "conversation", "c1")
    assert (first.conversation_id, first.sample_rate) == ("c1", 0.25)
    assert (first.state, first.attempts, first.lease_owner) == ("leased", 1, "w1")
    assert first.lease_expires_at == pytest.approx(T0 + 31)
    [second] = store.claim_jobs(owner="w2", limit=5, lease_seconds=30, now=T0 + 1)
    assert second.target_id == "t2" and second.job_id > first.job_id
    assert store.claim_jobs(owner="w3", limit=5, lease_seconds=30, now=T0 + 2) == []


def test_expired_lease_is_claimed_by_another_owner_who_alone_can_complete(
    store: SpanStore,
) -> None:
    store.enqueue_jobs([job("t1")], now=T0)
    [a] = store.claim_jobs(owner="a", limit=1, lease_seconds=30, now=T0)
    assert store.claim_jobs(owner="b", limit=1, lease_seconds=30, now=T0 + 29) == []
    [b] = store.claim_jobs(owner="b", limit=1, lease_seconds=30, now=T0 + 30)
    assert b.job_id == a.job_id and b.attempts == 2 and b.lease_owner == "b"
    # "a" comes back from a long pause: its lease is gone, nothing is written.
    late = result(a, score=0.1)
    assert store.complete_job(a.job_id, owner="a", record=late, now=T0 + 31) is False
    assert store.results() == []
    assert store.complete_job(b.job_id, owner="b", record=result(b, score=0.9), now=T0 + 32)
    [stored] = store.results()
    assert stored.score == 0.9
    # At most one result ever: a second completion is refused.
    again = result(b, score=0.2)
    assert store.complete_job(b.job_id, owner="b", record=again, now=T0 + 33) is False
    assert [r.score for r in store.results()] == [0.9]


def test_requeue_expired_returns_jobs_to_pending(store: SpanStore) -> None:
    store.enqueue_jobs([job("t1"), job("t2")], now=T0)
    store.claim_jobs(owner="a", limit=1, lease_seconds=10, now=T0)
    store.claim_jobs(owner="b", limit=1, lease_seconds=100, now=T0)
    assert store.requeue_expired(now=T0 + 50) == 1
    stats = store.stats(now=T0 + 50)
    assert (stats.pending, stats.leased) == (1, 1)
    [again] = store.claim_jobs(owner="c", limit=5, lease_seconds=10, now=T0 + 50)
    assert again.target_id == "t1" and again.attempts == 2


def test_release_returns_job_keeping_attempts_and_honours_retry_at(store: SpanStore) -> None:
    store.enqueue_jobs([job("t1")], now=T0)
    [j] = store.claim_jobs(owner="a", limit=1, lease_seconds=30, now=T0)
    assert store.release_job(j.job_id, owner="b") is False  # not b's lease
    assert store.release_job(j.job_id, owner="a", retry_at=T0 + 60) is True
    assert store.release_job(j.job_id, owner="a") is False  # no longer leased
    assert store.claim_jobs(owner="a", limit=1, lease_seconds=30, now=T0 + 59) == []
    [again] = store.claim_jobs(owner="a", limit=1, lease_seconds=30, now=T0 + 60)
    assert again.attempts == 2
    assert store.release_job(again.job_id, owner="a") is True
    [third] = store.claim_jobs(owner="b", limit=1, lease_seconds=30, now=T0 + 60)
    assert third.attempts == 3


def test_error_result_marks_the_job_failed_and_is_stored(store: SpanStore) -> None:
    store.enqueue_jobs([job("t1")], now=T0)
    [j] = store.claim_jobs(owner="a", limit=1, lease_seconds=30, now=T0)
    assert store.complete_job(j.job_id, owner="a", record=result(j, status="error"), now=T0)
    [stored] = store.results()
    assert (stored.status, stored.score, stored.error_type) == ("error", None, "JudgeTimeout")
    stats = store.stats(now=T0)
    assert (stats.failed, stats.done) == (1, 0)


# ------------------------------------------------------------------------------ results
def test_unemitted_results_until_marked_emitted(store: SpanStore) -> None:
    store.enqueue_jobs([job("t1"), job("t2")], now=T0)
    jobs = store.claim_jobs(owner="a", limit=2, lease_seconds=30, now=T0)
    for j in jobs:
        store.complete_job(j.job_id, owner="a", record=result(j), now=T0)
    pending = store.unemitted_results()
    assert [item.job_id for item in pending] == [j.job_id for j in jobs]
    assert all(item.outputs == ("span", "event") for item in pending)
    record = pending[0].record
    assert record.evaluation_span_id == result(jobs[0]).evaluation_span_id
    assert record.verdicts == [{"verdict": "yes", "reason": None}]
    store.mark_emitted([jobs[0].job_id], now=T0 + 1)
    assert [item.job_id for item in store.unemitted_results(outputs=["span"])] == [jobs[1].job_id]
    store.mark_emitted([jobs[1].job_id], now=T0 + 1)
    assert store.unemitted_results(outputs=["span"]) == []


def test_each_output_is_marked_delivered_on_its_own(store: SpanStore) -> None:
    store.enqueue_jobs([job("t1"), job("t2")], now=T0)
    first, second = store.claim_jobs(owner="a", limit=2, lease_seconds=30, now=T0)
    for j in (first, second):
        store.complete_job(j.job_id, owner="a", record=result(j), now=T0)
    store.mark_emitted([first.job_id], now=T0 + 1, output="event")
    store.mark_emitted([second.job_id], now=T0 + 1, output="span")
    owed = {item.job_id: item.outputs for item in store.unemitted_results()}
    assert owed == {first.job_id: ("span",), second.job_id: ("event",)}
    assert [i.job_id for i in store.unemitted_results(outputs=["event"])] == [second.job_id]
    assert [i.job_id for i in store.unemitted_results(outputs=["span"])] == [first.job_id]
    store.mark_emitted([first.job_id], now=T0 + 2, output="span")
    store.mark_emitted([first.job_id, second.job_id], now=T0 + 2, output="event")
    assert store.unemitted_results() == []
    with pytest.raises(ValueError, match="unknown output"):
        store.mark_emitted([first.job_id], now=T0 + 3, output="metrics")


def test_results_query_filters_and_cost_since(store: SpanStore) -> None:
    specs = [job("t1"), job("t2"), job("t1", rule="bias-llm")]
    store.enqueue_jobs(specs, now=T0)
    jobs = store.claim_jobs(owner="a", limit=10, lease_seconds=30, now=T0)
    for offset, j in enumerate(jobs):
        metric = "bias" if j.rule == "bias-llm" else "faithfulness"
        store.complete_job(
            j.job_id, owner="a", record=result(j, metric=metric, cost=0.5), now=T0 + 100 * offset
        )
    assert len(store.results()) == 3
    assert {r.target_id for r in store.results(rule="faithfulness-llm")} == {"t1", "t2"}
    assert [r.rule for r in store.results(metric="bias")] == ["bias-llm"]
    assert {r.rule for r in store.results(trace_id="t1")} == {"faithfulness-llm", "bias-llm"}
    assert [r.target_id for r in store.results(since=T0 + 50)] == ["t2", "t1"]
    assert len(store.results(limit=1)) == 1
    assert store.results(rule="x' OR '1'='1") == []
    assert store.results_cost_since(rule="faithfulness-llm", since=T0) == pytest.approx(1.0)
    assert store.results_cost_since(rule="faithfulness-llm", since=T0 + 1) == pytest.approx(0.5)
    assert store.results_cost_since(rule="unknown", since=T0) == 0.0


# ------------------------------------------------------------------------------ retention, stats
def test_retention_deletes_spans_and_rows_by_arrival(store: SpanStore) -> None:
    store.write_spans([span(1, 1, conversation="c1"), span(1, 2, parent=1)], now=T0)
    store.write_spans([span(2, 3, conversation="c2")], now=T0 + 1000)
    assert store.delete_older_than(T0 + 500) == 2
    assert store.trace_spans(tid(1)) == []
    assert len(store.trace_spans(tid(2))) == 1
    assert store.settled_traces(settle_seconds=SETTLE, now=T0 + 5000) == [tid(2)]
    assert store.idle_conversations(idle_seconds=1, now=T0 + 5000) == ["c2"]
    assert store.delete_older_than(T0 + 500) == 0


def test_stats_count_backlog(store: SpanStore) -> None:
    store.write_spans([span(1, 1, conversation="c1"), span(2, 2)], now=T0)
    store.enqueue_jobs([job("t1"), job("t2"), job("t3"), job("t4")], now=T0)
    a, b, _c = store.claim_jobs(owner="a", limit=3, lease_seconds=30, now=T0 + 5)
    store.complete_job(a.job_id, owner="a", record=result(a), now=T0 + 6)
    store.complete_job(b.job_id, owner="a", record=result(b, status="error"), now=T0 + 6)
    store.mark_planned(traces=[tid(1)], now=T0 + 6)
    stats = store.stats(now=T0 + 100)
    assert (stats.pending, stats.leased, stats.done, stats.failed) == (1, 1, 1, 1)
    assert (stats.unplanned_traces, stats.unplanned_conversations) == (1, 1)
    assert stats.oldest_pending_age_seconds == pytest.approx(100)


# ------------------------------------------------------------------------------ concurrency
def test_concurrent_claimers_never_get_the_same_job(
    store_factory: Callable[[], SpanStore],
) -> None:
    first = store_factory()
    second = store_factory()  # another connection pool / another process's view
    first.enqueue_jobs([job(f"t{i}") for i in range(200)], now=T0)
    claimed: dict[str, list[int]] = {}
    errors: list[BaseException] = []

    def claimer(name: str, store: SpanStore) -> None:
        mine: list[int] = []
        try:
            while True:
                got = store.claim_jobs(owner=name, limit=7, lease_seconds=60, now=T0)
                if not got:
                    break
                mine.extend(j.job_id for j in got)
        except BaseException as exc:  # surfaced below
            errors.append(exc)
        claimed[name] = mine

    threads = [
        threading.Thread(target=claimer, args=(f"w{i}", first if i % 2 else second))
        for i in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    all_ids = [jid for ids in claimed.values() for jid in ids]
    assert len(all_ids) == 200
    assert len(set(all_ids)) == 200


def test_spans_of_one_trace_and_conversation_arriving_at_different_workers(
    store_factory: Callable[[], SpanStore],
) -> None:
    worker_a, worker_b = store_factory(), store_factory()
    worker_a.write_spans([span(1, 2, parent=1, conversation="c1")], now=T0)
    worker_b.write_spans([span(1, 1)], now=T0 + 3)  # the root reaches the other worker, later
    worker_b.write_spans([span(2, 3, conversation="c1")], now=T0 + 5)
    assert worker_a.settled_traces(settle_seconds=SETTLE, now=T0 + 3 + SETTLE - 1) == []
    assert worker_a.settled_traces(settle_seconds=SETTLE, now=T0 + 3 + SETTLE) == [tid(1)]
    assert worker_a.idle_conversations(idle_seconds=60, now=T0 + 64) == []
    assert worker_a.idle_conversations(idle_seconds=60, now=T0 + 65) == ["c1"]
    assert len(worker_b.conversation_spans("c1")) == 3
    worker_b.mark_planned(traces=[tid(1)], conversations=["c1"], now=T0 + 65)
    assert worker_a.settled_traces(settle_seconds=SETTLE, now=T0 + 100) == [tid(2)]
    assert worker_a.idle_conversations(idle_seconds=60, now=T0 + 100) == []


def test_closed_store_raises_store_error(store_factory: Callable[[], SpanStore]) -> None:
    store = store_factory()
    store.close()
    with pytest.raises(StoreError):
        store.write_spans([span(1, 1)], now=T0)


def test_hostile_ids_in_jobs_and_results_are_cleaned_not_fatal(store: SpanStore) -> None:
    """A conversation id from a span attribute can hold NUL (PostgreSQL refuses it) or a lone
    surrogate (UTF-8 cannot encode it); planning and completing such a job must still work,
    or one span would stall every tick."""
    hostile = "conv\x00-\ud800-x"
    spec = JobSpec(
        rule="topics",
        target_type="conversation",
        target_id=hostile,
        trace_id=tid(1),
        span_id=sid(1),
        conversation_id=hostile,
    )
    assert store.enqueue_jobs([spec], now=T0) == 1
    assert store.enqueue_jobs([spec], now=T0) == 0  # the same pair, cleaned the same way
    (job,) = store.claim_jobs(owner="w", limit=5, lease_seconds=60, now=T0)
    assert "\x00" not in job.target_id and job.target_id.startswith("conv")
    record = result(spec, score=0.5)
    assert store.complete_job(job.job_id, owner="w", record=record, now=T0 + 1)
    (stored,) = store.results(rule="topics")
    assert stored.score == 0.5
