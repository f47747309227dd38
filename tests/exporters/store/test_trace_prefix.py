"""Trace ids by prefix, as people copy them shortened: a range on the traces table's key, on
SQLite and PostgreSQL alike."""

from __future__ import annotations

import pytest

from spanjudge._core.span_record import SpanRecord
from spanjudge._store.sql import SpanStore

IDS = [
    "4bf8ff00000000000000000000000001",
    "4bf90000000000000000000000000002",
    "4bf9a000000000000000000000000003",
    "4bfa0000000000000000000000000004",
    "ffffffffffffffffffffffffffffff05",
]


@pytest.fixture
def stored(store: SpanStore) -> SpanStore:
    spans = [SpanRecord(t, "00000000000000aa", "turn", 1, 2) for t in IDS]
    store.write_spans(spans, now=1.0)
    return store


@pytest.mark.parametrize(
    ("prefix", "expected"),
    [
        ("4bf9a", [IDS[2]]),
        ("4BF9A0", [IDS[2]]),  # as typed in capitals
        ("4bf8f", [IDS[0]]),  # the next prefix carries (4bf90) and excludes 4bf9...
        ("4bf9", [IDS[1], IDS[2]]),
        ("4bf", [IDS[0], IDS[1]]),  # limited to 2, in id order
        ("ffff", [IDS[4]]),  # all f: no next prefix of that length
        (IDS[3], [IDS[3]]),  # a whole id is its own prefix
        ("4bf7", []),
    ],
)
def test_trace_ids_with_prefix(stored: SpanStore, prefix: str, expected: list[str]) -> None:
    assert stored.trace_ids_with_prefix(prefix, limit=2) == expected


@pytest.mark.parametrize("prefix", ["", "4b%", "4b_f", "zz", "' OR 1=1 --"])
def test_an_empty_or_non_hex_prefix_matches_nothing(stored: SpanStore, prefix: str) -> None:
    assert stored.trace_ids_with_prefix(prefix) == []
