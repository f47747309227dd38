"""Spans as the online loop reads them: from the store, with the GenAI content events that
arrived as log records joined to their span (as span events of the same name), so the span
dialects read event-mode content exactly like span-mode content.

Example::

    spans = load_trace(store, trace_id)
    by_trace = load_traces(store, page_of_trace_ids)  # two reads for the whole page
    spans = load_conversation(store, "chat-42")
"""

from __future__ import annotations

from collections.abc import Sequence

from spanjudge._core.span_record import LogEvent, SpanEvent, SpanRecord
from spanjudge._store.sql import SpanStore


def join_logs(spans: list[SpanRecord], logs: Sequence[LogEvent]) -> list[SpanRecord]:
    """Attach each log event to the span with its trace id and span id (events whose span is
    not among ``spans`` are left out). Mutates and returns ``spans``."""
    if not logs:
        return spans
    by_id = {(s.trace_id, s.span_id): s for s in spans}
    for log in logs:
        span = by_id.get((log.trace_id, log.span_id or ""))
        if span is None:
            continue
        attributes = dict(log.attributes)
        if log.body is not None:
            attributes.setdefault("body", log.body)
        span.events.append(SpanEvent(log.event_name, log.time_unix_nano, attributes))
    return spans


def load_trace(store: SpanStore, trace_id: str) -> list[SpanRecord]:
    """A trace's spans with their content events."""
    spans = store.trace_spans(trace_id)
    return join_logs(spans, store.trace_logs([trace_id])) if spans else spans


def load_traces(store: SpanStore, trace_ids: Sequence[str]) -> dict[str, list[SpanRecord]]:
    """Several traces' spans with their content events, read at once (planning reads a page of
    settled traces this way: one span read and one event read instead of two per trace)."""
    by_trace = store.traces_spans(trace_ids)
    present = [t for t, spans in by_trace.items() if spans]
    if present:
        join_logs([s for t in present for s in by_trace[t]], store.trace_logs(present))
    return by_trace


def load_conversation(store: SpanStore, conversation_id: str) -> list[SpanRecord]:
    """Every span of the conversation's traces with their content events."""
    spans = store.conversation_spans(conversation_id)
    if not spans:
        return spans
    trace_ids = sorted({s.trace_id for s in spans})
    return join_logs(spans, store.trace_logs(trace_ids))
