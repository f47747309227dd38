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


def test_sigterm_while_every_judge_call_hangs_exits_within_the_grace_period(
    tmp_path: Path, demo_request: Any, start_worker: Any
) -> None:
    """Issue 41: with every judge call hanging, SIGTERM waited for the whole round, retries
    included (308 s; Kubernetes kills at 60). Now the worker exits within
    shutdown_grace_seconds: the calls are cancelled, their jobs stay pending (not done, not
    errored, not leased) and a fresh start takes them."""
    judge = start_offline_judge(latency=600)  # longer than the test: a hang
    db = tmp_path / "w.db"
    try:
        with OtlpSink() as sink:
            config = base_config(judge, f"sqlite:///{db}", sink.endpoint)
            config.update(settle_seconds=0.1, judge_timeout=600, shutdown_grace_seconds=2)
            worker = start_worker(config)
            worker.wait_ready()
            assert worker.post(demo_request).status_code == 200
            deadline = time.monotonic() + 20
            while len(judge.requests) < 2 and time.monotonic() < deadline:
                time.sleep(0.02)
            assert judge.requests, worker.log()
            sent = time.monotonic()
            # the grace period is 2 s; 20 s leaves room for a slow machine, and is far under
            # the 600 s the hanging calls would take
            assert worker.terminate(timeout=20) == 0, worker.log()
            assert time.monotonic() - sent < 20
            assert "were cancelled; their jobs are left for the next start" in worker.log()

            store = open_store(f"sqlite:///{db}")
            try:
                stats = store.stats(now=time.time())
                assert stats.leased == 0 and stats.done == 0 and stats.failed == 0
                assert stats.pending > 0
                assert store.results(limit=10) == []  # nothing recorded for a cancelled call
            finally:
                store.close()
    finally:
        judge.stop()
