"""IngestGate: while the store blocks, new requests get 503 + Retry-After; then 200 again."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

import httpx
import uvicorn

from spanjudge._receive.ingest import IngestGate
from spanjudge._receive.receiver import create_receiver_app
from tests.support.ports import free_port
from tests.worker.conftest import split_request


class BlockingStore:
    """write_spans waits until released: a locked or overloaded database."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.entered = threading.Event()
        self.written: list[Any] = []

    def write_spans(self, spans: Sequence[Any], *, now: float | None = None) -> None:
        self.entered.set()
        assert self.release.wait(20)
        self.written.extend(spans)


def test_503_with_retry_after_while_the_store_blocks(demo_request: Any) -> None:
    store = BlockingStore()
    gate = IngestGate(store, max_pending_spans=1)
    app = create_receiver_app(sink=gate.write, backpressure=gate.backpressure)
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}/v1/traces"
    first, second = split_request(demo_request, 2)
    headers = {"Content-Type": "application/x-protobuf"}
    try:
        while not server.started:
            time.sleep(0.01)
        results: list[int] = []
        blocked = threading.Thread(
            target=lambda: results.append(
                httpx.post(
                    url, content=first.SerializeToString(), headers=headers, timeout=30
                ).status_code
            )
        )
        blocked.start()
        assert store.entered.wait(10)
        refused = httpx.post(url, content=second.SerializeToString(), headers=headers, timeout=10)
        assert refused.status_code == 503
        assert float(refused.headers["Retry-After"]) > 0
        assert gate.refused == 1
        assert gate.shedding()  # /readyz reports not ready meanwhile

        store.release.set()
        blocked.join(10)
        assert results == [200]
        again = httpx.post(url, content=second.SerializeToString(), headers=headers, timeout=10)
        assert again.status_code == 200
        assert not gate.shedding()
        n_first = sum(len(ss.spans) for rs in first.resource_spans for ss in rs.scope_spans)
        n_second = sum(len(ss.spans) for rs in second.resource_spans for ss in rs.scope_spans)
        assert len(store.written) == n_first + n_second  # the refused batch was not kept
    finally:
        store.release.set()
        server.should_exit = True
        thread.join(10)
