"""An OpenTelemetry ``SpanExporter`` that copies finished spans into a span store.

It runs beside the OTLP exporter and must never hurt the app: ``export()`` only appends to a
bounded queue and returns; a daemon thread writes batches to the store. When the queue is full
or the store fails, spans are dropped and counted by reason, never retried into unbounded memory
and never raised into the app.

Example::

    from opentelemetry.sdk.trace import TracerProvider
    from spanjudge.exporters.store import open_store
    from spanjudge.exporters.store_exporter import store_span_processor

    provider = TracerProvider()
    provider.add_span_processor(store_span_processor(open_store()))
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from spanjudge.exporters.batch import QUEUE_FULL, SHUTDOWN, BatchWorker
from spanjudge.exporters.convert import span_to_record
from spanjudge.exporters.records import SpanRecord
from spanjudge.exporters.store.base import SpanStore

SpanLog = SpanStore  # narrowed to the span-log protocol once the store exposes it

logger = logging.getLogger("spanjudge.store_exporter")

# Drop reasons (the ``reason`` label of spanjudge.exporter.dropped_spans).
STORE_ERROR = "store_error"
INVALID_SPAN = "invalid_span"  # a span the converter could not read
DROP_REASONS: tuple[str, ...] = (QUEUE_FULL, STORE_ERROR, INVALID_SPAN, SHUTDOWN)

# Seconds between two warnings about a failing store, so a dead disk does not flood the log.
_WARN_EVERY = 30.0


class StoreSpanExporter(SpanExporter):
    """Writes spans to a :class:`SpanStore` from a background thread, through a bounded queue.

    - ``max_queue_spans``: spans waiting beyond this are dropped (``queue_full``);
    - ``batch_size``: spans per ``write_spans`` call (one transaction);
    - ``flush_interval``: seconds a partial batch may wait before it is written;
    - ``on_written(n)`` / ``on_dropped(reason, n)``: optional hooks, called from the writer
      (or the exporting) thread, for telemetry counters. They must be quick and not raise.

    ``written``, ``dropped`` (by reason) and ``dropped_total`` read the counters. The queue and
    its writer thread are a :class:`~spanjudge.exporters.batch.BatchWorker`.

    Example::

        exporter = StoreSpanExporter(store, max_queue_spans=20_000)
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        ...
        print(exporter.written, exporter.dropped)
    """

    def __init__(
        self,
        store: SpanLog,
        *,
        max_queue_spans: int = 10_000,
        batch_size: int = 512,
        flush_interval: float = 0.5,
        on_written: Callable[[int], None] | None = None,
        on_dropped: Callable[[str, int], None] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if max_queue_spans < 1 or batch_size < 1:
            raise ValueError("max_queue_spans and batch_size must be positive")
        self.store = store
        self.on_written = on_written
        self._clock = clock
        self._written = 0
        self._last_warning = -_WARN_EVERY
        self._worker: BatchWorker[ReadableSpan] = BatchWorker(
            self._write,
            name="spanjudge-store-exporter",
            max_queue=max_queue_spans,
            batch_size=batch_size,
            flush_interval_seconds=flush_interval,
            on_dropped=on_dropped,
        )

    # ---------------------------------------------------------------- counters
    @property
    def max_queue_spans(self) -> int:
        return self._worker.max_queue

    @property
    def written(self) -> int:
        """Spans written to the store so far."""
        return self._written

    @property
    def dropped(self) -> dict[str, int]:
        """Spans dropped so far, by reason (``queue_full``, ``store_error``, ...)."""
        return self._worker.dropped

    @property
    def dropped_total(self) -> int:
        return self._worker.dropped_total

    @property
    def queued(self) -> int:
        """Spans waiting in the queue or being written right now."""
        return self._worker.queued

    def _warn(self, message: str) -> None:
        # At most one warning per period: a dead disk or a flood must not flood the log too.
        now = time.monotonic()
        if now - self._last_warning >= _WARN_EVERY:
            self._last_warning = now
            logger.warning(
                "%s (drops are counted; next warning in %.0fs at the earliest)",
                message,
                _WARN_EVERY,
            )

    # ---------------------------------------------------------------- SpanExporter
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        """Queue spans for the writer; O(len(spans)), never blocks on the store, never raises."""
        try:
            accepted = self._worker.put(spans)
        except Exception:  # the exporter never raises into the app
            logger.debug("store exporter export failed", exc_info=True)
            return SpanExportResult.FAILURE
        if accepted < len(spans):
            reason = SHUTDOWN if self._worker.is_shutdown else QUEUE_FULL
            self._warn(f"store exporter {reason}: {len(spans) - accepted} spans dropped")
            return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Write everything queued so far; False if ``timeout_millis`` passed first."""
        return self._worker.force_flush(timeout_millis / 1000)

    def shutdown(self, timeout_millis: int = 30_000) -> None:
        """Stop accepting spans, drain the queue (bounded by ``timeout_millis``), stop the
        writer. The store is the caller's to close."""
        self._worker.shutdown(timeout_millis / 1000)

    # ---------------------------------------------------------------- writer thread
    def _write(self, batch: list[ReadableSpan]) -> None:
        records: list[SpanRecord] = []
        invalid = 0
        for span in batch:
            try:
                records.append(span_to_record(span))
            except Exception:
                invalid += 1
        self._worker.drop(INVALID_SPAN, invalid)
        if not records:
            return
        try:
            self.store.write_spans(records, now=self._clock())
        except Exception as exc:
            self._worker.drop(STORE_ERROR, len(records))
            self._warn(f"span store write failed, {len(records)} spans dropped: {exc}")
            return
        self._written += len(records)
        if self.on_written is not None:
            try:
                self.on_written(len(records))
            except Exception:  # a telemetry hook must not kill the writer or the app
                logger.debug("store exporter counter hook failed", exc_info=True)


def store_span_processor(store: SpanLog, **kwargs: Any) -> SpanProcessor:
    """A span processor that copies every finished span into ``store``.

    A :class:`SimpleSpanProcessor` is enough: the exporter's ``export()`` only queues. The
    exporter is reachable as ``processor.span_exporter`` for its counters.

    Example::

        provider.add_span_processor(store_span_processor(open_store(), max_queue_spans=50_000))
    """
    return SimpleSpanProcessor(StoreSpanExporter(store, **kwargs))
