"""A real MLflow tracking server on 127.0.0.1: OTLP traces in (``/v1/traces`` with
``x-mlflow-experiment-id``), a SQLite store, the REST API the MLflow sink writes to.

`bash scripts/test` provides it (scripts/mlflow_env: `mlflow`, pinned, in a virtual environment
of its own) and exports SPANJUDGE_MLFLOW_PYTHON; without it the tests that need MLflow fail,
saying so. Each server gets a fresh folder (its database and artifacts) and its own port, with
no telemetry::

    with MlflowServer.start(tmp_path) as mlflow:
        experiment = mlflow.create_experiment("support")
        traces = mlflow.search(experiment, "tags.`service.name` = 'support-bot'")
"""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.ports import free_port

PROVIDED_BY = (
    "run `bash scripts/test`, which installs MLflow in a venv of its own (scripts/mlflow_env)"
    " and exports SPANJUDGE_MLFLOW_PYTHON"
)
# The first start creates the database (migrations): about 20 s on the 2-core machine.
START_TIMEOUT = 180.0


def mlflow_python() -> str:
    python = os.environ.get("SPANJUDGE_MLFLOW_PYTHON")
    if not python or not Path(python).exists():
        pytest.fail(f"MLflow is not provided (SPANJUDGE_MLFLOW_PYTHON={python!r}): {PROVIDED_BY}")
    return python


@dataclass
class MlflowServer:
    url: str
    proc: subprocess.Popen[bytes]
    log_path: Path

    @classmethod
    def start(cls, folder: Path) -> MlflowServer:
        python = mlflow_python()
        port = free_port()
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(folder),
            "MLFLOW_DISABLE_TELEMETRY": "true",
            "DO_NOT_TRACK": "true",
        }
        log_path = folder / "mlflow.log"
        with log_path.open("wb") as log:
            proc = subprocess.Popen(
                [python, "-m", "mlflow", "server", *cls.arguments(folder, port)],
                cwd=folder,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        server = cls(f"http://127.0.0.1:{port}", proc, log_path)
        server._wait_healthy()
        return server

    @staticmethod
    def arguments(folder: Path, port: int) -> list[str]:
        return [
            f"--backend-store-uri=sqlite:///{folder}/mlflow.db",
            f"--default-artifact-root={folder / 'artifacts'}",
            "--host=127.0.0.1",
            f"--port={port}",
            "--workers=1",
        ]

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        self.stop()
        tail = self.log_path.read_text(errors="replace")[-3000:]
        pytest.fail(f"MLflow did not start at {self.url}:\n{tail}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    def __enter__(self) -> MlflowServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ the REST API
    def create_experiment(self, name: str) -> str:
        answer = httpx.post(
            self.url + "/api/2.0/mlflow/experiments/create", json={"name": name}, timeout=30
        )
        answer.raise_for_status()
        return str(answer.json()["experiment_id"])

    def search(self, experiment: str, condition: str | None = None) -> list[dict[str, Any]]:
        """The trace infos of ``experiment`` that ``condition`` (MLflow's trace filter, as its
        UI's search box takes it) selects."""
        body: dict[str, Any] = {
            "locations": [
                {"type": "MLFLOW_EXPERIMENT", "mlflow_experiment": {"experiment_id": experiment}}
            ],
            "max_results": 500,
        }
        if condition:
            body["filter"] = condition
        answer = httpx.post(self.url + "/api/3.0/mlflow/traces/search", json=body, timeout=30)
        if answer.status_code != 200:
            raise AssertionError(f"MLflow refused the filter {condition!r}: {answer.text}")
        return list(answer.json().get("traces", []))

    def trace_info(self, otlp_trace_id: str) -> dict[str, Any]:
        answer = httpx.get(f"{self.url}/api/3.0/mlflow/traces/tr-{otlp_trace_id}", timeout=30)
        answer.raise_for_status()
        return dict(answer.json()["trace"]["trace_info"])

    def spans(self, otlp_trace_id: str) -> list[dict[str, Any]]:
        """The trace's spans as MLflow stored them (its own span types and attributes)."""
        answer = httpx.get(
            f"{self.url}/ajax-api/3.0/mlflow/get-trace-artifact",
            params={"request_id": f"tr-{otlp_trace_id}"},
            timeout=30,
        )
        answer.raise_for_status()
        return list(answer.json()["spans"])
