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
import os
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from spanjudge.exporters.records import SpanEvent, SpanRecord
from spanjudge.exporters.store.base import SpanStore

logger = logging.getLogger("spanjudge.store_exporter")

# Drop reasons (the ``reason`` label of spanjudge.exporter.dropped_spans).
QUEUE_FULL = "queue_full"
STORE_ERROR = "store_error"
INVALID_SPAN = "invalid_span"  # a span the converter could not read
SHUTDOWN = "shutdown"  # exported after shutdown()
DROP_REASONS: tuple[str, ...] = (QUEUE_FULL, STORE_ERROR, INVALID_SPAN, SHUTDOWN)

# Seconds between two warnings about a failing store, so a dead disk does not flood the log.
_WARN_EVERY = 30.0


def _attributes(attributes: Any) -> dict[str, Any]:
    if not attributes:
        return {}
    # The SDK's BoundedAttributes copies itself on every iteration; its inner dict does not.
    # (A read-only view around it is unwrapped the same way; anything else goes the slow way.)
    raw = getattr(attributes, "_dict", None)
    out = dict(raw) if isinstance(raw, dict) else dict(attributes.items())
    for key, value in out.items():
        # The SDK keeps sequence attributes as tuples; records carry lists (JSON's shape).
        if type(value) is tuple:
            out[key] = list(value)
    return out


# Every span of a process shares one Resource: convert it once, not per span.
_resource_cache: dict[int, tuple[Any, dict[str, Any]]] = {}


def _resource(resource: Any) -> dict[str, Any]:
    if resource is None:
        return {}
    hit = _resource_cache.get(id(resource))
    if hit is not None and hit[0] is resource:
        return hit[1]
    converted = _attributes(resource.attributes)
    if len(_resource_cache) > 64:
        _resource_cache.clear()
    _resource_cache[id(resource)] = (resource, converted)
    return converted


def span_to_record(span: ReadableSpan) -> SpanRecord:
    """Convert an SDK span to a :class:`SpanRecord` (lower-case hex ids, nanosecond times).

    Example::

        record = span_to_record(finished_span)
        assert len(record.trace_id) == 32
    """
    # span.attributes wraps the BoundedAttributes in a read-only view that hides its inner dict;
    # the SDK span keeps it as _attributes, read-only after end() (the public API is the fallback).
    ctx = span.context
    if ctx is None:
        raise ValueError("span without a context")
    parent = span.parent
    start = span.start_time or 0
    status = span.status
    scope = span.instrumentation_scope
    return SpanRecord(
        trace_id=format(ctx.trace_id, "032x"),
        span_id=format(ctx.span_id, "016x"),
        name=span.name,
        start_time_unix_nano=start,
        end_time_unix_nano=span.end_time or start,
        parent_span_id=format(parent.span_id, "016x") if parent is not None else None,
        kind=span.kind.name,
        status_code=status.status_code.name,
        status_message=status.description or None,
        attributes=_attributes(getattr(span, "_attributes", None) or span.attributes),
        resource=_resource(span.resource),
        events=[
            SpanEvent(event.name, event.timestamp or 0, _attributes(event.attributes))
            for event in span.events
        ],
        scope_name=scope.name if scope is not None else None,
    )


class StoreSpanExporter(SpanExporter):
    """Writes spans to a :class:`SpanStore` from a background thread, through a bounded queue.

    - ``max_queue_spans``: spans waiting beyond this are dropped (``queue_full``);
    - ``batch_size``: spans per ``write_spans`` call (one transaction);
    - ``flush_interval``: seconds a partial batch may wait before it is written;
    - ``on_written(n)`` / ``on_dropped(reason, n)``: optional hooks, called from the writer
      (or the exporting) thread, for telemetry counters. They must be quick and not raise.

    ``written``, ``dropped`` (by reason) and ``dropped_total`` read the counters.

    Example::

        exporter = StoreSpanExporter(store, max_queue_spans=20_000)
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        ...
        print(exporter.written, exporter.dropped)
    """

    def __init__(
        self,
        store: SpanStore,
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
        self.max_queue_spans = max_queue_spans
        self.batch_size = batch_size
        self.flush_interval = flush_interval
        self.on_written = on_written
        self.on_dropped = on_dropped
        self._clock = clock
        self._queue: deque[ReadableSpan] = deque()
        self._cond = threading.Condition(threading.Lock())
        self._in_flight = 0  # spans taken by the writer, not yet written or dropped
        self._flush_requested = False
        self._shutdown = False
        self._written = 0
        self._dropped: dict[str, int] = {}
        self._last_warning = -_WARN_EVERY
        self._start_writer()
        # A forked child (gunicorn, multiprocessing) has no writer thread: start its own.
        ref = weakref.ref(self)
        os.register_at_fork(after_in_child=lambda: _restart_in_child(ref))

    def _start_writer(self) -> None:
        self._thread = threading.Thread(
            target=self._run, name="spanjudge-store-exporter", daemon=True
        )
        self._thread.start()

    def _after_fork(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._queue.clear()
        self._in_flight = 0
        if not self._shutdown:
            self._start_writer()

    # ---------------------------------------------------------------- counters
    @property
    def written(self) -> int:
        """Spans written to the store so far."""
        return self._written

    @property
    def dropped(self) -> dict[str, int]:
        """Spans dropped so far, by reason (``queue_full``, ``store_error``, ...)."""
        with self._cond:
            return dict(self._dropped)

    @property
    def dropped_total(self) -> int:
        return sum(self.dropped.values())

    @property
    def queued(self) -> int:
        """Spans waiting in the queue or being written right now."""
        with self._cond:
            return len(self._queue) + self._in_flight

    def _count_dropped(self, reason: str, n: int) -> None:
        # caller holds self._cond
        self._dropped[reason] = self._dropped.get(reason, 0) + n

    def _notify(self, written: int, dropped: dict[str, int]) -> None:
        try:
            if written and self.on_written is not None:
                self.on_written(written)
            if self.on_dropped is not None:
                for reason, n in dropped.items():
                    self.on_dropped(reason, n)
        except Exception:  # a telemetry hook must not kill the writer or the app
            logger.debug("store exporter counter hook failed", exc_info=True)

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
            with self._cond:
                if self._shutdown:
                    self._count_dropped(SHUTDOWN, len(spans))
                    dropped = len(spans)
                    reason = SHUTDOWN
                else:
                    room = self.max_queue_spans - len(self._queue) - self._in_flight
                    accepted = spans if len(spans) <= room else spans[: max(room, 0)]
                    self._queue.extend(accepted)
                    dropped = len(spans) - len(accepted)
                    reason = QUEUE_FULL
                    if dropped:
                        self._count_dropped(QUEUE_FULL, dropped)
                    if len(self._queue) >= self.batch_size:
                        self._cond.notify()
            if dropped:
                self._notify(0, {reason: dropped})
                self._warn(f"store exporter {reason}: {dropped} spans dropped")
                return SpanExportResult.FAILURE
            return SpanExportResult.SUCCESS
        except Exception:  # the exporter never raises into the app
            logger.debug("store exporter export failed", exc_info=True)
            return SpanExportResult.FAILURE

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Write everything queued so far; False if ``timeout_millis`` passed first."""
        deadline = time.monotonic() + timeout_millis / 1000
        with self._cond:
            self._flush_requested = True
            self._cond.notify_all()
            while self._queue or self._in_flight:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not self._thread.is_alive():
                    return False
                self._cond.wait(min(remaining, 0.05))
            return True

    def shutdown(self, timeout_millis: int = 30_000) -> None:
        """Stop accepting spans, drain the queue (bounded by ``timeout_millis``), stop the
        writer. The store is the caller's to close."""
        start = time.monotonic()
        self.force_flush(timeout_millis)
        with self._cond:
            self._shutdown = True
            leftover = len(self._queue)
            self._queue.clear()
            if leftover:
                self._count_dropped(SHUTDOWN, leftover)
            self._cond.notify_all()
        if leftover:
            self._notify(0, {SHUTDOWN: leftover})
        remaining = max(0.0, timeout_millis / 1000 - (time.monotonic() - start))
        self._thread.join(remaining)

    # ---------------------------------------------------------------- writer thread
    def _take_batch(self) -> list[ReadableSpan] | None:
        with self._cond:
            deadline = time.monotonic() + self.flush_interval
            while not self._shutdown:
                if len(self._queue) >= self.batch_size or (self._queue and self._flush_requested):
                    break
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    if self._queue:
                        break
                    deadline = time.monotonic() + self.flush_interval
                    remaining = self.flush_interval
                self._cond.wait(remaining)
            if not self._queue:
                self._flush_requested = False
                return None  # shutting down with nothing left
            n = min(self.batch_size, len(self._queue))
            batch = [self._queue.popleft() for _ in range(n)]
            if not self._queue:
                self._flush_requested = False
            self._in_flight = n
            return batch

    def _run(self) -> None:
        while True:
            batch = self._take_batch()
            if batch is None:
                return
            written, dropped = self._write(batch)
            with self._cond:
                self._in_flight = 0
                self._written += written
                for reason, n in dropped.items():
                    self._count_dropped(reason, n)
                self._cond.notify_all()
            self._notify(written, dropped)

    def _write(self, batch: list[ReadableSpan]) -> tuple[int, dict[str, int]]:
        dropped: dict[str, int] = {}
        records: list[SpanRecord] = []
        for span in batch:
            try:
                records.append(span_to_record(span))
            except Exception:
                dropped[INVALID_SPAN] = dropped.get(INVALID_SPAN, 0) + 1
        if not records:
            return 0, dropped
        try:
            self.store.write_spans(records, now=self._clock())
        except Exception as exc:
            dropped[STORE_ERROR] = dropped.get(STORE_ERROR, 0) + len(records)
            self._warn(f"span store write failed, {len(records)} spans dropped: {exc}")
            return 0, dropped
        return len(records), dropped


def _restart_in_child(ref: weakref.ref[StoreSpanExporter]) -> None:
    exporter = ref()
    if exporter is not None:
        exporter._after_fork()


def store_span_processor(store: SpanStore, **kwargs: Any) -> SpanProcessor:
    """A span processor that copies every finished span into ``store``.

    A :class:`SimpleSpanProcessor` is enough: the exporter's ``export()`` only queues. The
    exporter is reachable as ``processor.span_exporter`` for its counters.

    Example::

        provider.add_span_processor(store_span_processor(open_store(), max_queue_spans=50_000))
    """
    return SimpleSpanProcessor(StoreSpanExporter(store, **kwargs))
