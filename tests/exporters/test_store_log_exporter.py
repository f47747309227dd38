"""StoreLogExporter and configure(log_store=...): the app's GenAI content log records reach a
real SQLite store, other records are counted and left out, and a slow or broken store never
blocks or raises into the app."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import (
    InMemoryLogRecordExporter,
    LogRecordExportResult,
    SimpleLogRecordProcessor,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider

from spanjudge._core.span_record import LogEvent
from spanjudge._store.sqlite import SQLiteStore
from spanjudge.errors import StoreError
from spanjudge.exporters._store_logs import (
    StoreLogExporter,
    log_to_event,
    store_log_processor,
)
from spanjudge.exporters._store_spans import QUEUE_FULL, STORE_ERROR

DETAILS = "gen_ai.client.inference.operation.details"
MESSAGES = [{"role": "user", "parts": [{"type": "text", "content": "Return a blender?"}]}]
ROOT = Path(__file__).resolve().parents[2]


class GatedStore(SQLiteStore):
    """A real SQLite store whose log writes can be held or made to fail."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Event()
        self.broken = False

    def write_logs(self, events: Sequence[LogEvent], *, now: float | None = None) -> None:
        self.entered.set()
        self.gate.wait()
        if self.broken:
            raise StoreError("disk full (injected)")
        super().write_logs(events, now=now)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[GatedStore]:
    s = GatedStore(tmp_path / "logs.db")
    yield s
    s.gate.set()
    s.close()


def emit(provider: LoggerProvider, n: int = 1) -> str:
    """``n`` content events in a chat span, an app log and our own result; the trace id."""
    tracer = TracerProvider().get_tracer("app")
    logger = provider.get_logger("opentelemetry.instrumentation.openai_v2")
    with tracer.start_as_current_span("chat") as span:
        for i in range(n):
            logger.emit(event_name=DETAILS, attributes={"gen_ai.input.messages": MESSAGES, "i": i})
        logger.emit(body="GET /healthz 200")
        logger.emit(event_name="gen_ai.evaluation.result", attributes={"x": 1})
    logger.emit(event_name=DETAILS)  # outside any span: no trace id
    return format(span.get_span_context().trace_id, "032x")


def test_content_events_reach_the_store_as_the_receiver_would_decode_them(
    store: GatedStore,
) -> None:
    memory = InMemoryLogRecordExporter()
    provider = LoggerProvider(resource=Resource.create({"service.name": "shop"}))
    processor = store_log_processor(store, flush_interval=0.05)
    provider.add_log_record_processor(processor)
    provider.add_log_record_processor(SimpleLogRecordProcessor(memory))
    trace_id = emit(provider)
    assert provider.force_flush(10_000)
    [sent] = [r for r in memory.get_finished_logs() if r.log_record.event_name == DETAILS][:1]
    assert store.trace_logs([trace_id]) == [log_to_event(sent, DETAILS)]
    assert store.trace_logs([trace_id])[0].attributes["gen_ai.input.messages"] == MESSAGES
    exporter = processor.exporter  # type: ignore[attr-defined]
    assert isinstance(exporter, StoreLogExporter)
    assert exporter.written == 1
    assert exporter.ignored == {"not_genai": 1, "own_result": 1, "no_trace_id": 1}
    provider.shutdown()


def test_a_full_queue_drops_and_counts_without_blocking_the_app(store: GatedStore) -> None:
    exporter = StoreLogExporter(store, max_queue_logs=3, batch_size=1, flush_interval=0.05)
    provider = LoggerProvider()
    provider.add_log_record_processor(SimpleLogRecordProcessor(exporter))
    store.gate.clear()  # the writer blocks inside the store
    emit(provider, n=1)
    assert store.entered.wait(5)
    emit(provider, n=10)  # returns although nothing can be written
    assert exporter.dropped[QUEUE_FULL] == 8  # 3 wait, 8 of 11 did not fit (1 being written)
    store.gate.set()
    assert exporter.force_flush(10_000)
    assert exporter.written == 3
    exporter.shutdown()


def test_a_broken_store_drops_and_counts_and_never_raises(store: GatedStore) -> None:
    store.broken = True
    exporter = StoreLogExporter(store, flush_interval=0.05)
    provider = LoggerProvider()
    provider.add_log_record_processor(SimpleLogRecordProcessor(exporter))
    emit(provider, n=4)
    assert exporter.force_flush(10_000)
    assert exporter.dropped == {STORE_ERROR: 4}
    assert exporter.written == 0
    exporter.shutdown()
    after = exporter.export([])
    assert after == LogRecordExportResult.SUCCESS  # nothing to keep, nothing refused


def test_configure_log_store_adds_the_processor_once(tmp_path: Path) -> None:
    code = textwrap.dedent(
        f"""
        import sys
        import spanjudge
        from opentelemetry import _logs, trace
        from spanjudge._store import open_store

        store = open_store({str(tmp_path / "cfg.db")!r})
        tracing = spanjudge.configure(service_name="shop", export_otlp=False, log_store=store)
        again = spanjudge.configure(service_name="shop", export_otlp=False, log_store=store)
        assert again.log_processors == tracing.log_processors
        logger = _logs.get_logger("opentelemetry.instrumentation.openai_v2")
        with trace.get_tracer("app").start_as_current_span("chat") as span:
            logger.emit(event_name="{DETAILS}", attributes={{"gen_ai.output.messages": []}})
            logger.emit(body="an app log line")
        assert tracing.force_flush(10_000)
        trace_id = format(span.get_span_context().trace_id, "032x")
        [event] = store.trace_logs([trace_id])
        print(event.event_name, event.resource["service.name"], tracing.owns_logger_provider)
        tracing.shutdown()
        store.close()
        """
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [DETAILS, "shop", "True"]
