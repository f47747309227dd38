"""Fixtures for the deploy/ checks: a metrics target fed by the real Telemetry class."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest
from prometheus_client import CollectorRegistry, start_http_server

from spanjudge.exporters.records import EvaluationRecord
from spanjudge.exporters.telemetry import Telemetry, prometheus_meter_provider

METRICS = ("faithfulness", "bias", "topic_adherence")


@dataclass
class MetricsTarget:
    """A loopback ``/metrics`` endpoint and a way to make the worker-like traffic behind it."""

    url: str
    record_batch: Callable[[], None]


def _batch(telemetry: Telemetry, counter: Iterator[int], backlog: dict[str, int]) -> None:
    """What a worker records in one busy tick: passes, fails, an error, skips and I/O."""
    now = time.time()
    for metric in METRICS:
        for status, score in (("scored", 0.9), ("scored", 0.3), ("error", None)):
            n = next(counter)
            telemetry.record_evaluation(EvaluationRecord(
                rule=f"{metric}-llm", metric=metric, target_type="llm", target_id=f"{n:016x}",
                trace_id=f"{n:032x}", span_id=f"{n:016x}", status=status, score=score,
                label=None if score is None else ("pass" if score >= 0.5 else "fail"),
                success=None if score is None else score >= 0.5, threshold=0.5,
                error_type="judge_error" if status == "error" else None,
                judge_model="gpt-4o-mini", input_tokens=800, output_tokens=120, cost=0.0004,
                judge_calls=2, service_name="support-bot",
                target_end_unix_nano=int((now - 12) * 1e9), finished_at=now,
            ))
        telemetry.record_skip(f"{metric}-llm", "not_sampled", 3)
    telemetry.record_receiver_request(200, "protobuf", spans=40)
    telemetry.record_receiver_request(503, "protobuf")
    telemetry.record_exporter_written(40)
    telemetry.record_exporter_dropped("queue_full", 1)
    telemetry.record_emitter_dropped("export_failed", 1)
    backlog["pending"] += 5  # work piles up, as the backlog alert expects to see


@pytest.fixture(scope="module")
def telemetry_target() -> Iterator[MetricsTarget]:
    """Serves the Prometheus exposition of a real :class:`Telemetry` on 127.0.0.1."""
    registry = CollectorRegistry()
    provider = prometheus_meter_provider(registry)
    telemetry = Telemetry(provider)
    backlog = {"pending": 10, "leased": 2, "unplanned_traces": 4, "unplanned_conversations": 1}
    started = time.monotonic()
    telemetry.set_backlog_callback(lambda: (dict(backlog), 700.0 + time.monotonic() - started))
    server, thread = start_http_server(0, addr="127.0.0.1", registry=registry)
    counter = itertools.count(1)
    try:
        yield MetricsTarget(
            url=f"http://127.0.0.1:{server.server_port}/metrics",
            record_batch=lambda: _batch(telemetry, counter, backlog),
        )
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
        provider.shutdown()  # type: ignore[attr-defined,unused-ignore]
