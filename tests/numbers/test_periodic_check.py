"""The worker's regression WARNING comes from its own periodic check, not only from a Prometheus
scrape (issue 29): ``NumbersWatch.check()`` logs a new regression with nothing scraping, and
``start()`` runs it in a thread until ``stop()``."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from spanjudge._core.telemetry import prometheus_meter_provider
from spanjudge._store import open_store
from spanjudge._store.sql import SpanStore
from spanjudge.worker.numbers import NumbersConfig, NumbersWatch
from tests.numbers.test_watch import fill


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SpanStore]:
    opened = open_store(f"sqlite:///{tmp_path / 'numbers.db'}")
    try:
        yield opened
    finally:
        opened.close()


class Counting:
    """The store, counting its summary queries and saying when ``wanted`` were made."""

    def __init__(self, store: SpanStore, wanted: int) -> None:
        self.store, self.calls, self.wanted = store, 0, wanted
        self.enough = threading.Event()

    def summary_sums(self, **kwargs: Any) -> Any:
        found = self.store.summary_sums(**kwargs)  # type: ignore[attr-defined]
        self.calls += 1
        if self.calls >= self.wanted:
            self.enough.set()
        return found


def watch(store: Any, **config: Any) -> NumbersWatch:
    config = {"regression_key": "service.version", "interval_refresh_seconds": 0, **config}
    return NumbersWatch(
        store, NumbersConfig(**config), prometheus_meter_provider(CollectorRegistry())
    )


def regression_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "regression:" in r.getMessage()]


def test_a_check_without_any_scrape_logs_the_regression_once(
    store: SpanStore, caplog: pytest.LogCaptureFixture
) -> None:
    fill(store, {"1.4.0": 0.95, "1.5.0": 0.70}, 300)
    numbers = watch(store)
    with caplog.at_level(logging.WARNING, logger="spanjudge.regressions"):
        numbers.check()
        numbers.check()  # still worse: not logged again
    warnings = regression_warnings(caplog)
    assert len(warnings) == 2  # pass rate and mean score
    assert all("service.version=1.5.0" in w for w in warnings)


def test_start_runs_the_check_in_a_thread_until_stop(
    store: SpanStore, caplog: pytest.LogCaptureFixture
) -> None:
    fill(store, {"1.4.0": 0.95, "1.5.0": 0.70}, 300)
    counting = Counting(store, wanted=3)  # 1 unsplit + 1 per interval key + the regression sums
    numbers = watch(counting, interval_refresh_seconds=3600)
    with caplog.at_level(logging.WARNING, logger="spanjudge.regressions"):
        numbers.start()
        numbers.start()  # a second start is a no-op, not a second thread
        assert counting.enough.wait(60), "the periodic check never ran"
        numbers.stop()
    assert len(regression_warnings(caplog)) == 2
    assert counting.calls == 3  # once: the next check is an hour away and it was stopped
    assert [t for t in threading.enumerate() if t.name == "spanjudge-numbers"] == []


def test_without_a_baseline_no_thread_is_started(store: SpanStore) -> None:
    numbers = watch(store, regression_key=None)
    numbers.start()
    assert numbers._thread is None
    numbers.stop()


def test_a_failing_store_is_logged_and_retried_never_raised(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Broken:
        def summary_sums(self, **kwargs: Any) -> Any:
            raise OSError("database is gone")

    numbers = watch(Broken())
    with caplog.at_level(logging.WARNING, logger="spanjudge.regressions"):
        numbers.check()
    assert any("numbers check failed" in r.getMessage() for r in caplog.records)


def test_the_worker_starts_the_check_with_its_loop_and_stops_it_on_shutdown(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from spanjudge.evaluators._review.explain import OfflineJudge
    from spanjudge.settings import load_settings
    from spanjudge.worker.service import Worker

    url = f"sqlite:///{tmp_path / 'worker.db'}"
    seeded = open_store(url)
    fill(seeded, {"1.4.0": 0.95, "1.5.0": 0.70}, 300)
    seeded.close()
    settings = load_settings(
        None, store_url=url, regression_baseline={"key": "service.version"},
        interval_refresh_seconds=3600,
        rules=[{"metric": "faithfulness", "target": "llm", "name": "faith"}],
    )  # fmt: skip
    worker = Worker(settings, judge=OfflineJudge(), span_exporter=InMemorySpanExporter(),
                    log_exporter=InMemoryLogRecordExporter())  # fmt: skip
    assert worker.numbers is not None
    with caplog.at_level(logging.WARNING, logger="spanjudge.regressions"):
        worker.start_background()
        thread = worker.numbers._thread
        assert thread is not None and thread.is_alive()
        worker.shutdown(10)  # joins the check: its first round has logged by then
    assert not thread.is_alive()
    assert len(regression_warnings(caplog)) == 2
