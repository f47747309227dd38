"""The store is one class; a protocol stands only where something else implements it.

``SpanLog`` (where spans are written: the store exporter's and the ingest gate's sink, which
applications and tests implement) and ``Outbox`` (the forwarder's queue, driven by a double in
tests) are protocols; everything else takes the concrete :class:`SpanStore`.
"""

from __future__ import annotations

from collections.abc import Sequence

import spanjudge
from spanjudge._core.span_record import SpanRecord
from spanjudge._store import base
from spanjudge._store.base import Outbox, SpanLog
from spanjudge._store.models import OutboxClaim, OutboxEntry
from spanjudge._store.postgres import PostgresStore
from spanjudge._store.sql import SpanStore
from spanjudge._store.sqlite import SQLiteStore


def test_both_backends_are_the_one_store_class(store: SpanStore) -> None:
    assert isinstance(store, SQLiteStore | PostgresStore)
    assert isinstance(store, SpanStore)
    log: SpanLog = store  # mypy: the store is a span log and an outbox
    outbox: Outbox = store
    assert isinstance(log, SpanLog) and isinstance(outbox, Outbox)


def test_open_store_returns_the_store_and_the_public_names_are_the_same() -> None:
    from spanjudge._store import open_store

    with open_store(":memory:") as store:
        assert isinstance(store, SpanStore)
    assert spanjudge.SpanStore is SpanStore
    assert spanjudge.SpanLog is SpanLog


def test_only_the_implemented_protocols_are_left() -> None:
    protocols = {
        name
        for name, value in vars(base).items()
        if isinstance(value, type)
        and getattr(value, "_is_protocol", False)
        and value.__module__ == base.__name__
    }
    assert protocols == {"SpanLog", "Outbox"}


class ListLog:
    """A span sink of the application's own: a list."""

    def __init__(self) -> None:
        self.spans: list[SpanRecord] = []

    def write_spans(
        self,
        spans: Sequence[SpanRecord],
        *,
        now: float | None = None,
        outbox: Sequence[OutboxEntry] = (),
    ) -> None:
        self.spans.extend(spans)


class ForwarderOnly:
    """What an enrich-mode forwarder needs, and nothing else."""

    def release_held(self, *, now: float) -> int:
        return 0

    def claim_outbox(
        self, *, owner: str, limit: int, lease_seconds: float, now: float
    ) -> OutboxClaim:
        return OutboxClaim([], [])

    def mark_forwarded(self, entry_ids: Sequence[int], *, now: float) -> None:
        return None

    def retry_outbox(self, entry_ids: Sequence[int], *, retry_at: float) -> None:
        return None

    def outbox_waiting(self, trace_id: str, span_id: str, *, now: float) -> bool:
        return False


def test_doubles_implement_only_the_protocol_they_stand_in_for() -> None:
    log: SpanLog = ListLog()
    outbox: Outbox = ForwarderOnly()
    assert isinstance(log, SpanLog) and not isinstance(log, Outbox)
    assert isinstance(outbox, Outbox) and not isinstance(outbox, SpanLog)
    assert not isinstance(log, SpanStore) and not isinstance(outbox, SpanStore)
