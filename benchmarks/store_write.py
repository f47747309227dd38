"""Spans per second written through the StoreSpanExporter into SQLite and PostgreSQL.

Real OTel SDK spans (GenAI-shaped: messages, token counts, a conversation id) are created first,
then handed to ``StoreSpanExporter.export`` in batches as a BatchSpanProcessor would; the clock
runs from the first export until ``force_flush`` returns, i.e. until every span is committed.
Also reports the raw ``write_spans`` rate (records already converted). Prints JSON.

    python benchmarks/store_write.py [--spans 50000] [--postgres-url URL | --no-postgres]
    python benchmarks/store_write.py --smoke [--no-postgres]   # seconds; tests/benchmarks runs it
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
import uuid
from collections.abc import Sequence
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from spanjudge._store.sql import SpanStore
from spanjudge._store.sqlite import SQLiteStore
from spanjudge.exporters._convert import span_to_record
from spanjudge.exporters._store_spans import StoreSpanExporter
from spanjudge.tracer import _attributes as attrs

GOAL_SPANS_PER_SECOND = 20_000


class _Collect(SpanExporter):
    def __init__(self) -> None:
        self.spans: list[ReadableSpan] = []

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.spans.extend(spans)
        return SpanExportResult.SUCCESS


def make_spans(n: int) -> list[ReadableSpan]:
    """``n`` finished spans: traces of one agent span and four LLM/tool/retriever children."""
    collect = _Collect()
    provider = TracerProvider(resource=Resource({"service.name": "bench", "service.version": "1"}))
    provider.add_span_processor(SimpleSpanProcessor(collect))
    tracer = provider.get_tracer("spanjudge")
    question = "How do I reset my password? " * 4
    messages = json.dumps([{"role": "user", "parts": [{"type": "text", "content": question}]}])
    made = 0
    turn = 0
    while made < n:
        turn += 1
        with tracer.start_as_current_span("invoke_agent support") as agent:
            agent.set_attribute(attrs.GEN_AI_OPERATION_NAME, "invoke_agent")
            agent.set_attribute(attrs.GEN_AI_CONVERSATION_ID, f"conv-{turn // 3}")
            agent.set_attribute(attrs.GEN_AI_AGENT_NAME, "support")
            for i in range(4):
                with tracer.start_as_current_span(f"chat gpt-4o-mini {i}") as llm:
                    llm.set_attribute(attrs.GEN_AI_OPERATION_NAME, "chat")
                    llm.set_attribute(attrs.GEN_AI_REQUEST_MODEL, "gpt-4o-mini")
                    llm.set_attribute(attrs.GEN_AI_USAGE_INPUT_TOKENS, 120 + i)
                    llm.set_attribute(attrs.GEN_AI_USAGE_OUTPUT_TOKENS, 40)
                    llm.set_attribute(attrs.GEN_AI_INPUT_MESSAGES, messages)
                    llm.set_attribute(attrs.GEN_AI_RESPONSE_FINISH_REASONS, ("stop",))
        made += 5
    provider.shutdown()
    return collect.spans[:n]


def through_exporter(store: SpanStore, spans: list[ReadableSpan], batch: int = 512) -> float:
    exporter = StoreSpanExporter(store, max_queue_spans=len(spans) + 1, batch_size=batch)
    start = time.perf_counter()
    for i in range(0, len(spans), batch):
        exporter.export(spans[i : i + batch])
    assert exporter.force_flush(600_000)
    elapsed = time.perf_counter() - start
    exporter.shutdown()
    if exporter.written != len(spans):
        raise SystemExit(f"only {exporter.written}/{len(spans)} written: {exporter.dropped}")
    return len(spans) / elapsed


def raw_writes(store: SpanStore, spans: list[ReadableSpan], batch: int = 512) -> float:
    records = [span_to_record(s) for s in spans]
    # Fresh trace ids (one per original trace) so the rows are inserted, not ignored as
    # duplicates of the exporter run.
    fresh: dict[str, str] = {}
    for r in records:
        r.trace_id = fresh.setdefault(r.trace_id, uuid.uuid4().hex)
    start = time.perf_counter()
    for i in range(0, len(records), batch):
        store.write_spans(records[i : i + batch])
    return len(records) / (time.perf_counter() - start)


def bench(store: SpanStore, spans: list[ReadableSpan]) -> dict[str, Any]:
    return {
        "exporter_spans_per_second": round(through_exporter(store, spans)),
        "write_spans_per_second": round(raw_writes(store, spans)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, default=50_000)
    parser.add_argument(
        "--postgres-url",
        default=os.environ.get(
            "SPANJUDGE_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
        ),
    )
    parser.add_argument("--no-postgres", action="store_true")
    parser.add_argument(
        "--smoke", action="store_true", help="seconds: 1,000 spans (checks the script runs)"
    )
    args = parser.parse_args()
    if args.smoke:
        args.spans = 1000

    spans = make_spans(args.spans)
    out: dict[str, Any] = {
        "benchmark": "store_write",
        "spans": len(spans),
        "batch_size": 512,
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "load_average_1m": round(os.getloadavg()[0], 2),  # the machine may be shared
        "goal_sqlite_spans_per_second": GOAL_SPANS_PER_SECOND,
    }
    with tempfile.TemporaryDirectory() as tmp:
        sqlite = SQLiteStore(os.path.join(tmp, "bench.db"))
        out["sqlite"] = bench(sqlite, spans)
        out["sqlite"]["file_bytes"] = os.path.getsize(os.path.join(tmp, "bench.db"))
        sqlite.close()
    out["sqlite"]["meets_goal"] = (
        out["sqlite"]["exporter_spans_per_second"] >= GOAL_SPANS_PER_SECOND
    )
    if not args.no_postgres:
        from spanjudge._store.postgres import PostgresStore

        schema = f"spanjudge_bench_{uuid.uuid4().hex[:8]}"
        pg = PostgresStore(args.postgres_url, schema=schema)
        try:
            out["postgresql"] = bench(pg, spans)
        finally:
            pg.drop_schema()
            pg.close()
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
