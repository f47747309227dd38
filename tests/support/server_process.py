"""A server the tests start as a child process (Phoenix, MLflow): waited for until its health
route answers 200, its log's tail in the failure when it does not, stopped on exit::

    @dataclass
    class MyServer(ServerProcess):
        HEALTH = "/health"
        NAME = "My server"
"""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import httpx
import pytest

Server = TypeVar("Server", bound="ServerProcess")
# A first start creates the server's database (migrations): 20-45 s on the 2-core machine.
START_TIMEOUT = 180.0


def provided_python(variable: str, name: str, script: str) -> str:
    """The Python of the venv ``script`` (run by `bash scripts/test`) made for ``name``, from
    ``variable``; the test fails, saying how to get it, when there is none."""
    python = os.environ.get(variable)
    if not python or not Path(python).exists():
        pytest.fail(
            f"{name} is not provided ({variable}={python!r}): run `bash scripts/test`, which"
            f" installs {name} in a venv of its own ({script}) and exports {variable}"
        )
    return python


@dataclass
class ServerProcess:
    url: str
    proc: subprocess.Popen[bytes]
    log_path: Path

    HEALTH: ClassVar[str] = "/health"
    NAME: ClassVar[str] = "the server"

    @classmethod
    def launch(
        cls: type[Server], command: list[str], folder: Path, port: int, env: dict[str, str]
    ) -> Server:
        """Start ``command`` in ``folder`` (its output in ``<folder>/server.log``) and wait."""
        log_path = folder / "server.log"
        with log_path.open("wb") as log:
            proc = subprocess.Popen(
                command, cwd=folder, env=env, stdout=log, stderr=subprocess.STDOUT
            )
        server = cls(f"http://127.0.0.1:{port}", proc, log_path)
        server._wait_healthy()
        return server

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            try:
                if httpx.get(self.url + self.HEALTH, timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        self.stop()
        tail = self.log_path.read_text(errors="replace")[-3000:]
        pytest.fail(f"{self.NAME} did not start at {self.url}:\n{tail}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    def send_spans(self, request: Any, **headers: str) -> None:
        """``request`` (an ExportTraceServiceRequest) to the server's OTLP ``/v1/traces``."""
        sent = httpx.post(
            self.url + "/v1/traces",
            content=request.SerializeToString(),
            headers={"Content-Type": "application/x-protobuf", **headers},
            timeout=30,
        )
        assert sent.status_code == 200, sent.text

    def __enter__(self: Server) -> Server:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
