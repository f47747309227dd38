"""Redoing finished jobs (issue 30 items 3 and 4), on SQLite and PostgreSQL: the current result
moves to the superseded results with why, the job runs again under the same key, so a target
always has exactly one current result; what planning asks about jobs already planned."""

from __future__ import annotations

import pytest

from spanjudge._store.models import JobSpec, Redo
from spanjudge._store.sql import SpanStore
from tests.exporters.store.test_store import T0, job, result, sid, tid


def finish(
    store: SpanStore, specs: list[JobSpec], *, status: str = "scored", now: float = T0
) -> None:
    store.enqueue_jobs(specs, now=now)
    for j in store.claim_jobs(owner="w", limit=len(specs), lease_seconds=60, now=now):
        assert store.complete_job(j.job_id, owner="w", record=result(j, status=status), now=now)


def test_a_redone_job_runs_again_and_its_old_result_is_kept_as_superseded(
    store: SpanStore,
) -> None:
    finish(store, [job("t1")], status="error")
    [errored] = store.errored_job_ids(since=T0, until=T0)
    assert store.redo_jobs([Redo(errored, "retry_errors")], now=T0 + 10) == 1
    assert store.results() == []
    assert store.stats(now=T0 + 10).pending == 1

    [again] = store.claim_jobs(owner="w", limit=5, lease_seconds=60, now=T0 + 10)
    assert (again.job_id, again.attempts) == (errored, 1), "same job, attempts counted anew"
    assert store.complete_job(again.job_id, owner="w", record=result(again), now=T0 + 11)
    [current] = store.results()
    assert current.status == "scored"
    [old] = store.superseded_results(target_id="t1")
    assert (old.job_id, old.record.status, old.reason) == (errored, "error", "retry_errors")
    assert old.superseded_at == T0 + 10
    assert store.errored_job_ids(since=T0, until=T0 + 100) == []
    assert [item.job_id for item in store.unemitted_results()] == [errored]


def test_only_finished_jobs_are_redone(store: SpanStore) -> None:
    store.enqueue_jobs([job("t1"), job("t2")], now=T0)
    [leased] = store.claim_jobs(owner="w", limit=1, lease_seconds=60, now=T0)
    pending = leased.job_id + 1
    redos = [Redo(leased.job_id, "new_turns"), Redo(pending, "new_turns"), Redo(999, "x")]
    assert store.redo_jobs(redos, now=T0 + 1) == 0
    assert store.redo_jobs([], now=T0 + 1) == 0
    assert store.complete_job(leased.job_id, owner="w", record=result(leased), now=T0 + 2)
    assert store.superseded_results() == []


def test_a_redo_can_move_the_job_to_a_new_last_turn(store: SpanStore) -> None:
    spec = JobSpec("topics", "conversation", "c1", tid(1), sid(1), "c1", 1.0)
    finish(store, [spec])
    [planned] = store.conversation_jobs(["c1", "c2"], rules=["topics", "other"]).values()
    assert (planned.rule, planned.target_id, planned.state) == ("topics", "c1", "done")
    assert planned.result is not None and planned.result.status == "scored"

    redo = Redo(planned.job_id, "new_turns", trace_id=tid(2), span_id=sid(7))
    assert store.redo_jobs([redo], now=T0 + 5) == 1
    [again] = store.claim_jobs(owner="w", limit=1, lease_seconds=60, now=T0 + 5)
    assert (again.trace_id, again.span_id, again.target_id) == (tid(2), sid(7), "c1")
    state = store.conversation_jobs(["c1"], rules=["topics"])[("topics", "c1")]
    assert (state.state, state.result) == ("leased", None)


def test_superseded_costs_count_against_the_daily_budget(store: SpanStore) -> None:
    store.enqueue_jobs([job("t1")], now=T0)
    [first] = store.claim_jobs(owner="w", limit=1, lease_seconds=60, now=T0)
    store.complete_job(first.job_id, owner="w", record=result(first, cost=0.01), now=T0)
    assert store.redo_jobs([Redo(first.job_id, "retry_errors")], now=T0 + 1) == 1
    [again] = store.claim_jobs(owner="w", limit=1, lease_seconds=60, now=T0 + 1)
    store.complete_job(again.job_id, owner="w", record=result(again, cost=0.01), now=T0 + 2)
    assert store.results_cost_since(rule=first.rule, since=T0) == pytest.approx(0.02)
    assert store.results_cost_since(rule=first.rule, since=T0 + 1.5) == pytest.approx(0.01)


def test_planned_targets_lists_the_jobs_of_a_page_of_traces(store: SpanStore) -> None:
    llm = JobSpec("faith", "llm", sid(3), tid(1), sid(3))
    conversation = JobSpec("topics", "conversation", "c1", tid(1), sid(1), "c1")
    store.enqueue_jobs([llm, conversation, job(tid(2)), job(tid(9))], now=T0)
    assert store.planned_targets([tid(1), tid(2), tid(5)]) == {
        ("faith", "llm", sid(3)),
        ("topics", "conversation", "c1"),
        ("faithfulness-llm", "trace", tid(2)),
    }
    assert store.planned_targets([]) == set()


def test_errored_job_ids_are_those_in_the_window(store: SpanStore) -> None:
    finish(store, [job("t1")], status="error", now=T0)
    finish(store, [job("t2")], status="error", now=T0 + 100)
    finish(store, [job("t3")], now=T0 + 100)
    both = store.errored_job_ids(since=T0, until=T0 + 200)
    assert len(both) == 2, "errors only, not the scored result"
    assert store.errored_job_ids(since=T0 + 50, until=T0 + 200) == both[1:]
    assert store.errored_job_ids(since=T0, until=T0 + 50) == both[:1]
