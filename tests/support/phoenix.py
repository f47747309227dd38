"""A real Arize Phoenix on 127.0.0.1, a backend that takes OTLP traces and no logs.

`bash scripts/test` provides it (scripts/phoenix_env: `arize-phoenix`, pinned, in a virtual
environment of its own) and exports SPANJUDGE_PHOENIX_PYTHON; without it the tests that need
Phoenix fail, saying so. Each server gets a fresh working directory (its SQLite database),
its own ports, no telemetry and no external resources::

    with PhoenixServer.start(tmp_path) as phoenix:
        exporter = OTLPSpanExporter(endpoint=phoenix.url + "/v1/traces")
        traces = phoenix.traces("default")      # REST: /v1/projects/default/traces
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

from tests.support.ports import free_port
from tests.support.server_process import ServerProcess, provided_python


def phoenix_python() -> str:
    return provided_python("SPANJUDGE_PHOENIX_PYTHON", "Phoenix", "scripts/phoenix_env")


def micros(stamp: str) -> int:
    """Phoenix's ISO 8601 time as integer microseconds since the epoch (its precision)."""
    moment = datetime.fromisoformat(stamp)
    return int(moment.timestamp()) * 1_000_000 + moment.microsecond


@dataclass
class PhoenixServer(ServerProcess):
    HEALTH = "/healthz"
    NAME = "Phoenix"

    @classmethod
    def start(cls, folder: Path) -> PhoenixServer:
        python = phoenix_python()
        port = free_port()
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(folder),
            "PHOENIX_WORKING_DIR": str(folder),
            "PHOENIX_HOST": "127.0.0.1",
            "PHOENIX_PORT": str(port),
            "PHOENIX_GRPC_PORT": str(free_port()),
            # nothing leaves the machine: no analytics pixels, no downloads
            "PHOENIX_TELEMETRY_ENABLED": "false",
            "PHOENIX_ALLOW_EXTERNAL_RESOURCES": "false",
        }
        return cls.launch([python, "-m", "phoenix.server.main", "serve"], folder, port, env)

    # ------------------------------------------------------------------ reading back
    def traces(self, project: str = "default") -> list[dict[str, Any]]:
        """Every trace of ``project`` with its spans, through the REST API."""
        answer = httpx.get(
            f"{self.url}/v1/projects/{project}/traces",
            params={"include_spans": "true", "limit": 1000},
            timeout=30,
        )
        if answer.status_code == 404:
            return []  # no span of the project arrived yet
        answer.raise_for_status()
        return list(answer.json()["data"])

    def wait_for_traces(
        self, done: Any, project: str = "default", timeout: float = 60.0
    ) -> list[dict[str, Any]]:
        """Poll until ``done(traces)`` holds (Phoenix inserts spans in batches)."""
        deadline = time.monotonic() + timeout
        while True:
            traces = self.traces(project)
            if done(traces):
                return traces
            if time.monotonic() > deadline:
                spans = sum(len(t["spans"] or []) for t in traces)
                raise AssertionError(f"Phoenix: condition not met in {timeout}s; {spans} spans")
            time.sleep(0.5)

    def span_names(self, project: str, condition: str) -> list[tuple[str, str]]:
        """(name, status) of the spans of ``project`` that Phoenix's span filter ``condition``
        (the expression its UI takes) selects, through its GraphQL API."""
        nodes = self._filtered(project, condition, "name statusCode")
        return [(n["name"], n["statusCode"]) for n in nodes]

    def span_ids(self, project: str, condition: str) -> list[str]:
        """The OpenTelemetry span ids the span filter ``condition`` selects."""
        return [n["spanId"] for n in self._filtered(project, condition, "spanId")]

    def _filtered(self, project: str, condition: str, fields: str) -> list[dict[str, Any]]:
        projects = httpx.get(f"{self.url}/v1/projects", timeout=10).json()["data"]
        [node] = [p["id"] for p in projects if p["name"] == project]
        query = (
            "query($id: ID!, $cond: String) { node(id: $id) { ... on Project {"
            f" spans(first: 1000, filterCondition: $cond) {{ edges {{ node {{ {fields} }} }} }}"
            " } } }"
        )
        answer = httpx.post(
            f"{self.url}/graphql",
            json={"query": query, "variables": {"id": node, "cond": condition}},
            timeout=30,
        ).json()
        if answer.get("errors"):
            raise AssertionError(f"Phoenix refused the filter {condition!r}: {answer['errors']}")
        return [e["node"] for e in answer["data"]["node"]["spans"]["edges"]]
