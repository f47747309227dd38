"""Fixtures for the worker service tests: demo traffic as OTLP protobuf, worker subprocesses."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import ReadableSpan

from spanjudge._demo.judge import start_offline_judge
from spanjudge.testing import ScriptedJudgeServer
from tests.support.ports import free_port

ROOT = Path(__file__).resolve().parents[2]


def _capture_traffic() -> list[ReadableSpan]:
    """Run the demo app once in a child process and read back its spans (pickled-free: OTLP)."""
    code = (
        "import sys\n"
        "from opentelemetry.sdk.trace.export import SimpleSpanProcessor\n"
        "from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter\n"
        "from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans\n"
        "import spanjudge\n"
        "from spanjudge._demo.app import run_traffic\n"
        "mem = InMemorySpanExporter()\n"
        "h = spanjudge.configure(service_name='support-bot',"
        " span_processors=[SimpleSpanProcessor(mem)], export_otlp=False)\n"
        "run_traffic(); h.force_flush()\n"
        "sys.stdout.buffer.write(encode_spans(mem.get_finished_spans()).SerializeToString())\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, check=True, timeout=60
    ).stdout
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    return ExportTraceServiceRequest.FromString(out)  # type: ignore[return-value]


@pytest.fixture(scope="session")
def demo_request() -> Any:
    """The demo app's traffic (single turns + one conversation) as one ExportTraceServiceRequest."""
    return _capture_traffic()


def split_request(request: Any, parts: int) -> list[Any]:
    """Split a request's spans round-robin into ``parts`` requests (same resource/scope)."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    out = [ExportTraceServiceRequest() for _ in range(parts)]
    i = 0
    for rs in request.resource_spans:
        for ss in rs.scope_spans:
            targets = []
            for req in out:
                nrs = req.resource_spans.add()
                nrs.resource.CopyFrom(rs.resource)
                nss = nrs.scope_spans.add()
                nss.scope.CopyFrom(ss.scope)
                targets.append(nss)
            for span in ss.spans:
                targets[i % parts].spans.add().CopyFrom(span)
                i += 1
    return out


def count_spans(request: Any) -> int:
    return sum(len(ss.spans) for rs in request.resource_spans for ss in rs.scope_spans)


_ = encode_spans  # re-exported for tests that build their own spans


@pytest.fixture(scope="session")
def offline_judge() -> Iterator[ScriptedJudgeServer]:
    server = start_offline_judge()
    yield server
    server.stop()


class WorkerProcess:
    """``spanjudge worker --config <file>`` as a child process on a free loopback port."""

    def __init__(
        self, config: dict[str, Any], tmp: Path, name: str = "worker", toml: str | None = None
    ) -> None:
        self.port = free_port()
        if toml is None:
            config = {"receiver_port": self.port, **config}
            self.config_path = tmp / f"{name}.json"
            self.config_path.write_text(json.dumps(config), encoding="utf-8")
        else:  # a TOML file as users write it (``config`` unused); the port is a top-level key
            self.config_path = tmp / f"{name}.toml"
            self.config_path.write_text(f"receiver_port = {self.port}\n{toml}", encoding="utf-8")
        self.log_path = tmp / f"{name}.log"
        env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "PYTHONUNBUFFERED": "1"}
        self._log = self.log_path.open("wb")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "spanjudge.cli.app",
                "worker",
                "--config",
                str(self.config_path),
            ],
            cwd=ROOT,
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        self.url = f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"worker exited {self.proc.returncode}:\n{self.log()}")
            try:
                if httpx.get(self.url + "/readyz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise AssertionError(f"worker not ready in {timeout}s:\n{self.log()}")

    def post(self, request: Any, **headers: str) -> httpx.Response:
        return httpx.post(
            self.url + "/v1/traces",
            content=request.SerializeToString(),
            headers={"Content-Type": "application/x-protobuf", **headers},
            timeout=10,
        )

    def terminate(self, timeout: float = 30.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        finally:
            self._log.close()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self._log.close()


@pytest.fixture
def start_worker(tmp_path: Path) -> Iterator[Any]:
    started: list[WorkerProcess] = []

    def start(config: dict[str, Any], name: str = "worker") -> WorkerProcess:
        worker = WorkerProcess(config, tmp_path, name)
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.kill()


def base_config(judge: ScriptedJudgeServer, store_url: str, downstream: str) -> dict[str, Any]:
    """The demo's three rules against the scripted judge, short timings for tests."""
    from spanjudge._demo.app import RELEVANT_TOPICS

    return {
        "store_url": store_url,
        "downstream_endpoint": downstream,
        "judge_model": "openai/scripted-judge",
        "judge_options": {"api_base": judge.base_url, "api_key": "x"},
        "interval_seconds": 0.2,
        "settle_seconds": 0.3,
        "idle_seconds": 0.5,
        "retention_seconds": None,
        "rules": [
            {"metric": "faithfulness", "target": "llm", "name": "faith"},
            {"metric": "bias", "target": "agent", "name": "bias"},
            {
                "metric": "topic_adherence",
                "target": "conversation",
                "name": "topics",
                "params": {"relevant_topics": RELEVANT_TOPICS},
            },
        ],
    }
