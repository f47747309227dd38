"""Enrich mode in one process: an app sends its spans to a spanjudge worker, which forwards them
to a backend and puts the scores on the evaluated spans themselves.

Runs offline: the judge is the demo's rule-based scripted judge on 127.0.0.1 (not an LLM), the
store is a temporary SQLite file, and the "backend" is an in-memory exporter printed at the end.
In production the worker runs as ``spanjudge worker --config worker.toml`` with
``mode = "enrich"`` and ``downstream_endpoint`` pointing at Jaeger, Tempo or a Collector.

    python examples/enrich_mode.py
"""

from __future__ import annotations

import os
import tempfile
import time

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import spanjudge
from spanjudge._demo.app import run_traffic
from spanjudge._demo.judge import start_offline_judge
from spanjudge._receive.serving import BackgroundServer
from spanjudge.settings import load_settings
from spanjudge.worker.service import Worker


def main() -> None:
    judge = start_offline_judge()
    backend = InMemorySpanExporter()  # stands in for Jaeger / Tempo
    settings = load_settings(
        None,
        mode="enrich",
        store_url=f"sqlite:///{tempfile.mkdtemp()}/spanjudge.db",
        judge_model="openai/offline-rules",
        judge_options={"api_base": judge.base_url, "api_key": "unused"},
        interval_seconds=0.5,
        settle_seconds=0.5,
        max_hold_seconds=30,
        rules=[{"metric": "faithfulness", "target": "llm", "params": {"threshold": 0.7}}],
    )
    worker = Worker(settings, span_exporter=backend)
    worker.start_background()
    server = BackgroundServer(worker.app).start()
    tracing = spanjudge.configure(service_name="support-bot", otlp_endpoint=server.url)
    run_traffic()
    tracing.force_flush()

    deadline = time.monotonic() + 30
    while worker.store.stats(now=time.time()).outbox_held and time.monotonic() < deadline:
        time.sleep(0.2)
    worker.enricher.drain()
    print("judge: offline rule-based scripted judge (not an LLM)\n")
    for span in backend.get_finished_spans():
        scores = {k: v for k, v in span.attributes.items() if k.startswith("spanjudge.score.")}
        if scores:
            print(span.name)
            for key, value in sorted(scores.items()):
                print(f"  {key} = {str(value)[:90]}")
    print(
        f"\n{worker.enricher.forwarded} spans forwarded, {worker.enricher.forwarded_held} "
        "of them held for their scores"
    )
    server.stop()
    worker.shutdown()
    judge.stop()


if __name__ == "__main__":
    main()
