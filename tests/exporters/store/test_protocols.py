"""Each concrete store satisfies every narrow protocol, and the protocols are narrow.

The typed assignments are checked by mypy; the ``isinstance`` checks (the protocols are
runtime-checkable) fail when a store loses or never had a method a consumer relies on.
"""

from __future__ import annotations

from collections.abc import Sequence

from spanjudge._store.base import (
    EventLog,
    FeedbackLog,
    JobQueue,
    Outbox,
    ResultStore,
    SpanLog,
    SpanStore,
    StoreAdmin,
)
from spanjudge._store.models import OutboxClaim
from spanjudge._store.postgres import PostgresStore
from spanjudge._store.sqlite import SQLiteStore

PROTOCOLS = (SpanLog, EventLog, JobQueue, ResultStore, Outbox, FeedbackLog, StoreAdmin, SpanStore)


def as_every_part(
    store: SQLiteStore | PostgresStore,
) -> tuple[SpanLog, EventLog, JobQueue, ResultStore, Outbox, StoreAdmin, SpanStore]:
    # mypy checks each concrete class against each protocol here
    return store, store, store, store, store, store, store


def test_each_backend_satisfies_every_protocol(store: SpanStore) -> None:
    assert isinstance(store, SQLiteStore | PostgresStore)
    for part in as_every_part(store):
        assert part is store
    missing = [p.__name__ for p in PROTOCOLS if not isinstance(store, p)]
    assert missing == []


def test_open_store_returns_a_whole_store() -> None:
    from spanjudge._store import open_store

    with open_store(":memory:") as store:
        assert all(isinstance(store, p) for p in PROTOCOLS)


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


def test_a_consumer_double_implements_only_the_protocol_it_needs() -> None:
    double = ForwarderOnly()
    outbox: Outbox = double  # mypy: enough for a consumer typed with Outbox
    assert isinstance(outbox, Outbox)
    assert not isinstance(double, SpanStore)
    assert not any(isinstance(double, p) for p in (SpanLog, JobQueue, ResultStore, StoreAdmin))


def test_the_protocols_split_the_store_without_overlap() -> None:
    def members(protocol: type) -> set[str]:
        return {name for name in vars(protocol) if not name.startswith("_")}

    parts = [members(p) for p in PROTOCOLS[:-1]]
    everything = set().union(*parts)
    assert sum(len(part) for part in parts) == len(everything)  # no method in two protocols
    public = {
        n for n in dir(SQLiteStore) if not n.startswith("_") and callable(getattr(SQLiteStore, n))
    }
    # every store method a consumer may call belongs to one protocol; the rest is backend
    # plumbing (connections, migrations, SQL helpers)
    assert everything <= public
    assert {"write_spans", "claim_jobs", "results", "claim_outbox", "stats"} <= everything
