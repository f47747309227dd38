"""OpenTelemetry exporters that copy finished spans, and GenAI content log records, into a store.

They run beside the OTLP exporters and must never hurt the app: ``export()`` only appends to a
bounded queue and returns; a daemon thread writes batches to the store. When the queue is full
or the store fails, items are dropped and counted by reason, never retried into unbounded memory
and never raised into the app. The log exporter keeps only GenAI content events (what an
instrumentation in an event content mode emits), filtered before they are queued, so the app's
other logs cost a dictionary lookup each.

Example::

    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk.trace import TracerProvider
    from spanjudge.exporters.store import open_store
    from spanjudge.exporters.store_exporter import store_log_processor, store_span_processor

    store = open_store()
    TracerProvider().add_span_processor(store_span_processor(store))
    LoggerProvider().add_log_record_processor(store_log_processor(store))
"""

from __future__ import annotations

import base64
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Generic, TypeVar

from opentelemetry.sdk._logs import LogRecordProcessor, ReadableLogRecord
from opentelemetry.sdk._logs.export import (
    LogRecordExporter,
    LogRecordExportResult,
    SimpleLogRecordProcessor,
)
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from spanjudge.exporters.batch import QUEUE_FULL, SHUTDOWN, BatchWorker
from spanjudge.exporters.convert import span_to_record
from spanjudge.exporters.otlp_decode import (
    IGNORED_NO_TRACE,
    content_event_name,
    ignored_reason,
)
from spanjudge.exporters.records import LogEvent, SpanRecord
from spanjudge.exporters.store.base import EventLog, SpanLog

logger = logging.getLogger("spanjudge.store_exporter")

# Drop reasons (the ``reason`` label of spanjudge.exporter.dropped_spans).
STORE_ERROR = "store_error"
INVALID_SPAN = "invalid_span"  # a span the converter could not read
INVALID_LOG = "invalid_log"  # a log record the converter could not read
DROP_REASONS: tuple[str, ...] = (QUEUE_FULL, STORE_ERROR, INVALID_SPAN, INVALID_LOG, SHUTDOWN)

# Seconds between two warnings about a failing store, so a dead disk does not flood the log.
_WARN_EVERY = 30.0


T = TypeVar("T")


class _StoreWriter(Generic[T]):
    """What both store exporters share: the batch worker, the counters, rate-limited warnings
    and the guarded hand-off from the app's thread."""

    def __init__(
        self,
        *,
        name: str,
        max_queue: int,
        batch_size: int,
        flush_interval: float,
        on_written: Callable[[int], None] | None,
        on_dropped: Callable[[str, int], None] | None,
        clock: Callable[[], float],
    ) -> None:
        self.on_written = on_written
        self._clock = clock
        self._written = 0
        self._last_warning = -_WARN_EVERY
        self._worker: BatchWorker[T] = BatchWorker(
            self._write,
            name=name,
            max_queue=max_queue,
            batch_size=batch_size,
            flush_interval_seconds=flush_interval,
            on_dropped=on_dropped,
        )

    # ---------------------------------------------------------------- counters
    @property
    def written(self) -> int:
        """Items written to the store so far."""
        return self._written

    @property
    def dropped(self) -> dict[str, int]:
        """Items dropped so far, by reason (``queue_full``, ``store_error``, ...)."""
        return self._worker.dropped

    @property
    def dropped_total(self) -> int:
        return self._worker.dropped_total

    @property
    def queued(self) -> int:
        """Items waiting in the queue or being written right now."""
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

    def _queue(self, items: Sequence[T], what: str) -> bool:
        """Hand items to the writer; O(len(items)), never blocks, never raises."""
        try:
            accepted = self._worker.put(items)
        except Exception:  # the exporter never raises into the app
            logger.debug("store exporter export failed", exc_info=True)
            return False
        if accepted < len(items):
            reason = SHUTDOWN if self._worker.is_shutdown else QUEUE_FULL
            self._warn(f"store exporter {reason}: {len(items) - accepted} {what} dropped")
            return False
        return True

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Write everything queued so far; False if ``timeout_millis`` passed first."""
        return self._worker.force_flush(timeout_millis / 1000)

    def shutdown(self, timeout_millis: int = 30_000) -> None:
        """Stop accepting items, drain the queue (bounded by ``timeout_millis``), stop the
        writer. The store is the caller's to close."""
        self._worker.shutdown(timeout_millis / 1000)

    # ---------------------------------------------------------------- writer thread
    def _write(self, batch: list[T]) -> None:  # convert, then _stored(); in each subclass
        raise NotImplementedError

    def _stored(self, count: int, write: Callable[[float], None], what: str) -> None:
        try:
            write(self._clock())
        except Exception as exc:
            self._worker.drop(STORE_ERROR, count)
            self._warn(f"store write failed, {count} {what} dropped: {exc}")
            return
        self._written += count
        if self.on_written is not None:
            try:
                self.on_written(count)
            except Exception:  # a telemetry hook must not kill the writer or the app
                logger.debug("store exporter counter hook failed", exc_info=True)


class StoreSpanExporter(_StoreWriter[ReadableSpan], SpanExporter):
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
        super().__init__(
            name="spanjudge-store-exporter",
            max_queue=max_queue_spans,
            batch_size=batch_size,
            flush_interval=flush_interval,
            on_written=on_written,
            on_dropped=on_dropped,
            clock=clock,
        )

    @property
    def max_queue_spans(self) -> int:
        return self._worker.max_queue

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        """Queue spans for the writer; O(len(spans)), never blocks on the store, never raises."""
        if self._queue(spans, "spans"):
            return SpanExportResult.SUCCESS
        return SpanExportResult.FAILURE

    def _write(self, batch: list[ReadableSpan]) -> None:
        records: list[SpanRecord] = []
        invalid = 0
        for span in batch:
            try:
                records.append(span_to_record(span))
            except Exception:
                invalid += 1
        self._worker.drop(INVALID_SPAN, invalid)
        if records:
            self._stored(
                len(records), lambda now: self.store.write_spans(records, now=now), "spans"
            )


def store_span_processor(store: SpanLog, **kwargs: Any) -> SpanProcessor:
    """A span processor that copies every finished span into ``store``.

    A simple processor is enough: the exporter's ``export()`` only queues. Its ``force_flush()``
    waits until the queued spans are in the store (the SDK's own simple processor does not ask
    its exporter). The exporter is reachable as ``processor.span_exporter`` for its counters.

    Example::

        provider.add_span_processor(store_span_processor(open_store(), max_queue_spans=50_000))
    """
    return _StoreSpanProcessor(StoreSpanExporter(store, **kwargs))


class _StoreSpanProcessor(SimpleSpanProcessor):
    def __init__(self, exporter: StoreSpanExporter) -> None:
        super().__init__(exporter)
        self.store_exporter = exporter

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self.store_exporter.force_flush(timeout_millis)


# --- GenAI content log records ------------------------------------------------------------------
_MAX_DEPTH = 64  # as the OTLP decoder: deeper values are not read


def _plain(value: Any, depth: int = 0) -> Any:
    """An SDK attribute or body value as the OTLP decoder reads it from the wire: tuples as
    lists, mappings as dicts, bytes as UTF-8 text (base64 when not UTF-8)."""
    if value is None or isinstance(value, str | bool | int | float):
        return value
    if depth > _MAX_DEPTH:
        raise ValueError("log record value nested too deeply")
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return base64.b64encode(value).decode("ascii")
    if isinstance(value, Mapping):
        return {str(k): _plain(v, depth + 1) for k, v in value.items()}
    if isinstance(value, Sequence):
        return [_plain(v, depth + 1) for v in value]
    return str(value)


def log_to_event(record: ReadableLogRecord, event_name: str) -> LogEvent:
    """A GenAI content log record (trace id set) as the :class:`LogEvent` the receiver would
    decode from its OTLP encoding."""
    log = record.log_record
    attributes = {k: _plain(v) for k, v in (log.attributes or {}).items() if v is not None}
    scope = record.instrumentation_scope
    return LogEvent(
        trace_id=format(log.trace_id or 0, "032x"),
        span_id=format(log.span_id, "016x") if log.span_id else None,
        event_name=event_name,
        time_unix_nano=log.timestamp or log.observed_timestamp or 0,
        attributes=attributes,
        body=_plain(log.body),
        resource=_plain(dict(record.resource.attributes)),
        scope_name=scope.name if scope is not None else None,
    )


class StoreLogExporter(_StoreWriter[tuple[ReadableLogRecord, str]], LogRecordExporter):
    """Writes the app's GenAI content log records to an :class:`EventLog` from a background
    thread, through a bounded queue: the in-process twin of the receiver's ``/v1/logs``.

    Records are filtered as the receiver filters them (an event name starting with
    ``gen_ai.``, never ``gen_ai.evaluation.result``, and a trace id) before they are queued;
    the rest is counted in ``ignored`` by reason, not stored. Options, hooks and counters as
    :class:`StoreSpanExporter` (``invalid_log``: a record the converter could not read).

    Example::

        exporter = StoreLogExporter(store)
        logger_provider.add_log_record_processor(SimpleLogRecordProcessor(exporter))
        ...
        print(exporter.written, exporter.dropped, exporter.ignored)
    """

    def __init__(
        self,
        store: EventLog,
        *,
        max_queue_logs: int = 10_000,
        batch_size: int = 512,
        flush_interval: float = 0.5,
        on_written: Callable[[int], None] | None = None,
        on_dropped: Callable[[str, int], None] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if max_queue_logs < 1 or batch_size < 1:
            raise ValueError("max_queue_logs and batch_size must be positive")
        self.store = store
        self._ignored: Counter[str] = Counter()
        self._ignored_lock = threading.Lock()  # export() runs on any app thread
        super().__init__(
            name="spanjudge-store-log-exporter",
            max_queue=max_queue_logs,
            batch_size=batch_size,
            flush_interval=flush_interval,
            on_written=on_written,
            on_dropped=on_dropped,
            clock=clock,
        )

    @property
    def ignored(self) -> dict[str, int]:
        """Records not kept, by reason (``not_genai``, ``own_result``, ``no_trace_id``)."""
        with self._ignored_lock:
            return dict(self._ignored)

    def export(self, batch: Sequence[ReadableLogRecord]) -> LogRecordExportResult:
        """Queue the GenAI content records; never blocks on the store, never raises."""
        try:
            kept: list[tuple[ReadableLogRecord, str]] = []
            skipped: list[str] = []  # reasons, counted under the lock once per batch
            for record in batch:
                log = record.log_record
                attributes = log.attributes or {}
                name = content_event_name(log.event_name or "", attributes)
                if name is None:
                    skipped.append(ignored_reason(log.event_name or "", attributes))
                elif not log.trace_id:
                    skipped.append(IGNORED_NO_TRACE)
                else:
                    kept.append((record, name))
            if skipped:
                with self._ignored_lock:
                    self._ignored.update(skipped)
        except Exception:  # the exporter never raises into the app
            logger.debug("store log exporter export failed", exc_info=True)
            return LogRecordExportResult.FAILURE
        if kept and not self._queue(kept, "log records"):
            return LogRecordExportResult.FAILURE
        return LogRecordExportResult.SUCCESS

    def _write(self, batch: list[tuple[ReadableLogRecord, str]]) -> None:
        events: list[LogEvent] = []
        invalid = 0
        for record, name in batch:
            try:
                events.append(log_to_event(record, name))
            except Exception:
                invalid += 1
        self._worker.drop(INVALID_LOG, invalid)
        if events:
            self._stored(len(events), lambda now: self.store.write_logs(events, now=now), "logs")


class _StoreLogProcessor(SimpleLogRecordProcessor):
    # The SDK's simple processor's force_flush() skips its exporter: this one waits for the store
    def __init__(self, exporter: StoreLogExporter) -> None:
        super().__init__(exporter)
        self.exporter = exporter

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self.exporter.force_flush(timeout_millis)


def store_log_processor(store: EventLog, **kwargs: Any) -> LogRecordProcessor:
    """A log record processor that copies the GenAI content events among the app's log
    records into ``store`` (``kwargs``: :class:`StoreLogExporter` options).

    A simple (synchronous) processor is enough: the exporter's ``export()`` only filters and
    queues. Its ``force_flush()`` waits for the store; ``processor.exporter`` has the counters.

    Example::

        logger_provider.add_log_record_processor(store_log_processor(open_store()))
    """
    return _StoreLogProcessor(StoreLogExporter(store, **kwargs))
