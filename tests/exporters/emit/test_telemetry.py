"""Telemetry instruments: values through an in-memory reader and names in a real scrape."""

from __future__ import annotations

from typing import Any

import httpx
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from prometheus_client import CollectorRegistry, generate_latest

from spanjudge._core import metric_names as names
from spanjudge._core.telemetry import Telemetry, metrics_asgi_app, prometheus_meter_provider
from spanjudge._receive.receiver import create_receiver_app
from spanjudge._receive.serving import BackgroundServer
from tests.exporters.emit.conftest import make_record
from tests.support.metrics import data_points


def _points(reader: InMemoryMetricReader) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for name, point in data_points(reader):
        out.setdefault(name, []).append(point)
    return out


def _by_labels(points: list[Any], **labels: str) -> Any:
    matches = [p for p in points if all(p.attributes.get(k) == v for k, v in labels.items())]
    assert len(matches) == 1, (labels, [p.attributes for p in points])
    return matches[0]


def test_record_evaluation_values() -> None:
    reader = InMemoryMetricReader()
    telemetry = Telemetry(MeterProvider(metric_readers=[reader]))
    telemetry.record_evaluation(make_record(score=0.75, label="pass"))
    telemetry.record_evaluation(make_record(score=0.25, label="fail", success=False))
    telemetry.record_evaluation(
        make_record(status="error", score=None, label=None, error_type="Timeout")
    )
    telemetry.record_evaluation(make_record(status="skipped", score=None, label=None))
    telemetry.record_skip("faithfulness-llm", "not_sampled", 3)
    telemetry.set_backlog_callback(lambda: ({"pending": 4, "leased": 1}, 42.5))
    points = _points(reader)

    evaluations = points[names.EVALUATIONS]
    for label in ("pass", "fail", "error", "skipped"):
        point = _by_labels(evaluations, label=label, metric="faithfulness", rule="faithfulness-llm")
        assert point.value == 1
        assert point.attributes["service"] == "support-bot"
    scores = points[names.EVALUATION_SCORE]
    assert {p.attributes["label"] for p in scores} == {"pass", "fail"}  # none for error/skipped
    assert _by_labels(scores, label="pass").sum == 0.75
    assert _by_labels(scores, label="fail").sum == 0.25
    tokens = points[names.JUDGE_TOKENS]
    assert _by_labels(tokens, direction="input", model="gpt-4o-mini").value == 4 * 120
    assert _by_labels(tokens, direction="output").value == 4 * 30
    assert (
        abs(_by_labels(points[names.JUDGE_COST], metric="faithfulness").value - 4 * 0.0021) < 1e-9
    )
    assert _by_labels(points[names.JUDGE_CALLS], metric="faithfulness").value == 8
    lag = _by_labels(points[names.EVALUATION_LAG], metric="faithfulness")
    assert lag.count == 4 and lag.sum == 4 * 12.5  # finished_at - target end
    assert _by_labels(points[names.SAMPLER_SKIPPED], reason="not_sampled").value == 3
    assert _by_labels(points[names.BACKLOG], state="pending").value == 4
    assert _by_labels(points[names.BACKLOG], state="leased").value == 1
    assert points[names.BACKLOG_AGE][0].value == 42.5


def test_broken_backlog_callback_does_not_break_collection() -> None:
    reader = InMemoryMetricReader()
    telemetry = Telemetry(MeterProvider(metric_readers=[reader]))

    def broken() -> tuple[dict[str, int], float | None]:
        raise RuntimeError("store down")

    telemetry.set_backlog_callback(broken)
    telemetry.record_skip("r", "filtered")
    assert _by_labels(_points(reader)[names.SAMPLER_SKIPPED], reason="filtered").value == 1


# The names Prometheus scrapes, as documented in metric_names.py; dashboards rely on them.
SCRAPED = [
    "spanjudge_evaluation_score_bucket",
    "spanjudge_evaluation_score_sum",
    "spanjudge_evaluation_score_count",
    "spanjudge_evaluations_total",
    "spanjudge_evaluation_lag_seconds_bucket",
    "spanjudge_judge_tokens_total",
    "spanjudge_judge_cost_usd_total",
    "spanjudge_judge_calls_total",
    "spanjudge_backlog",
    "spanjudge_backlog_oldest_age_seconds",
    "spanjudge_sampler_skipped_total",
    "spanjudge_exporter_dropped_spans_total",
    "spanjudge_exporter_written_spans_total",
    "spanjudge_emitter_dropped_spans_total",
    "spanjudge_emitter_events_not_accepted_total",
    "spanjudge_receiver_requests_total",
    "spanjudge_receiver_spans_total",
]


def _fill(telemetry: Telemetry) -> None:
    telemetry.record_evaluation(make_record())
    telemetry.record_skip("faithfulness-llm", "rate_budget")
    telemetry.set_backlog_callback(lambda: ({"pending": 2}, 7.0))
    telemetry.record_exporter_written(10)
    telemetry.record_exporter_dropped("queue_full", 1)
    telemetry.record_emitter_dropped("export_failed", 1)
    telemetry.record_events_not_accepted(3)
    telemetry.record_receiver_request(200, "protobuf", spans=5)


def test_prometheus_scrape_has_the_documented_names() -> None:
    registry = CollectorRegistry()
    telemetry = Telemetry(prometheus_meter_provider(registry))
    _fill(telemetry)
    text = generate_latest(registry).decode()
    lines = [line for line in text.splitlines() if line and not line.startswith("#")]
    for name in SCRAPED:
        assert any(line.startswith(name + "{") or line.startswith(name + " ") for line in lines), (
            name,
            text,
        )
    assert "spanjudge_evaluations_total{" in text and 'label="pass"' in text
    assert 'spanjudge_receiver_requests_total{code="200",encoding="protobuf"' in text


def test_metrics_endpoint_over_http_on_the_receiver() -> None:
    registry = CollectorRegistry()
    telemetry = Telemetry(prometheus_meter_provider(registry))
    _fill(telemetry)
    app = create_receiver_app(
        sink=lambda records: None, telemetry=telemetry, metrics_app=metrics_asgi_app(registry)
    )
    with BackgroundServer(app) as server:
        response = httpx.get(f"{server.url}/metrics", timeout=5)
    assert response.status_code == 200
    assert "spanjudge_evaluations_total" in response.text
    assert "spanjudge_backlog_oldest_age_seconds" in response.text


def test_prime_starts_drop_and_skip_counters_at_zero() -> None:
    """Alert and dashboard expressions on drop and skip counters return 0, not "no data",
    before the first drop; later adds land on the same series."""
    registry = CollectorRegistry()
    telemetry = Telemetry(prometheus_meter_provider(registry))
    telemetry.prime(["faithfulness-llm"])
    telemetry.record_exporter_dropped("queue_full", 3)
    lines = [line for line in generate_latest(registry).decode().splitlines() if line[:1] != "#"]

    def value(name: str, **labels: str) -> float:
        for line in lines:
            if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
                return float(line.rsplit(" ", 1)[1])
        raise AssertionError(f"no series {name} {labels}")

    assert value("spanjudge_exporter_written_spans_total") == 0.0
    assert value("spanjudge_exporter_dropped_spans_total", reason="store_error") == 0.0
    assert value("spanjudge_exporter_dropped_spans_total", reason="queue_full") == 3.0
    assert value("spanjudge_emitter_dropped_spans_total", reason="export_failed") == 0.0
    assert (
        value("spanjudge_sampler_skipped_total", rule="faithfulness-llm", reason="rate_budget") == 0
    )
    assert value("spanjudge_enrich_forward_failed_spans_total") == 0.0
    assert value("spanjudge_emitter_events_not_accepted_total") == 0.0
