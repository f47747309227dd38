"""One concurrency limit for a judge, shared by threads and by any number of event loops."""

from __future__ import annotations

import asyncio
import threading
from collections import deque


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:  # released from a thread with no loop
        return None


class Slots:
    """A counting semaphore shared by threads and by any number of event loops.

    ``asyncio.Semaphore`` is bound to one loop, and ``measure()`` runs loops on worker threads;
    waiting for a ``threading.Semaphore`` in an executor thread would fill the executor the HTTP
    client needs (a deadlock). So a released slot is handed straight to the oldest waiter: a
    thread is woken, a coroutine's future is resolved on its own loop. A waiter cancelled while
    the slot is in transit gives it back.
    """

    def __init__(self, size: int) -> None:
        self._lock = threading.Lock()
        self._free = size
        self._waiters: deque[
            threading.Event | tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]
        ] = deque()

    def acquire(self) -> None:
        with self._lock:
            if self._free > 0:
                self._free -= 1
                return
            event = threading.Event()
            self._waiters.append(event)
        event.wait()  # the releaser handed us its slot

    async def a_acquire(self) -> None:
        loop = asyncio.get_running_loop()
        with self._lock:
            if self._free > 0:
                self._free -= 1
                return
            future: asyncio.Future[None] = loop.create_future()
            entry = (loop, future)
            self._waiters.append(entry)
        try:
            await future
        except asyncio.CancelledError:
            with self._lock:
                try:
                    self._waiters.remove(entry)
                    handed = False
                except ValueError:
                    handed = True  # in transit: _hand_over sees the cancellation, releases
            if handed and future.done() and not future.cancelled():
                self.release()
            raise

    def release(self) -> None:
        with self._lock:
            if not self._waiters:
                self._free += 1
                return
            waiter = self._waiters.popleft()
        if isinstance(waiter, threading.Event):
            waiter.set()
            return
        loop, future = waiter
        if _running_loop() is loop:
            # released on the waiter's own loop (the usual case): handed over at once, with no
            # wake-up write to the loop's self-pipe (call_soon_threadsafe pays one per call) and
            # no loop iteration with the slot in transit
            self._hand_over(future)
            return
        try:
            loop.call_soon_threadsafe(self._hand_over, future)
        except RuntimeError:  # that loop is closed: pass the slot on
            self.release()

    def _hand_over(self, future: asyncio.Future[None]) -> None:
        if future.cancelled():
            self.release()
        else:
            future.set_result(None)

    def __enter__(self) -> Slots:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
