"""array_literal: the held rows' four columns go to PostgreSQL as array literals that the server
parses. A real server reads back exactly the values given: any cleaned text (quotes,
backslashes, braces, commas, spaces, the word NULL, the empty string, non-ASCII), None as NULL,
floats to the bit (infinities and NaN included) and ints. (The outbox tests on PostgreSQL
write held rows through it.)"""

from __future__ import annotations

import math
from collections.abc import Iterator

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spanjudge._store.columns import array_literal, clean_text
from tests.support.stores import POSTGRES_URL, postgres_unreachable


@pytest.fixture(scope="module")
def conn() -> Iterator[psycopg.Connection[tuple[object, ...]]]:
    try:
        connection = psycopg.connect(POSTGRES_URL, autocommit=True)
    except psycopg.OperationalError as exc:
        postgres_unreachable(exc)
    with connection:
        yield connection


Conn = psycopg.Connection[tuple[object, ...]]


def read_back(conn: Conn, literal: str, kind: str) -> list[object]:
    row = conn.execute(f"SELECT %s::{kind}[]", (literal,)).fetchone()
    assert row is not None
    return list(row[0])  # type: ignore[call-overload]


@pytest.mark.parametrize(
    "values",
    [
        [],
        ["", "NULL", "null", "a b", 'say "hi"', "back\\slash", "{x,y}", "é", " lead", "tail "],
        ["0af3" * 8, None, "00f067aa0ba902b7"],
    ],
)
def test_text_values_read_back_as_given(
    conn: psycopg.Connection[tuple[object, ...]], values: list[str | None]
) -> None:
    assert read_back(conn, array_literal(values), "text") == values


@settings(max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.one_of(st.none(), st.text()), max_size=12))
def test_any_cleaned_text_reads_back(
    conn: psycopg.Connection[tuple[object, ...]], values: list[str | None]
) -> None:
    cleaned = [clean_text(v) for v in values]
    assert read_back(conn, array_literal(cleaned), "text") == cleaned


@settings(max_examples=200, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.floats(), max_size=12))
def test_floats_read_back_to_the_bit(
    conn: psycopg.Connection[tuple[object, ...]], values: list[float]
) -> None:
    got = read_back(conn, array_literal(values), "double precision")
    assert len(got) == len(values)
    for a, b in zip(got, values, strict=True):
        assert (math.isnan(a) and math.isnan(b)) or a == b  # type: ignore[arg-type]


def test_ints_and_edge_floats(conn: psycopg.Connection[tuple[object, ...]]) -> None:
    assert read_back(conn, array_literal([0, -3, 2**31 - 1]), "integer") == [0, -3, 2**31 - 1]
    assert array_literal(["1,2", "3"]) == '{"1,2","3"}'  # a comma inside a value: quoted
    assert array_literal(["NULL", "x"]) == '{"NULL","x"}'
    assert array_literal(["00f0", "a1"]) == "{00f0,a1}"  # ids: joined as they are
    assert array_literal([None, 1.5]) == "{NULL,1.5}"
    assert read_back(conn, array_literal([math.inf, -math.inf, 1e-300]), "double precision") == [
        math.inf,
        -math.inf,
        1e-300,
    ]
