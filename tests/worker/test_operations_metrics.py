"""The worker's /metrics, scraped over HTTP as Prometheus does, carries the judge-outage,
late-arrival and store-file counters (issue 30): each read at scrape time from the part that
counts it (the loop's JudgeHealth, the planner's LateCounts, the SQLite store), with the
scraped names and labels docs/reliability.md lists."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from spanjudge._core.span_record import EvaluationRecord
from spanjudge._receive.serving import BackgroundServer
from spanjudge.settings import load_settings
from spanjudge.testing import ScriptedJudgeServer
from spanjudge.worker.service import Worker
from tests.support.clock import Clock
from tests.worker.conftest import base_config

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


@pytest.fixture
def worker(tmp_path: Path, offline_judge: ScriptedJudgeServer) -> Iterator[Worker]:
    config = base_config(offline_judge, f"sqlite:///{tmp_path}/ops.db", "http://127.0.0.1:9")
    config["outputs"] = ["span"]
    made = Worker(load_settings(None, **config), clock=Clock(time.time()))
    yield made
    with contextlib.suppress(Exception):
        made.emitter.shutdown(5)
    with contextlib.suppress(Exception):
        made.store.close()


def scrape(worker: Worker) -> Samples:
    """Every sample of the worker's /metrics, served by its receiver app on loopback."""
    with BackgroundServer(worker.app) as server:
        text = httpx.get(f"{server.url}/metrics", timeout=10).text
    return {
        (s.name, tuple(sorted((k, v) for k, v in s.labels.items() if k[:11] != "otel_scope_"))): (
            s.value
        )
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def errored(error_type: str = "judge_server_error") -> EvaluationRecord:
    return EvaluationRecord(
        rule="bias",
        metric="bias",
        target_type="agent",
        target_id="00000000000000aa",
        trace_id="0" * 31 + "1",
        span_id="00000000000000aa",
        status="error",
        error_type=error_type,
        error_message="500 from the provider",
    )


def test_judge_outage_counters_and_gauge_follow_the_loops_judge_health(worker: Worker) -> None:
    before = scrape(worker)
    assert before[("spanjudge_judge_outages_total", ())] == 0
    assert before[("spanjudge_judge_down", ())] == 0
    health = worker.monitor.runner.health
    health.observe(errored(), retried=True)  # the outage begins
    health.observe(errored(), retried=True)
    health.observe(errored(), retried=False)  # an evaluation given up
    during = scrape(worker)
    assert during[("spanjudge_judge_outages_total", ())] == 1
    assert during[("spanjudge_judge_failed_attempts_total", ())] == 3
    assert during[("spanjudge_judge_gave_up_total", ())] == 1
    assert during[("spanjudge_judge_down", ())] == 1
    scored = errored()
    scored.status, scored.error_type, scored.judge_calls = "scored", None, 1
    health.observe(scored, retried=False)  # it answers again
    after = scrape(worker)
    assert after[("spanjudge_judge_down", ())] == 0
    assert after[("spanjudge_judge_outages_total", ())] == 1


def test_late_spans_and_replanned_traces_and_conversations_are_counted(worker: Worker) -> None:
    late = worker.monitor.planner.late
    assert scrape(worker)[("spanjudge_planner_late_spans_total", ())] == 0
    late.trace("0" * 31 + "1", {"00000000000000b1", "00000000000000b2"}, targets=1)
    late.trace("0" * 31 + "2", {"00000000000000b3"}, targets=0)
    late.conversations += 1
    found = scrape(worker)
    assert found[("spanjudge_planner_late_spans_total", ())] == 3
    assert found[("spanjudge_planner_replanned_total", (("kind", "trace"),))] == 2
    assert found[("spanjudge_planner_replanned_total", (("kind", "conversation"),))] == 1


def test_a_deleted_sqlite_file_is_counted_as_a_store_file_change(
    worker: Worker, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    assert scrape(worker)[("spanjudge_store_file_changes_total", ())] == 0
    worker.store.stats(now=time.time())
    (tmp_path / "ops.db").unlink()
    with caplog.at_level(logging.ERROR):
        worker.store.stats(now=time.time())  # finds another file than the one it knew
    assert worker.store.file_changes == 1
    assert scrape(worker)[("spanjudge_store_file_changes_total", ())] == 1


def test_scrapes_read_the_last_refresh_and_never_sum_the_store_themselves(
    tmp_path: Path,
) -> None:
    """Issue 41: with ``interval_refresh_seconds = 1`` every scrape summed the store again, and
    a sum slower than the scrape's deadline made every scrape answer 500. The sums now run on
    the refresh thread; a scrape reads its last round."""
    import threading

    from prometheus_client import CollectorRegistry, generate_latest

    from spanjudge._core.telemetry import prometheus_meter_provider
    from spanjudge._store import open_store
    from spanjudge.worker.numbers import NumbersConfig, NumbersWatch
    from tests.numbers.test_watch import fill

    store = open_store(f"sqlite:///{tmp_path / 'numbers.db'}")
    fill(store, {"1.4.0": 0.95, "1.5.0": 0.70}, 50)
    callers: list[str] = []
    refreshed = threading.Event()

    class Recording:
        def summary_sums(self, **kwargs: object) -> object:
            callers.append(threading.current_thread().name)
            refreshed.set()
            return store.summary_sums(**kwargs)  # type: ignore[attr-defined]

    ticks = iter(range(0, 10**9, 10))  # every reading of the clock is 10 s later: always due
    registry = CollectorRegistry()
    numbers = NumbersWatch(
        Recording(),
        NumbersConfig(interval_keys=("service.version",), interval_refresh_seconds=1),
        prometheus_meter_provider(registry),
        clock=lambda: float(next(ticks)),
    )
    numbers.start(refresh=True)
    try:
        assert refreshed.wait(30)
        time.sleep(0.2)  # the first round's other sums
        texts = [generate_latest(registry).decode() for _ in range(5)]
    finally:
        numbers.stop()
        store.close()
    assert all("spanjudge_segment_pass_rate" in text for text in texts)
    assert threading.main_thread().name not in callers, callers
