"""A store failure inside a job ends the drain once the jobs in flight are done, with the
failure raised and every job task's outcome read (none left for asyncio to report)."""

from __future__ import annotations

import gc
import logging
import threading
import time
from typing import Any

import pytest

from spanjudge.errors import StoreError
from spanjudge.evaluators._loop.config import MonitorConfig
from spanjudge.evaluators._loop.drain import Drain
from spanjudge.evaluators._plan.planner import TickReport


class _Store:
    """Hands out ``jobs`` in one claim, then nothing."""

    def __init__(self, jobs: list[str]) -> None:
        self.jobs = jobs
        self.claims = 0

    def claim_jobs(self, **kw: Any) -> list[str]:
        self.claims += 1
        jobs, self.jobs = self.jobs, []
        return jobs


class _Runner:
    """Jobs whose result write fails (``failing``) or succeeds; records what finished."""

    def __init__(self, failing: set[str]) -> None:
        self.failing = failing
        self.finished: list[str] = []

    async def run_job(self, job: str, report: TickReport, io: Any, shared: Any = None) -> None:
        if job in self.failing:
            raise StoreError(f"SQLite store: database or disk is full ({job})")
        self.finished.append(job)


def _drain(store: _Store, runner: _Runner, confirmed: list[int]) -> Drain:
    return Drain(
        store,  # type: ignore[arg-type]
        runner,  # type: ignore[arg-type]
        MonitorConfig(concurrency=4),
        owner="w1",
        clock=time.time,
        stopping=threading.Event(),
        plan_step=lambda report: False,
        rounds=lambda report: None,
        confirm=lambda: confirmed.append(1),
    )


def test_two_jobs_failing_at_once_raise_one_store_error_and_leave_nothing_unread(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.ERROR, logger="asyncio")
    store, runner, confirmed = _Store(["a", "b", "c"]), _Runner({"a", "b"}), []
    with pytest.raises(StoreError, match="disk is full"):
        _drain(store, runner, confirmed).run(TickReport())
    gc.collect()

    assert runner.finished == ["c"], "the job in flight beside the failures still finished"
    assert confirmed, "its score was confirmed before the drain ended"
    assert store.claims == 1, "nothing more was claimed after the failure"
    unread = [r.getMessage() for r in caplog.records if "never retrieved" in r.getMessage()]
    assert unread == []


def test_a_drain_without_failures_returns_after_every_job() -> None:
    store, runner, confirmed = _Store(["a", "b"]), _Runner(set()), []
    _drain(store, runner, confirmed).run(TickReport())
    assert sorted(runner.finished) == ["a", "b"] and store.claims == 2
