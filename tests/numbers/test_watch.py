"""The worker's numbers on /metrics (issue 29): interval series per rule x segment that a
dashboard draws as a band, segments beyond the cap folded into "other" and counted, and a
regression against the baseline segment as a gauge and one WARNING naming rule, segments and
effect."""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from spanjudge._core.span_record import EvaluationRecord
from spanjudge._core.telemetry import prometheus_meter_provider
from spanjudge._store import open_store
from spanjudge._store.models import JobSpec
from spanjudge._store.sql import SpanStore
from spanjudge.worker.numbers import NumbersConfig, NumbersWatch

NOW = time.time()


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SpanStore]:
    opened = open_store(f"sqlite:///{tmp_path}/numbers.db")
    yield opened
    opened.close()


def fill(
    store: SpanStore, rates: dict[str, float], n: int, *, seed: int = 1, later: int = 0
) -> None:
    rng = random.Random(seed)
    records = []
    for offset, (version, rate) in enumerate(rates.items()):
        for i in range(n):
            passed = rng.random() < rate
            record = EvaluationRecord(
                "faith", "faithfulness", "llm", f"{version}-{i}", f"{i:032x}", f"{i:016x}",
                score=0.9 if passed else 0.1, label="pass" if passed else "fail",
                success=passed, service_name="shop",
                segments={"service": "shop", "service.version": version},
            )  # fmt: skip
            record.finished_at = (
                NOW - 3600 + (later + offset) * 60 + i / n
            )  # later versions are newer
            records.append(record)
    store.enqueue_jobs(
        [JobSpec(r.rule, "llm", r.target_id, r.trace_id, r.span_id) for r in records], now=NOW
    )
    by_id = {r.target_id: r for r in records}
    for job in store.claim_jobs(owner="w", limit=len(records), lease_seconds=60, now=NOW):
        record = by_id[job.target_id]
        assert record.finished_at is not None
        assert store.complete_job(job.job_id, owner="w", record=record, now=record.finished_at)


def scrape(registry: CollectorRegistry) -> list[tuple[str, dict[str, str], float]]:
    text = generate_latest(registry).decode()
    return [
        (sample.name, sample.labels, sample.value)
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    ]


def _shown(key: str, given: dict[str, str]) -> bool:
    return key not in given and not key.startswith("otel_scope")


def series(
    samples: list[tuple[str, dict[str, str], float]], name: str, **labels: str
) -> dict[str, float]:
    return {
        ",".join(f"{k}={v}" for k, v in sorted(tags.items()) if _shown(k, labels)): value
        for n, tags, value in samples
        if n == name and all(tags.get(k) == v for k, v in labels.items())
    }


def watch(store: SpanStore, **config: object) -> CollectorRegistry:
    registry = CollectorRegistry()
    NumbersWatch(store, NumbersConfig(**config), prometheus_meter_provider(registry))  # type: ignore[arg-type]
    return registry


def test_pass_rate_band_per_segment_and_the_overall_row(store: SpanStore) -> None:
    fill(store, {"1.0": 0.9, "1.1": 0.9}, 50)
    samples = scrape(watch(store))
    band = series(
        samples, "spanjudge_segment_pass_rate", segment_key="service.version", segment="1.0"
    )
    assert set(band) == {
        "bound=estimate,metric=faithfulness,rule=faith",
        "bound=high,metric=faithfulness,rule=faith",
        "bound=low,metric=faithfulness,rule=faith",
    }
    low, estimate, high = (
        band[f"bound={b},metric=faithfulness,rule=faith"] for b in ("low", "estimate", "high")
    )
    assert 0 < low < estimate < high <= 1
    overall = series(
        samples, "spanjudge_segment_results", segment_key="none", segment="all", status="scored"
    )
    assert list(overall.values()) == [100.0]
    assert series(samples, "spanjudge_segment_mean_score", segment="1.1", bound="estimate")


def test_segments_beyond_the_cap_are_folded_into_other_and_counted(store: SpanStore) -> None:
    fill(store, {f"1.{i}": 0.9 for i in range(5)}, 10)
    samples = scrape(watch(store, segment_cap=2))
    segments = {
        tags["segment"]
        for n, tags, _ in samples
        if n == "spanjudge_segment_pass_rate" and tags["segment_key"] == "service.version"
    }
    assert len(segments) == 3 and "other" in segments
    assert list(
        series(samples, "spanjudge_segment_folded", segment_key="service.version").values()
    ) == [3.0]


def test_a_regression_against_the_previous_version_is_a_gauge_and_one_warning(
    store: SpanStore, caplog: pytest.LogCaptureFixture
) -> None:
    fill(store, {"1.4.0": 0.95, "1.5.0": 0.70}, 300)
    registry = CollectorRegistry()
    numbers = NumbersWatch(
        store, NumbersConfig(regression_key="service.version", interval_refresh_seconds=0),
        prometheus_meter_provider(registry),
    )  # fmt: skip
    with caplog.at_level(logging.WARNING, logger="spanjudge.regressions"):
        samples = scrape(registry)
        numbers.rows()  # looked at again: still worse, not logged again
    found = series(
        samples, "spanjudge_regression", baseline="1.4.0", candidate="1.5.0", measure="pass_rate"
    )
    assert found["metric=faithfulness,rule=faith,segment_key=service.version,stat=decision"] == -1.0
    effect = found["metric=faithfulness,rule=faith,segment_key=service.version,stat=effect"]
    assert -0.35 < effect < -0.15
    warnings = [r.getMessage() for r in caplog.records if "regression:" in r.getMessage()]
    assert len(warnings) == 2  # pass rate and mean score, once each
    expected = "rule faith pass rate is worse with service.version=1.5.0 than with"
    assert any(expected in w and "effect -0." in w for w in warnings), warnings


def test_a_fixed_baseline_compares_every_other_version(store: SpanStore) -> None:
    fill(store, {"1.0": 0.9, "1.1": 0.9, "1.2": 0.9}, 40)
    samples = scrape(watch(store, regression_key="service.version", regression_baseline="1.0"))
    pairs = {(t["baseline"], t["candidate"]) for n, t, _ in samples if n == "spanjudge_regression"}
    assert pairs == {("1.0", "1.1"), ("1.0", "1.2")}
    decisions = series(samples, "spanjudge_regression", stat="decision")
    assert set(decisions.values()) == {0.0}


def test_settings_name_the_baseline_as_a_table() -> None:
    class Settings:
        def __init__(self) -> None:
            self.regression_baseline = {"key": "service.version", "value": "1.4.0"}
            self.segment_cap = 5

    config = NumbersConfig.from_settings(Settings())
    assert (config.regression_key, config.regression_baseline, config.segment_cap) == (
        "service.version", "1.4.0", 5,
    )  # fmt: skip
    assert NumbersConfig.from_settings(object()) == NumbersConfig()


def test_a_recovery_is_logged_only_for_a_pair_still_compared(
    store: SpanStore, caplog: pytest.LogCaptureFixture
) -> None:
    fill(store, {"1.4.0": 0.95, "1.5.0": 0.70}, 300)
    numbers = NumbersWatch(
        store, NumbersConfig(regression_key="service.version", interval_refresh_seconds=0),
        prometheus_meter_provider(CollectorRegistry()),
    )  # fmt: skip
    numbers.rows()
    fill(store, {"1.6.0": 0.95}, 300, seed=2, later=5)  # a newer version: 1.6.0 against 1.5.0 now
    with caplog.at_level(logging.INFO, logger="spanjudge.regressions"):
        rows = numbers.rows()
    assert not [r for r in caplog.records if "no longer worse" in r.getMessage()]
    pairs = {(t["baseline"], t["candidate"]) for _value, t in rows["spanjudge.regression"]}
    assert pairs == {("1.5.0", "1.6.0")}
