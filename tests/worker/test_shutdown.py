"""SIGTERM while the judge is answering slowly: exit 0, nothing lost, scores flushed."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx

from spanjudge._demo.judge import start_offline_judge
from spanjudge._store import open_store
from spanjudge.tracer import _attributes as attrs
from tests.support.otlp_sink import OtlpSink
from tests.worker.conftest import base_config


def test_sigterm_mid_evaluation(tmp_path: Path, demo_request: Any, start_worker: Any) -> None:
    judge = start_offline_judge(latency=0.5)
    db = tmp_path / "w.db"
    try:
        with OtlpSink() as sink:
            config = base_config(judge, f"sqlite:///{db}", sink.endpoint)
            config["settle_seconds"] = 0.1
            worker = start_worker(config)
            worker.wait_ready()
            assert worker.post(demo_request).status_code == 200
            deadline = time.monotonic() + 20
            while not judge.requests and time.monotonic() < deadline:
                time.sleep(0.02)
            assert judge.requests, worker.log()
            assert worker.terminate(timeout=40) == 0, worker.log()
            # stopped accepting
            try:
                refused = httpx.get(worker.url + "/healthz", timeout=1).status_code != 200
            except httpx.HTTPError:
                refused = True
            assert refused

            store = open_store(f"sqlite:///{db}")
            try:
                stats = store.stats(now=time.time())
                # every job is finished or waiting again: none stays leased by the dead worker
                assert stats.leased == 0
                assert stats.done + stats.pending + stats.failed > 0
                results = store.results(limit=10_000)
                # what was finished was flushed to the downstream endpoint before exit
                emitted = {
                    (s.attributes[attrs.GEN_AI_EVALUATION_NAME], s.parent_span_id)
                    for s in sink.spans
                    if attrs.GEN_AI_EVALUATION_NAME in s.attributes
                }
                assert {(r.metric, r.span_id) for r in results if r.span_id} <= emitted
                assert not store.unemitted_results(outputs=["span"])
            finally:
                store.close()
    finally:
        judge.stop()
