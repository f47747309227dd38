"""Recorded bodies from opentelemetry-instrumentation-openai-v2 in ``event_only`` content mode:
every ``/v1/logs`` body decodes to its GenAI content events, each on a chat span of the
``/v1/traces`` bodies recorded in the same run, and a store joins them whichever came first."""

from __future__ import annotations

from pathlib import Path

from spanjudge._core.span_record import LogEvent, SpanRecord
from spanjudge._receive.decode import PROTOBUF, decode_traces
from spanjudge._receive.logs import decode_logs
from spanjudge._store.sqlite import SQLiteStore
from spanjudge.tracer import _attributes as attrs

RECORDING = Path(__file__).parent / "fixtures" / "otel-genai-event"
DETAILS = "gen_ai.client.inference.operation.details"


def recorded() -> tuple[list[LogEvent], list[SpanRecord]]:
    events = [e for p in sorted(RECORDING.glob("*-logs.pb")) for e in _logs(p)]
    spans = [s for p in sorted(RECORDING.glob("*-traces.pb")) for s in _spans(p)]
    return events, spans


def _logs(path: Path) -> list[LogEvent]:
    return decode_logs(path.read_bytes(), PROTOBUF)


def _spans(path: Path) -> list[SpanRecord]:
    return decode_traces(path.read_bytes(), PROTOBUF)


def test_the_five_content_events_sit_on_the_five_chat_spans() -> None:
    events, spans = recorded()
    assert len(events) == 5
    assert {e.event_name for e in events} == {DETAILS}
    chats = [(s.trace_id, s.span_id) for s in spans if s.operation == "chat"]
    assert len(chats) == 5
    assert sorted((e.trace_id, e.span_id) for e in events) == sorted(chats)


def test_the_messages_arrive_structured() -> None:
    events, _ = recorded()
    first = min(events, key=lambda e: e.time_unix_nano)
    messages = first.attributes[attrs.GEN_AI_INPUT_MESSAGES]
    assert [m["role"] for m in messages] == ["system", "user"]
    assert messages[1]["parts"] == [
        {"content": "How long do I have to return a blender?", "type": "text"}
    ]
    output = first.attributes[attrs.GEN_AI_OUTPUT_MESSAGES]
    assert output[0]["role"] == "assistant" and output[0]["finish_reason"] == "stop"
    assert first.resource["service.name"] == "interop-otel-genai"


def test_a_store_joins_them_whichever_arrives_first(tmp_path: Path) -> None:
    events, spans = recorded()
    with SQLiteStore(tmp_path / "replay.db") as store:
        half = len(events) // 2
        store.write_logs(events[:half], now=1.0)  # these logs arrive before their spans
        store.write_spans(spans, now=2.0)
        store.write_logs(events[half:], now=3.0)  # these after
        for trace_id in {s.trace_id for s in spans if s.operation == "chat"}:
            chat = next(s for s in store.trace_spans(trace_id) if s.operation == "chat")
            [event] = store.trace_logs([trace_id])
            assert event.span_id == chat.span_id
