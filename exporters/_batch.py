"""One bounded queue with one writer thread: the mechanism behind every background exporter.

The store exporter (spans into the store) and the score emitter (evaluation spans and events to
the backend) both take items on the caller's thread, which must never block or fail, and hand
them in batches to slow I/O on a thread of their own. :class:`BatchWorker` is that, written once,
as the OpenTelemetry SDK shares one batch processor between its spans and its logs:

* ``put()`` appends what fits under ``max_queue`` and drops the rest, counted as ``queue_full``;
  it never blocks and never raises;
* the writer calls ``handle(batch)`` with up to ``batch_size`` items, as soon as a full batch is
  there, a flush is asked for, or ``flush_interval_seconds`` passed;
* ``force_flush(timeout_seconds)`` waits until every queued item was handled, ``shutdown()``
  flushes (bounded), then drops and counts what is left (``shutdown``);
* a forked child (gunicorn, multiprocessing) gets an empty queue and a writer of its own.

Every time is in seconds. ``handle`` reports its own failures through :meth:`BatchWorker.drop`.

Example::

    worker = BatchWorker(lambda batch: print(len(batch)), name="printer", max_queue=1000)
    worker.put(["a", "b"])
    assert worker.force_flush(5)
    worker.shutdown()
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

from spanjudge._core.metric_names import QUEUE_FULL, SHUTDOWN
from spanjudge.errors import ConfigError

logger = logging.getLogger("spanjudge.batch")

T = TypeVar("T")

HANDLER_FAILED = "handler_failed"  # handle() raised: a bug, but its batch is still counted


class BatchWorker(Generic[T]):
    """A bounded queue drained in batches by a daemon thread; see the module docstring.

    ``on_dropped(reason, n)`` is called (outside the lock) for every drop, whoever counted it;
    it must be quick, and an exception from it is logged, never raised.
    """

    def __init__(
        self,
        handle: Callable[[list[T]], None],
        *,
        name: str,
        max_queue: int,
        batch_size: int = 512,
        flush_interval_seconds: float = 0.5,
        on_dropped: Callable[[str, int], None] | None = None,
    ) -> None:
        if max_queue < 1 or batch_size < 1:
            raise ConfigError("max_queue and batch_size must be positive")
        if flush_interval_seconds <= 0:
            raise ConfigError("flush_interval_seconds must be positive")
        self._handle = handle
        self.name = name
        self.max_queue = max_queue
        self.batch_size = batch_size
        self.flush_interval_seconds = flush_interval_seconds
        self.on_dropped = on_dropped
        self._queue: deque[T] = deque()
        self._cond = threading.Condition(threading.Lock())
        self._in_flight = 0  # items taken by the writer, not handled yet
        self._flush_requested = False
        self._shutdown = False
        self._dropped: dict[str, int] = {}
        self._start_writer()
        ref = weakref.ref(self)
        os.register_at_fork(after_in_child=lambda: _restart_in_child(ref))

    # ---------------------------------------------------------------- counters
    @property
    def dropped(self) -> dict[str, int]:
        """Items dropped so far, by reason (a copy)."""
        with self._cond:
            return dict(self._dropped)

    @property
    def dropped_total(self) -> int:
        return sum(self.dropped.values())

    @property
    def queued(self) -> int:
        """Items waiting or being handled right now."""
        with self._cond:
            return len(self._queue) + self._in_flight

    @property
    def is_shutdown(self) -> bool:
        return self._shutdown

    def drop(self, reason: str, count: int = 1) -> None:
        """Count ``count`` items dropped for ``reason`` (``handle`` calls this on failures)."""
        if count <= 0:
            return
        with self._cond:
            self._dropped[reason] = self._dropped.get(reason, 0) + count
        self._notify_dropped(reason, count)

    def _notify_dropped(self, reason: str, count: int) -> None:
        if self.on_dropped is None:
            return
        try:
            self.on_dropped(reason, count)
        except Exception:  # a counter hook must never break the caller or the writer
            logger.debug("%s: drop hook failed", self.name, exc_info=True)

    # ---------------------------------------------------------------- producer side
    def put(self, items: Sequence[T]) -> int:
        """Queue what fits; returns how many were accepted (the rest is counted dropped)."""
        if not items:
            return 0
        with self._cond:
            if self._shutdown:
                accepted, reason = 0, SHUTDOWN
            else:
                room = self.max_queue - len(self._queue) - self._in_flight
                accepted, reason = max(0, min(room, len(items))), QUEUE_FULL
                self._queue.extend(items[:accepted])
                if len(self._queue) >= self.batch_size:
                    self._cond.notify_all()
            dropped = len(items) - accepted
            if dropped:
                self._dropped[reason] = self._dropped.get(reason, 0) + dropped
        if dropped:
            self._notify_dropped(reason, dropped)
        return accepted

    def force_flush(self, timeout_seconds: float = 10.0) -> bool:
        """Wait until everything queued so far was handled; False if the time ran out first."""
        deadline = time.monotonic() + timeout_seconds
        with self._cond:
            self._flush_requested = True
            self._cond.notify_all()
            while self._queue or self._in_flight:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not self._thread.is_alive():
                    return False
                self._cond.wait(min(remaining, 0.05))
        return True

    def shutdown(self, timeout_seconds: float = 10.0) -> int:
        """Flush (bounded by ``timeout_seconds``), stop accepting, drop what is left, stop the
        writer. Returns how many items were dropped as ``shutdown``."""
        start = time.monotonic()
        self.force_flush(timeout_seconds)
        with self._cond:
            self._shutdown = True
            leftover = len(self._queue)
            self._queue.clear()
            if leftover:
                self._dropped[SHUTDOWN] = self._dropped.get(SHUTDOWN, 0) + leftover
            self._cond.notify_all()
        if leftover:
            self._notify_dropped(SHUTDOWN, leftover)
        self._thread.join(max(0.0, timeout_seconds - (time.monotonic() - start)))
        return leftover

    # ---------------------------------------------------------------- writer thread
    def _start_writer(self) -> None:
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def _after_fork(self) -> None:
        # the parent's writer thread does not exist in the child, and its lock may be held
        self._cond = threading.Condition(threading.Lock())
        self._queue.clear()
        self._in_flight = 0
        if not self._shutdown:
            self._start_writer()

    def _take_batch(self) -> list[T] | None:
        with self._cond:
            deadline = time.monotonic() + self.flush_interval_seconds
            while not self._shutdown:
                if len(self._queue) >= self.batch_size or (self._queue and self._flush_requested):
                    break
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    if self._queue:
                        break
                    deadline = time.monotonic() + self.flush_interval_seconds
                    remaining = self.flush_interval_seconds
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
            try:
                self._handle(batch)
            except Exception:  # handle() counts its own failures; this is a bug, keep running
                logger.warning("%s: batch handler raised", self.name, exc_info=True)
                self.drop(HANDLER_FAILED, len(batch))
            with self._cond:
                self._in_flight = 0
                self._cond.notify_all()


def _restart_in_child(ref: weakref.ref[BatchWorker[Any]]) -> None:
    worker = ref()
    if worker is not None:
        worker._after_fork()
