"""The span store's contract: the store itself and the two protocols something else implements.

A store keeps spans (with their arrival time), evaluation jobs (one row per (rule, target)
pair, ever) and their results. Every time is Unix seconds passed in by the caller, so tests and
replays drive the clock. Backend failures surface as :class:`StoreError` from the call that hit
them; the next call reconnects, so a caller that catches and retries recovers when the database
is back.

- :class:`SpanStore`: the store, what ``open_store()`` returns (one class over SQL, with a
  SQLite and a PostgreSQL backend: :mod:`spanjudge._store.sql`). Its methods are documented
  there. Code that reads or plans from the store takes a ``SpanStore``.
- :class:`SpanLog`: where finished spans go. The store exporter and the receiver's ingest gate
  only write spans, and applications and tests hand them their own sinks (a queue, a store
  that blocks on purpose): the one protocol users implement.
- :class:`Outbox`: enrich mode's forwarding queue, the part of the store the forwarder uses
  (tests drive the forwarder with a double of it).

Example::

    store = open_store("sqlite:///./spanjudge.db")
    store.write_spans(records, now=time.time())
    for trace_id in store.settled_traces(settle_seconds=10, now=time.time()):
        spans = store.trace_spans(trace_id)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from spanjudge._core.span_record import SpanRecord
from spanjudge._store.models import OutboxClaim, OutboxEntry

__all__ = ["Outbox", "SpanLog"]


@runtime_checkable
class SpanLog(Protocol):
    """Where finished spans are written, with their arrival time.

    Example::

        class Collected:
            def __init__(self) -> None:
                self.spans: list[SpanRecord] = []

            def write_spans(self, spans, *, now=None, outbox=()) -> None:
                self.spans.extend(spans)

        provider.add_span_processor(store_span_processor(Collected()))
    """

    def write_spans(
        self,
        spans: Sequence[SpanRecord],
        *,
        now: float | None = None,
        outbox: Sequence[OutboxEntry] = (),
    ) -> None:
        """Store finished spans; ``now`` is their arrival time (default: the wall clock).
        A span already stored (same trace id and span id) is kept as first written.
        ``outbox`` (enrich mode) entries are written in the same transaction, each once ever:
        a span delivered twice is forwarded once."""
        ...


@runtime_checkable
class Outbox(Protocol):
    """Enrich mode: received spans waiting to be forwarded, held ones with their scores.

    Example::

        outbox.release_held(now=t)
        claim = outbox.claim_outbox(owner=token, limit=512, lease_seconds=30, now=t)
        outbox.mark_forwarded([item.entry_id for item in claim.items], now=t)
    """

    def release_held(self, *, now: float) -> int:
        """Make held outbox entries due now once their evaluations are over: the trace was
        planned and no span-level job of that span is pending or leased. Returns how many."""
        ...

    def claim_outbox(
        self, *, owner: str, limit: int, lease_seconds: float, now: float
    ) -> OutboxClaim:
        """Lease up to ``limit`` due, unforwarded entries (oldest due first) to ``owner``, a
        token unique to this claim, with their spans and, for held ones, their span-level
        results. Two concurrent claimers never get the same entry."""
        ...

    def mark_forwarded(self, entry_ids: Sequence[int], *, now: float) -> None:
        """The backend took these entries' spans: they are never sent again."""
        ...

    def retry_outbox(self, entry_ids: Sequence[int], *, retry_at: float) -> None:
        """Forwarding failed: give the entries back, due again at ``retry_at``."""
        ...

    def outbox_waiting(self, trace_id: str, span_id: str, *, now: float) -> bool:
        """True while the span has an entry that is neither forwarded nor being forwarded: a
        result stored now will still ride on it."""
        ...
