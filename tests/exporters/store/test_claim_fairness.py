"""Claims are fair between traces (issue 30 item 7), on SQLite and PostgreSQL: a trace whose
1,000 LLM calls were planned first does not fill every claim batch while other traces wait;
a batch takes every waiting trace's oldest job before a second job of any trace. Counted in
claims, never timed."""

from __future__ import annotations

import threading

import pytest

from spanjudge._store import jobs as jobs_module
from spanjudge._store.models import JobSpec
from spanjudge._store.sql import SpanStore
from spanjudge.evaluators._loop.config import MonitorConfig
from tests.exporters.store.test_store import T0, sid, tid
from tests.support.stores import StoreFactory

BIG = tid(1)
SMALL = [tid(100 + n) for n in range(16)]


def llm_job(trace_id: str, n: int) -> JobSpec:
    return JobSpec("faithfulness-llm", "llm", sid(n), trace_id, sid(n))


def enqueue_big_then_small(store: SpanStore) -> None:
    """1,000 jobs of one trace enqueued first, then one job of each of 16 other traces."""
    assert store.enqueue_jobs([llm_job(BIG, n) for n in range(1, 1001)], now=T0) == 1000
    small = [llm_job(trace, 5000 + n) for n, trace in enumerate(SMALL)]
    assert store.enqueue_jobs(small, now=T0 + 1) == 16


def test_the_first_claim_batch_takes_every_small_trace_behind_a_huge_one(
    store: SpanStore,
) -> None:
    enqueue_big_then_small(store)
    batch = MonitorConfig().batch_size  # what a worker claims at most at once
    claimed = store.claim_jobs(owner="w1", limit=batch, lease_seconds=60, now=T0 + 2)

    assert len(claimed) == batch
    traces = [j.trace_id for j in claimed]
    assert set(SMALL) <= set(traces), "a small trace waited behind the huge one"
    assert traces.count(BIG) == batch - 16
    big = [j.target_id for j in claimed if j.trace_id == BIG]
    assert big == [sid(n) for n in range(1, batch - 15)], "the huge trace's jobs oldest first"


def test_a_small_batch_takes_one_job_per_trace_before_a_second_of_any(store: SpanStore) -> None:
    enqueue_big_then_small(store)
    first = store.claim_jobs(owner="w1", limit=17, lease_seconds=60, now=T0 + 2)
    assert sorted(j.trace_id for j in first) == sorted([BIG, *SMALL])
    # handed back in job id order: the huge trace's oldest job is among them, first
    assert first[0].trace_id == BIG and first[0].target_id == sid(1)
    rest = store.claim_jobs(owner="w1", limit=10, lease_seconds=60, now=T0 + 2)
    assert [j.target_id for j in rest] == [sid(n) for n in range(2, 12)]


def test_a_job_given_back_for_later_waits_and_expired_leases_are_claimed_again(
    store: SpanStore,
) -> None:
    store.enqueue_jobs([llm_job(BIG, 1), llm_job(SMALL[0], 2)], now=T0)
    a, b = store.claim_jobs(owner="w1", limit=2, lease_seconds=30, now=T0)
    assert store.release_job(a.job_id, owner="w1", retry_at=T0 + 100)
    assert store.claim_jobs(owner="w2", limit=5, lease_seconds=30, now=T0 + 10) == []
    [again] = store.claim_jobs(owner="w2", limit=5, lease_seconds=300, now=T0 + 30)
    assert again.job_id == b.job_id and again.attempts == 2, "b's lease expired"
    [later] = store.claim_jobs(owner="w2", limit=5, lease_seconds=30, now=T0 + 100)
    assert later.job_id == a.job_id


def test_workers_claiming_at_once_never_share_a_job(store_factory: StoreFactory) -> None:
    enqueue_big_then_small(store_factory())
    stores = [store_factory() for _ in range(4)]
    taken: list[list[int]] = [[] for _ in stores]
    failures: list[BaseException] = []

    def work(n: int) -> None:
        try:
            while jobs := stores[n].claim_jobs(
                owner=f"w{n}", limit=7, lease_seconds=600, now=T0 + 2
            ):
                taken[n].extend(j.job_id for j in jobs)
        except BaseException as exc:  # reported below, not lost in the thread
            failures.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(len(stores))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert failures == []
    every = [job_id for jobs in taken for job_id in jobs]
    assert len(every) == 1016 and len(set(every)) == 1016, "a job was leased twice or lost"


def test_a_claim_ranks_only_the_oldest_window_of_due_jobs(
    store: SpanStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the bound that keeps a claim's cost flat with the backlog: traces behind the window
    # wait for it to move, as documented at CLAIM_WINDOW
    monkeypatch.setattr(jobs_module, "CLAIM_WINDOW", 100)
    enqueue_big_then_small(store)
    claimed = store.claim_jobs(owner="w1", limit=64, lease_seconds=60, now=T0 + 2)
    assert {j.trace_id for j in claimed} == {BIG}
