"""Outbox payloads: packed with Zstandard, read back whatever wrote them (zlib before), damaged
bytes refused with a clear error, and one packer per thread (ingest threads write at once). On
both stores: a new write stores a Zstandard frame, and a shared entry an earlier version wrote
with zlib (held spans pointing into it) is still forwarded whole."""

from __future__ import annotations

import threading
import zlib

import pytest

from spanjudge._store.packing import ZSTD_MAGIC, pack, unpack
from spanjudge._store.sql import SpanStore
from tests.exporters.store.test_outbox import HOLD
from tests.exporters.store.test_outbox_bytes import (
    ENVELOPE,
    claim,
    forwarded_spans,
    wire_span,
    with_bytes,
)
from tests.exporters.store.test_store import T0, sid, span

BODY = b"resource and scope bytes, then spans " * 200


def test_pack_writes_a_zstandard_frame_that_unpacks_to_the_body() -> None:
    packed = pack(BODY)
    assert packed[:4] == ZSTD_MAGIC and len(packed) < len(BODY) // 10
    assert unpack(packed) == BODY
    assert unpack(pack(b"")) == b""


def test_unpack_reads_what_earlier_versions_wrote_with_zlib() -> None:
    assert unpack(zlib.compress(BODY, 1)) == BODY
    assert unpack(zlib.compress(BODY, 9)) == BODY


@pytest.mark.parametrize(
    "damaged",
    [
        b"",
        b"not compressed at all",
        pack(BODY)[:-8],  # a frame cut short
        ZSTD_MAGIC + b"\x00" * 12,
        zlib.compress(BODY, 1)[:20],
    ],
)
def test_damaged_payloads_raise_value_error(damaged: bytes) -> None:
    with pytest.raises(ValueError, match="payload"):
        unpack(damaged)


def test_threads_pack_and_unpack_at_once() -> None:
    bodies = [bytes([n]) * 5000 + BODY for n in range(8)]
    wrong: list[int] = []

    def run(n: int) -> None:
        for _ in range(200):
            if unpack(pack(bodies[n])) != bodies[n]:
                wrong.append(n)

    threads = [threading.Thread(target=run, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert wrong == []


def _shared_payload(store: SpanStore) -> tuple[int, bytes]:
    with store.transaction() as cur:  # type: ignore[attr-defined]
        cur.execute("SELECT entry_id, payload FROM outbox WHERE span_id LIKE 'batch:%'")
        [(entry_id, payload)] = cur.fetchall()
    return int(entry_id), bytes(payload)


def test_a_write_stores_zstandard_and_a_zlib_entry_of_before_still_forwards(
    store: SpanStore,
) -> None:
    spans = [span(1, 1), span(1, 2, parent=1), span(1, 3, parent=1)]
    store.write_spans(spans, now=T0, outbox=with_bytes(spans, held={sid(2)}))
    entry_id, payload = _shared_payload(store)
    assert payload[:4] == ZSTD_MAGIC
    # as the version before wrote it: the same bytes, zlib at level 1
    with store.transaction() as cur:  # type: ignore[attr-defined]
        cur.execute(
            store.q("UPDATE outbox SET payload = ? WHERE entry_id = ?"),  # type: ignore[attr-defined]
            (zlib.compress(unpack(payload), 1), entry_id),
        )
    assert _shared_payload(store)[1][:1] == b"\x78"
    [batch] = claim(store, T0)
    assert [s.span_id.hex() for s in forwarded_spans([batch])] == [sid(1), sid(3)]
    store.mark_forwarded([batch.entry_id], now=T0)
    [held] = claim(store, T0 + HOLD)
    assert (held.payload, held.envelope) == (wire_span(spans[1]), ENVELOPE)
