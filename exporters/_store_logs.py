"""An OpenTelemetry log record exporter that copies the app's GenAI content events into a store:
the in-process twin of the receiver's ``/v1/logs``.

Only GenAI content events are kept (what an instrumentation in an event content mode emits),
filtered before they are queued, so the app's other logs cost a dictionary lookup each. Queue,
counters and guarantees are the span exporter's (:class:`~spanjudge.exporters._store_spans.
StoreWriter`): never blocks, never raises, bounded, drops counted.

Example::

    from opentelemetry.sdk._logs import LoggerProvider
    from spanjudge._store import open_store
    from spanjudge.exporters._store_logs import store_log_processor

    LoggerProvider().add_log_record_processor(store_log_processor(open_store()))
"""

from __future__ import annotations

import base64
import logging
import threading
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from opentelemetry.sdk._logs import LogRecordProcessor, ReadableLogRecord
from opentelemetry.sdk._logs.export import (
    LogRecordExporter,
    LogRecordExportResult,
    SimpleLogRecordProcessor,
)

from spanjudge._core.span_record import LogEvent
from spanjudge._receive.logs import (
    IGNORED_NO_TRACE,
    content_event_name,
    ignored_reason,
)
from spanjudge._store.sql import SpanStore
from spanjudge.errors import ConfigError
from spanjudge.exporters._store_spans import INVALID_LOG, StoreWriter, WriterOptions

if TYPE_CHECKING:
    from typing_extensions import Unpack

logger = logging.getLogger("spanjudge.store_exporter")

_MAX_DEPTH = 64  # as the OTLP decoder: deeper values are not read


def _plain(value: Any, depth: int = 0) -> Any:
    """An SDK attribute or body value as the OTLP decoder reads it from the wire: tuples as
    lists, mappings as dicts, bytes as UTF-8 text (base64 when not UTF-8)."""
    if value is None or isinstance(value, str | bool | int | float):
        return value
    if depth > _MAX_DEPTH:
        raise ConfigError("log record value nested too deeply")
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


class StoreLogExporter(StoreWriter[tuple[ReadableLogRecord, str], LogEvent], LogRecordExporter):
    """Writes the app's GenAI content log records to a :class:`SpanStore` from a background
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
        self, store: SpanStore, *, max_queue_logs: int = 10_000, **options: Unpack[WriterOptions]
    ) -> None:
        self.store = store
        self._ignored: Counter[str] = Counter()
        self._ignored_lock = threading.Lock()  # export() runs on any app thread
        super().__init__(
            name="spanjudge-store-log-exporter",
            max_queue=max_queue_logs,
            queue_option="max_queue_logs",
            **options,
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

    _invalid_reason = INVALID_LOG
    _what = "logs"

    def _convert(self, item: tuple[ReadableLogRecord, str]) -> LogEvent:
        return log_to_event(*item)

    def _write_rows(self, rows: list[LogEvent], now: float) -> None:
        self.store.write_logs(rows, now=now)


class _StoreLogProcessor(SimpleLogRecordProcessor):
    # The SDK's simple processor's force_flush() skips its exporter: this one waits for the store
    def __init__(self, exporter: StoreLogExporter) -> None:
        super().__init__(exporter)
        self.exporter = exporter

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self.exporter.force_flush(timeout_millis)


def store_log_processor(store: SpanStore, **kwargs: Any) -> LogRecordProcessor:
    """A log record processor that copies the GenAI content events among the app's log
    records into ``store`` (``kwargs``: :class:`StoreLogExporter` options).

    A simple (synchronous) processor is enough: the exporter's ``export()`` only filters and
    queues. Its ``force_flush()`` waits for the store; ``processor.exporter`` has the counters.

    Example::

        logger_provider.add_log_record_processor(store_log_processor(open_store()))
    """
    return _StoreLogProcessor(StoreLogExporter(store, **kwargs))
