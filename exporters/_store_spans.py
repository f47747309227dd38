"""An OpenTelemetry span exporter that copies finished spans into a store, and the writer it
shares with the log exporter (:mod:`spanjudge.exporters._store_logs`).

They run beside the OTLP exporters and must never hurt the app: ``export()`` only appends to a
bounded queue and returns; a daemon thread writes batches to the store. When the queue is full
or the store fails, items are dropped and counted by reason, never retried into unbounded memory
and never raised into the app.

Example::

    from opentelemetry.sdk.trace import TracerProvider
    from spanjudge._store import open_store
    from spanjudge.exporters._store_spans import store_span_processor

    TracerProvider().add_span_processor(store_span_processor(open_store()))
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Generic, TypedDict, TypeVar

from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from spanjudge._core import metric_names as names
from spanjudge._core.span_record import SpanRecord
from spanjudge._receive.limits import unstorable_span
from spanjudge._store.base import SpanLog
from spanjudge.errors import ConfigError
from spanjudge.exporters._batch import BatchWorker
from spanjudge.exporters._convert import span_to_record

if TYPE_CHECKING:
    from typing_extensions import Unpack

logger = logging.getLogger("spanjudge.store_exporter")

# Drop reasons (the ``reason`` label of spanjudge.exporter.dropped_spans).
QUEUE_FULL = names.QUEUE_FULL
SHUTDOWN = names.SHUTDOWN
STORE_ERROR = names.STORE_ERROR
INVALID_SPAN = names.INVALID_SPAN
INVALID_LOG = names.INVALID_LOG
DROP_REASONS: tuple[str, ...] = names.EXPORTER_DROP_REASONS

# Seconds between two warnings about a failing store, so a dead disk does not flood the log.
_WARN_EVERY = 30.0


T = TypeVar("T")  # what the app hands over
R = TypeVar("R")  # what the store takes


class WriterOptions(TypedDict, total=False):
    """The options both store exporters take beside their queue bound (see
    :class:`StoreSpanExporter`)."""

    batch_size: int
    flush_interval: float
    on_written: Callable[[int], None] | None
    on_dropped: Callable[[str, int], None] | None
    clock: Callable[[], float]


class StoreWriter(Generic[T, R]):
    """What both store exporters share: the batch worker, the counters, rate-limited warnings
    and the guarded hand-off from the app's thread. A subclass names its queue option
    (``queue_option``: ``max_queue_spans``, ``max_queue_logs``) and its writer thread."""

    def __init__(
        self,
        *,
        name: str,
        max_queue: int,
        queue_option: str,
        batch_size: int = 512,
        flush_interval: float = 0.5,
        on_written: Callable[[int], None] | None = None,
        on_dropped: Callable[[str, int], None] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if max_queue < 1 or batch_size < 1:
            raise ConfigError(f"{queue_option} and batch_size must be positive")
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
    # what each exporter says: how one queued item becomes a stored row (raising on an item
    # that cannot), the drop reason for those, how a batch of rows is written, and their name
    _invalid_reason: str
    _what: str

    def _convert(self, item: T) -> R:
        raise NotImplementedError

    def _write_rows(self, rows: list[R], now: float) -> None:
        raise NotImplementedError

    def _write(self, batch: list[T]) -> None:
        rows: list[R] = []
        invalid = 0
        for item in batch:
            try:
                rows.append(self._convert(item))
            except Exception:  # one bad item costs itself, never its batch
                invalid += 1
        self._worker.drop(self._invalid_reason, invalid)
        if rows:
            self._stored(len(rows), lambda now: self._write_rows(rows, now), self._what)

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


class StoreSpanExporter(StoreWriter[ReadableSpan, SpanRecord], SpanExporter):
    """Writes spans to a :class:`SpanStore` from a background thread, through a bounded queue.

    - ``max_queue_spans``: spans waiting beyond this are dropped (``queue_full``);
    - ``batch_size``: spans per ``write_spans`` call (one transaction);
    - ``flush_interval``: seconds a partial batch may wait before it is written;
    - ``on_written(n)`` / ``on_dropped(reason, n)``: optional hooks, called from the writer
      (or the exporting) thread, for telemetry counters. They must be quick and not raise.

    ``written``, ``dropped`` (by reason) and ``dropped_total`` read the counters. The queue and
    its writer thread are a :class:`~spanjudge.exporters._batch.BatchWorker`.

    Example::

        exporter = StoreSpanExporter(store, max_queue_spans=20_000)
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        ...
        print(exporter.written, exporter.dropped)
    """

    def __init__(
        self, store: SpanLog, *, max_queue_spans: int = 10_000, **options: Unpack[WriterOptions]
    ) -> None:
        self.store = store
        super().__init__(
            name="spanjudge-store-exporter",
            max_queue=max_queue_spans,
            queue_option="max_queue_spans",
            **options,
        )

    @property
    def max_queue_spans(self) -> int:
        return self._worker.max_queue

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        """Queue spans for the writer; O(len(spans)), never blocks on the store, never raises."""
        if self._queue(spans, "spans"):
            return SpanExportResult.SUCCESS
        return SpanExportResult.FAILURE

    _invalid_reason = INVALID_SPAN
    _what = "spans"

    def _convert(self, item: ReadableSpan) -> SpanRecord:
        record = span_to_record(item)
        problem = unstorable_span(record)  # dropped alone (invalid_span), not its batch
        if problem is not None:
            raise ValueError(problem)
        return record

    def _write_rows(self, rows: list[SpanRecord], now: float) -> None:
        self.store.write_spans(rows, now=now)


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
