"""The worker's ingest gate: received spans and content logs into the store, with backpressure."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from spanjudge._store.sql import SpanStore
from spanjudge.errors import StoreError

if TYPE_CHECKING:
    from spanjudge.worker.keep_policy import IngestKeep

logger = logging.getLogger("spanjudge.ingest")


class IngestGate:
    """Writes received spans to the store, refusing new requests while too many are waiting.

    The count is of spans inside ``write`` calls right now: a slow or locked store makes it grow,
    and past ``max_pending_spans`` the receiver answers 503 + Retry-After instead of queueing more.
    ``outbox(spans, now)`` (enrich mode) returns the outbox entries written in the same
    transaction as the spans; ``telemetry`` counts the spans written. ``keep``
    (:class:`~spanjudge.worker.keep_policy.IngestKeep`): only the spans some rule can still pick are
    written, the others dropped or held in the store's hold table for their conversation.
    """

    def __init__(
        self,
        store: SpanStore,
        *,
        max_pending_spans: int,
        clock: Callable[[], float] = time.time,
        outbox: Callable[[Sequence[Any], float], Sequence[Any]] | None = None,
        after_write: Callable[[Sequence[Any]], None] | None = None,
        telemetry: Any = None,
        keep: IngestKeep | None = None,
    ) -> None:
        self.store = store
        self.max_pending_spans = max_pending_spans
        self.clock = clock
        self.outbox = outbox
        self.after_write = after_write
        self.telemetry = telemetry
        self.keep = keep
        self._pending = 0
        self._lock = threading.Lock()
        self.refused = 0
        if keep is not None and not keep.plan.everything:
            try:  # a process starting again counts what the hold table kept
                keep.load(store.held_traces())
            except StoreError as exc:
                logger.warning("could not read the ingest hold (counted from now): %s", exc)

    def backpressure(self) -> float | None:
        with self._lock:
            if self._pending >= self.max_pending_spans:
                self.refused += 1
                return 1.0
        return None

    def shedding(self) -> bool:
        """True while new requests would be refused (``/readyz`` reports not ready)."""
        with self._lock:
            return self._pending >= self.max_pending_spans

    def write(self, records: Sequence[Any]) -> None:
        """Store received spans: the ones to keep now, and, when rules sample by
        conversation, the ones waiting for it in the store's hold table, in one transaction
        before the receiver answers (a 200 means durable)."""
        if self.keep is None or self.keep.plan.everything:
            self._write_spans(records)
            return
        keep = self.keep
        admission = keep.admit(records, self.clock())
        stored_by_store: set[str] = set()

        def store(now: float) -> None:
            if admission.holds:
                admitted = self.store.admit_spans(
                    admission.store,
                    hold=admission.hold,
                    release=admission.release,
                    discard=admission.discard,
                    now=now,
                )
                stored_by_store.update(admitted.stored_by_store)
            elif admission.store:
                self.store.write_spans(admission.store, now=now)

        try:
            self._counted(len(records), store)
        except BaseException:
            keep.give_back(admission)  # nothing of it was written: the client retries
            raise
        keep.confirm(admission, stored_by_store)
        if self.telemetry is not None and admission.store:
            self.telemetry.record_exporter_written(len(admission.store))

    def _write_spans(self, records: Sequence[Any]) -> None:
        def store(now: float) -> None:
            if self.outbox is None:
                self.store.write_spans(records, now=now)
            else:
                self.store.write_spans(records, now=now, outbox=self.outbox(records, now))

        self._counted(len(records), store)
        if self.telemetry is not None:
            self.telemetry.record_exporter_written(len(records))
        if self.after_write is not None:
            self.after_write(records)

    def write_logs(self, events: Sequence[Any]) -> None:
        """Store received GenAI content log events, counted as pending like spans; with an
        ingest decision, only those of traces it keeps (log records follow their trace)."""
        if self.keep is not None:
            events = self.keep.logs_kept(events)
            if not events:
                return
        self._counted(len(events), lambda now: self.store.write_logs(events, now=now))

    def _counted(self, count: int, store: Callable[[float], None]) -> None:
        with self._lock:
            self._pending += count
        try:
            store(self.clock())
        finally:
            with self._lock:
                self._pending -= count
