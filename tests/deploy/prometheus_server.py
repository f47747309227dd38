"""A real Prometheus server (Debian's ``prometheus`` binary) on a loopback port, for tests.

It scrapes one target every second, loads the given rule files, and answers PromQL through its
HTTP API. Used by test_prometheus_live.py; point ``target_url`` at anything serving
``/metrics`` (there: a running ``spanjudge worker``).

Example::

    with PrometheusServer.start(tmp_path, "http://127.0.0.1:9999/metrics") as prom:
        prom.wait_for_scrapes(2)
        prom.query('sum(spanjudge_evaluations_total)')
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
import yaml

from tests.support.ports import free_port

JOB = "target"
# Generous bounds for a shared, busy 2-core machine; they only limit how long a broken setup
# hangs, a healthy run finishes in a few seconds.
START_TIMEOUT = 60.0
SCRAPE_TIMEOUT = 60.0


def prometheus_binary() -> str:
    """Path of the ``prometheus`` binary; fails (never skips) when it is not installed."""
    path = shutil.which("prometheus")
    if path is None:
        pytest.fail(
            "prometheus not found: run `bash scripts/test`, which installs Debian's prometheus"
            " package",
            pytrace=False,
        )
    return path


@dataclass
class PrometheusServer:
    """A running Prometheus process and a small client for its HTTP API."""

    process: subprocess.Popen[bytes]
    url: str
    log_path: Path

    @classmethod
    @contextmanager
    def start(
        cls, workdir: Path, target_url: str, rule_files: Sequence[Path] = ()
    ) -> Iterator[PrometheusServer]:
        """Start Prometheus scraping ``target_url`` every second; stop it on exit."""
        target = urlsplit(target_url)
        config = {
            "global": {
                "scrape_interval": "1s",
                "evaluation_interval": "1s",
                "scrape_timeout": "1s",
            },
            "rule_files": [str(p) for p in rule_files],
            "scrape_configs": [
                {
                    "job_name": JOB,
                    "metrics_path": target.path or "/metrics",
                    "scheme": target.scheme or "http",
                    "static_configs": [{"targets": [target.netloc]}],
                }
            ],
        }
        config_path = workdir / "prometheus.yml"
        config_path.write_text(yaml.safe_dump(config), encoding="utf-8")
        port = free_port()
        log_path = workdir / "prometheus.log"
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                [
                    prometheus_binary(),
                    f"--config.file={config_path}",
                    f"--storage.tsdb.path={workdir / 'data'}",
                    f"--web.listen-address=127.0.0.1:{port}",
                    "--log.level=warn",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        server = cls(process, f"http://127.0.0.1:{port}", log_path)
        try:
            server._wait_ready()
            yield server
        finally:
            process.terminate()
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"prometheus exited ({self.process.returncode}):\n{self.log()}")
            try:
                if httpx.get(f"{self.url}/-/ready", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"prometheus not ready after {START_TIMEOUT}s:\n{self.log()}")

    def api(self, path: str, **params: str) -> Any:
        """GET ``/api/v1/<path>``; returns ``data`` or raises with Prometheus' error text."""
        response = httpx.get(f"{self.url}/api/v1/{path}", params=params, timeout=10)
        body = response.json()
        if body.get("status") != "success":
            raise AssertionError(f"{path} {params}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """Instant query; the result vector (a scalar result becomes one sample)."""
        data = self.api("query", query=expr)
        if data["resultType"] in ("scalar", "string"):
            return [{"metric": {}, "value": data["result"]}]
        return list(data["result"])

    def series_names(self) -> set[str]:
        return set(self.api("label/__name__/values"))

    def scrapes(self) -> int:
        """Successful scrapes of the target so far."""
        result = self.query(f'count_over_time(up{{job="{JOB}"}}[1h])')
        up = self.query(f'up{{job="{JOB}"}}')
        if not result or not up or up[0]["value"][1] != "1":
            return 0
        return int(float(result[0]["value"][1]))

    def wait_for_scrapes(self, n: int) -> None:
        """Block until the target has been scraped ``n`` more times, successfully."""
        start = self.scrapes()
        deadline = time.monotonic() + SCRAPE_TIMEOUT
        while self.scrapes() < start + n:
            if time.monotonic() > deadline:
                targets = self.api("targets")
                raise AssertionError(f"no scrape of the target: {targets}\n{self.log()}")
            time.sleep(0.2)

    def wait_for_rule_evaluation(self) -> list[dict[str, Any]]:
        """Block until every loaded rule has been evaluated once; return the rules."""
        deadline = time.monotonic() + SCRAPE_TIMEOUT
        while True:
            rules = [r for g in self.api("rules")["groups"] for r in g["rules"]]
            if rules and all(
                r.get("lastEvaluation", "").startswith("2")
                and not r["lastEvaluation"].startswith("0001")
                for r in rules
            ):
                return rules
            if time.monotonic() > deadline:
                raise AssertionError(f"rules never evaluated: {rules}\n{self.log()}")
            time.sleep(0.2)
