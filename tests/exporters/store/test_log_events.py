"""GenAI content log events in the store, on SQLite and PostgreSQL alike (see conftest.py):
kept and read back by trace, counted as activity on the trace (and its conversations) for
settling whichever arrives first, cleaned like spans, deduplicated, and aged out by retention."""

from __future__ import annotations

from typing import Any

from spanjudge._core.span_record import LogEvent, SpanRecord
from spanjudge._store.postgres import PostgresStore
from spanjudge._store.schema import SCHEMA_VERSION
from spanjudge._store.sql import SpanStore
from spanjudge._store.sqlite import SQLiteStore
from spanjudge.tracer import _attributes as attrs

SETTLE = 10.0
T0 = 1_700_000_000.0
DETAILS = "gen_ai.client.inference.operation.details"
MESSAGES = [{"role": "user", "parts": [{"type": "text", "content": "Return a blender?"}]}]


def tid(n: int) -> str:
    return f"{n:032x}"


def sid(n: int) -> str:
    return f"{n:016x}"


def event(trace: int, span: int | None, at: int, **fields: Any) -> LogEvent:
    values: dict[str, Any] = {
        "event_name": DETAILS,
        "attributes": {attrs.GEN_AI_INPUT_MESSAGES: MESSAGES, "gen_ai.usage.input_tokens": 3},
        "resource": {"service.name": "shop"},
        "scope_name": "opentelemetry.instrumentation.openai_v2",
    }
    values.update(fields)
    return LogEvent(
        trace_id=tid(trace), span_id=sid(span) if span else None, time_unix_nano=at, **values
    )


def root(trace: int, conversation: str | None = None) -> SpanRecord:
    attributes = {attrs.GEN_AI_CONVERSATION_ID: conversation} if conversation else {}
    return SpanRecord(
        trace_id=tid(trace),
        span_id=sid(1),
        name="chat gpt-4o-mini",
        start_time_unix_nano=1_000,
        end_time_unix_nano=2_000,
        attributes=attributes,
    )


def test_the_store_keeps_log_events_at_the_new_schema_version(store: SpanStore) -> None:
    assert isinstance(store, SQLiteStore | PostgresStore)
    assert store.schema_version() == SCHEMA_VERSION >= 4


def test_events_round_trip_and_come_back_by_time_across_traces(store: SpanStore) -> None:
    first = event(1, 1, 300, body={"content": "hi", "parts": [1, 2.5, True, None]})
    second = event(2, None, 100, event_name="gen_ai.user.message", attributes={}, resource={})
    third = event(1, 2, 200, scope_name=None)
    store.write_logs([first, second, third], now=T0)
    store.write_logs([event(3, 1, 50)], now=T0)
    assert store.trace_logs([tid(1), tid(2)]) == [second, third, first]
    assert store.trace_logs([tid(1)]) == [third, first]
    assert store.trace_logs([tid(99)]) == []
    assert store.trace_logs([]) == []
    assert first.body == store.trace_logs([tid(1)])[1].body  # JSON body, nested kept


def test_events_with_the_same_time_keep_their_arrival_order(store: SpanStore) -> None:
    user = event(1, 1, 100, event_name="gen_ai.user.message", attributes={"n": 1})
    choice = event(1, 1, 100, event_name="gen_ai.choice", attributes={"n": 2})
    store.write_logs([user], now=T0)
    store.write_logs([choice], now=T0)
    assert [e.event_name for e in store.trace_logs([tid(1)])] == [
        "gen_ai.user.message",
        "gen_ai.choice",
    ]


def test_a_retried_batch_is_stored_once(store: SpanStore) -> None:
    batch = [event(1, 1, 100), event(1, 1, 100, attributes={"other": True})]
    store.write_logs(batch, now=T0)
    store.write_logs(batch, now=T0 + 1)  # the client retried: its answer was lost
    assert store.trace_logs([tid(1)]) == batch


def test_a_log_after_the_spans_holds_the_trace_until_it_settles_again(store: SpanStore) -> None:
    store.write_spans([root(1)], now=T0)
    store.write_logs([event(1, 1, 100)], now=T0 + 8)
    # without the log the trace would have settled at T0 + SETTLE
    assert store.settled_traces(settle_seconds=SETTLE, now=T0 + SETTLE + 1) == []
    assert store.settled_traces(settle_seconds=SETTLE, now=T0 + 8 + SETTLE) == [tid(1)]
    assert [e.span_id for e in store.trace_logs([tid(1)])] == [sid(1)]


def test_a_log_before_the_spans_creates_the_trace_which_waits_for_its_root(
    store: SpanStore,
) -> None:
    store.write_logs([event(1, 1, 100)], now=T0)
    # a trace with no root span yet settles only as an orphan would
    assert store.settled_traces(settle_seconds=SETTLE, now=T0 + SETTLE + 1) == []
    store.write_spans([root(1)], now=T0 + 5)
    assert store.settled_traces(settle_seconds=SETTLE, now=T0 + 5 + SETTLE - 1) == []
    assert store.settled_traces(settle_seconds=SETTLE, now=T0 + 5 + SETTLE) == [tid(1)]
    assert store.trace_spans(tid(1))[0].span_id == store.trace_logs([tid(1)])[0].span_id


def test_a_log_after_planning_does_not_plan_the_trace_again(store: SpanStore) -> None:
    store.write_spans([root(1)], now=T0)
    store.mark_planned(traces=[tid(1)], now=T0 + SETTLE)
    store.write_logs([event(1, 1, 100)], now=T0 + SETTLE + 1)
    assert store.settled_traces(settle_seconds=SETTLE, now=T0 + 100) == []
    assert len(store.trace_logs([tid(1)])) == 1


def test_a_late_log_keeps_the_conversation_from_going_idle(store: SpanStore) -> None:
    store.write_spans([root(1, conversation="conv-1")], now=T0)
    store.write_logs([event(1, 1, 100)], now=T0 + 50)
    assert store.idle_conversations(idle_seconds=60, now=T0 + 70) == []
    assert store.idle_conversations(idle_seconds=60, now=T0 + 110) == ["conv-1"]


def test_hostile_text_is_stored_cleaned_instead_of_failing_the_batch(store: SpanStore) -> None:
    hostile = event(
        1,
        1,
        100,
        event_name="gen_ai.choice\x00\ud800",
        attributes={"k\x00": "v\x00\udfff"},
        body="b\x00\ud800",
        scope_name="scope\x00",
    )
    store.write_logs([hostile, event(1, 2, 200)], now=T0)
    got = store.trace_logs([tid(1)])
    assert len(got) == 2
    assert got[0].event_name == "gen_ai.choice\ufffd?"
    assert got[0].scope_name == "scope\ufffd"
    assert got[0].attributes == {"k\x00": "v\x00\udfff"}  # JSON escapes keep it exact
    assert got[0].body == "b\x00\ud800"


def test_retention_deletes_old_log_events_with_old_spans(store: SpanStore) -> None:
    store.write_spans([root(1)], now=T0)
    store.write_logs([event(1, 1, 100)], now=T0)
    store.write_logs([event(2, 1, 100)], now=T0 + 100)
    assert store.delete_older_than(T0 + 50) == 1  # the count stays the spans deleted
    assert store.trace_logs([tid(1)]) == []
    assert len(store.trace_logs([tid(2)])) == 1


def test_many_traces_are_read_in_one_call(store: SpanStore) -> None:
    events = [event(n, 1, n) for n in range(1, 1_201)]
    store.write_logs(events, now=T0)
    assert store.trace_logs([tid(n) for n in range(1, 1_201)]) == events
