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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from tests.support.ports import free_port
from tests.support.server_process import ServerProcess, provided_python


def mlflow_python() -> str:
    return provided_python("SPANJUDGE_MLFLOW_PYTHON", "MLflow", "scripts/mlflow_env")


@dataclass
class MlflowServer(ServerProcess):
    HEALTH = "/health"
    NAME = "MLflow"

    @classmethod
    def start(cls, folder: Path) -> MlflowServer:
        port = free_port()
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(folder),
            "MLFLOW_DISABLE_TELEMETRY": "true",
            "DO_NOT_TRACK": "true",
        }
        command = [
            mlflow_python(),
            "-m",
            "mlflow",
            "server",
            f"--backend-store-uri=sqlite:///{folder}/mlflow.db",
            f"--default-artifact-root={folder / 'artifacts'}",
            "--host=127.0.0.1",
            f"--port={port}",
            "--workers=1",
        ]
        return cls.launch(command, folder, port, env)

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
