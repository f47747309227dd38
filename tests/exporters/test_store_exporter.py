"""StoreSpanExporter: real OTel SDK spans into a real SQLite store, and what happens when the
store is slow or broken (drop and count, never block or raise into the app)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.trace import SpanKind, Status, StatusCode

from spanjudge._core.span_record import SpanRecord
from spanjudge._store.sql import SpanStore
from spanjudge._store.sqlite import SQLiteStore
from spanjudge.errors import StoreError
from spanjudge.exporters._store_spans import (
    QUEUE_FULL,
    SHUTDOWN,
    STORE_ERROR,
    StoreSpanExporter,
    store_span_processor,
)
from spanjudge.tracer import _attributes as attrs


class RecordingStore(SQLiteStore):
    """A real SQLite store that also records batch sizes and can be made slow or broken."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.batches: list[int] = []
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Event()
        self.broken = False

    def write_spans(self, spans: Sequence[SpanRecord], *, now: float | None = None) -> None:
        self.entered.set()
        self.gate.wait()
        if self.broken:
            raise StoreError("disk full (injected)")
        self.batches.append(len(spans))
        super().write_spans(spans, now=now)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[RecordingStore]:
    s = RecordingStore(tmp_path / "spans.db")
    yield s
    s.gate.set()
    s.close()


def provider_with(exporter: StoreSpanExporter) -> TracerProvider:
    provider = TracerProvider(resource=Resource({"service.name": "shop"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider


def test_spans_reach_the_store_in_bounded_batches_with_their_content(
    store: RecordingStore,
) -> None:
    exporter = StoreSpanExporter(store, batch_size=8, flush_interval=0.05)
    provider = provider_with(exporter)
    tracer = provider.get_tracer("test-scope")
    with tracer.start_as_current_span("invoke_agent support", kind=SpanKind.SERVER) as root:
        root.set_attribute(attrs.GEN_AI_CONVERSATION_ID, "conv-9")
        root.set_attribute("tags", ("a", "b"))
        root.add_event("turn", {"n": 1})
        for i in range(20):
            with tracer.start_as_current_span(f"chat m{i}") as child:
                child.set_attribute(attrs.GEN_AI_USAGE_INPUT_TOKENS, i)
        root.set_status(Status(StatusCode.ERROR, "bad"))
    assert exporter.force_flush(10_000)
    trace_id = format(root.get_span_context().trace_id, "032x")
    spans = store.trace_spans(trace_id)
    assert len(spans) == 21 and exporter.written == 21
    assert max(store.batches) <= 8 and sum(store.batches) == 21
    by_name = {s.name: s for s in spans}
    top = by_name["invoke_agent support"]
    assert top.parent_span_id is None and top.kind == "SERVER"
    assert (top.status_code, top.status_message) == ("ERROR", "bad")
    assert top.attributes["tags"] == ["a", "b"]
    assert top.conversation_id == "conv-9" and top.service_name == "shop"
    assert [(e.name, e.attributes) for e in top.events] == [("turn", {"n": 1})]
    assert top.scope_name == "test-scope"
    child = by_name["chat m3"]
    assert child.parent_span_id == top.span_id
    assert child.attributes[attrs.GEN_AI_USAGE_INPUT_TOKENS] == 3
    assert child.end_time_unix_nano >= child.start_time_unix_nano > 0
    assert store.conversation_spans("conv-9")[0].span_id == spans[0].span_id
    exporter.shutdown()
    assert exporter.dropped_total == 0


def test_full_queue_drops_and_counts_without_blocking_the_app(store: RecordingStore) -> None:
    store.gate.clear()  # the store hangs until we open the gate
    seen: list[tuple[str, int]] = []
    exporter = StoreSpanExporter(
        store,
        max_queue_spans=10,
        batch_size=4,
        flush_interval=0.01,
        on_dropped=lambda reason, n: seen.append((reason, n)),
    )
    tracer = provider_with(exporter).get_tracer("t")
    for i in range(50):
        # Each span end calls export() in this thread; with the store stuck it must still return.
        with tracer.start_as_current_span(f"s{i}"):
            pass
    assert store.entered.wait(5)
    assert not store.gate.is_set()  # the app finished its 50 spans while the store was stuck
    assert exporter.dropped == {QUEUE_FULL: 40}
    assert sum(n for reason, n in seen if reason == QUEUE_FULL) == 40
    assert exporter.queued == 10
    store.gate.set()
    assert exporter.force_flush(10_000)
    assert exporter.written == 10
    assert exporter.queued == 0
    exporter.shutdown()


def test_broken_store_drops_and_counts_and_never_raises(
    store: RecordingStore, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="spanjudge.store_exporter")
    store.broken = True
    written: list[int] = []
    dropped: list[tuple[str, int]] = []
    exporter = StoreSpanExporter(
        store,
        batch_size=5,
        flush_interval=0.01,
        on_written=written.append,
        on_dropped=lambda r, n: dropped.append((r, n)),
    )
    tracer = provider_with(exporter).get_tracer("t")
    for i in range(12):
        with tracer.start_as_current_span(f"s{i}"):
            pass
    assert exporter.force_flush(10_000)
    assert exporter.dropped == {STORE_ERROR: 12}
    assert sum(n for _, n in dropped) == 12 and written == []
    # Several failed batches, one warning: the log is rate-limited, the counters are not.
    warnings = [r for r in caplog.records if "disk full (injected)" in r.getMessage()]
    assert len(warnings) == 1
    assert exporter.written == 0
    # The store comes back: the next spans are written (the exporter kept running).
    store.broken = False
    with tracer.start_as_current_span("after"):
        pass
    assert exporter.force_flush(10_000)
    assert exporter.written == 1 and written == [1]
    exporter.shutdown()


def test_a_raising_counter_hook_does_not_stop_the_writer(store: RecordingStore) -> None:
    def boom(n: int) -> None:
        raise RuntimeError("telemetry down")

    exporter = StoreSpanExporter(store, batch_size=2, flush_interval=0.01, on_written=boom)
    tracer = provider_with(exporter).get_tracer("t")
    for _ in range(2):
        for i in range(3):
            with tracer.start_as_current_span(f"s{i}"):
                pass
        assert exporter.force_flush(10_000)
    assert exporter.written == 6
    exporter.shutdown()


def test_shutdown_drains_the_queue_then_refuses_new_spans(store: RecordingStore) -> None:
    # A long flush interval: only shutdown() makes these partial batches go out.
    exporter = StoreSpanExporter(store, batch_size=1000, flush_interval=60)
    provider = provider_with(exporter)
    tracer = provider.get_tracer("t")
    for i in range(30):
        with tracer.start_as_current_span(f"s{i}"):
            pass
    provider.shutdown()  # calls exporter.shutdown()
    assert exporter.written == 30
    assert sum(store.batches) == 30
    assert exporter.dropped_total == 0


def test_export_after_shutdown_is_dropped_and_counted(store: RecordingStore) -> None:
    exporter = StoreSpanExporter(store)
    provider = provider_with(exporter)
    tracer = provider.get_tracer("t")
    exporter.shutdown()
    with tracer.start_as_current_span("too late") as late:
        pass
    assert exporter.export([late]) is SpanExportResult.FAILURE  # type: ignore[list-item]
    assert exporter.dropped == {SHUTDOWN: 2}
    assert exporter.written == 0


def test_store_span_processor_wraps_the_exporter(store: SpanStore) -> None:
    processor = store_span_processor(store, max_queue_spans=5)
    exporter = processor.span_exporter  # type: ignore[attr-defined]
    assert isinstance(exporter, StoreSpanExporter)
    assert exporter.max_queue_spans == 5
    processor.shutdown()


def test_processor_force_flush_waits_until_spans_are_in_the_store(store: SpanStore) -> None:
    # The SDK's SimpleSpanProcessor.force_flush() never asks its exporter; a Tracing.force_flush()
    # before planning must mean "the spans are in the store".
    from opentelemetry.sdk.trace import TracerProvider

    processor = store_span_processor(store, flush_interval=60.0)  # no timer-driven write
    provider = TracerProvider()
    provider.add_span_processor(processor)
    with provider.get_tracer("t").start_as_current_span("root") as span:
        trace_id = format(span.get_span_context().trace_id, "032x")
    assert processor.force_flush(5_000)
    assert [s.name for s in store.trace_spans(trace_id)] == ["root"]
    provider.shutdown()
