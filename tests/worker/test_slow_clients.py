"""Slow clients cannot take the receiver away (issue 41): unfinished request headers and
trickled bodies, more of them than the worker has file descriptors, while /healthz and
/v1/traces keep answering and the log stays quiet."""

from __future__ import annotations

import resource
import select
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from spanjudge._demo.judge import start_offline_judge
from tests.support.otlp_sink import OtlpSink
from tests.worker.conftest import base_config

OPEN_FILES = 128  # the worker's limit: its connection cap is half of it
SLOW_HEADERS = 150  # more than the limit
SLOW_BODIES = 10


def _connect(port: int, data: bytes) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    sock.sendall(data)
    return sock


def _closed_or_answered(sockets: list[socket.socket], within: float) -> dict[str, int]:
    """How many of ``sockets`` the server closed (EOF or reset) or answered with a status
    line, within ``within`` seconds."""
    outcome = {"closed": 0, "answered": 0, "open": 0}
    waiting = set(sockets)
    answers: dict[socket.socket, bytes] = {}
    deadline = time.monotonic() + within
    while waiting and time.monotonic() < deadline:
        ready, _, _ = select.select(list(waiting), [], [], 0.2)
        for sock in ready:
            try:
                data = sock.recv(4096)
            except OSError:
                data = b""
            if data:
                answers[sock] = answers.get(sock, b"") + data
                continue
            waiting.discard(sock)
            outcome["answered" if sock in answers else "closed"] += 1
    outcome["open"] = len(waiting)
    return outcome


def test_slow_headers_and_bodies_beyond_the_file_limit_leave_the_receiver_available(
    tmp_path: Path, demo_request: Any, start_worker: Any
) -> None:
    judge = start_offline_judge()
    held: list[socket.socket] = []
    try:
        with OtlpSink() as sink:
            config = base_config(judge, f"sqlite:///{tmp_path / 'w.db'}", sink.endpoint)
            config.update(receiver_header_timeout_seconds=2, receiver_body_timeout_seconds=2)
            worker = start_worker(config)
            _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
            resource.prlimit(worker.proc.pid, resource.RLIMIT_NOFILE, (OPEN_FILES, hard))
            worker.wait_ready()

            body_head = (
                b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf"
                b"\r\nContent-Length: 100000\r\n\r\n" + b"\x0a" * 10
            )
            head = b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nX-Slow: "
            # in parallel, as an attacker would: a connect the full listen queue drops waits
            # for the kernel's SYN retry (1 s), in many threads at once rather than in turn
            with ThreadPoolExecutor(32) as pool:
                bodies = list(
                    pool.map(lambda _: _connect(worker.port, body_head), range(SLOW_BODIES))
                )
                headers = list(pool.map(lambda _: _connect(worker.port, head), range(SLOW_HEADERS)))
            held = bodies + headers

            # probes and exporters are answered meanwhile, every time
            for _ in range(5):
                assert httpx.get(worker.url + "/healthz", timeout=3).status_code == 200
            assert worker.post(demo_request).status_code == 200

            # trickled bodies get 408 once their deadline passed; unfinished headers are
            # closed (after the header timeout, or earlier to make room)
            bodies_outcome = _closed_or_answered(bodies, within=10)
            assert bodies_outcome["answered"] == SLOW_BODIES, bodies_outcome
            headers_outcome = _closed_or_answered(headers, within=10)
            assert headers_outcome["open"] == 0, headers_outcome
            assert httpx.get(worker.url + "/healthz", timeout=3).status_code == 200

            worker.terminate(timeout=30)
            log = worker.log()
            assert "Too many open files" not in log, log[-3000:]
            assert "Traceback" not in log, log[-3000:]
            assert len(log) < 20_000, log[-3000:]
            assert "closed without their request headers" in log
    finally:
        for sock in held:
            sock.close()
        judge.stop()


def test_a_trickled_body_is_answered_408(tmp_path: Path, start_worker: Any) -> None:
    judge = start_offline_judge()
    try:
        config = base_config(judge, f"sqlite:///{tmp_path / 'w.db'}", "http://127.0.0.1:9")
        config["receiver_body_timeout_seconds"] = 1
        worker = start_worker(config)
        worker.wait_ready()
        sock = _connect(
            worker.port,
            b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: 1000\r\n\r\n{",
        )
        try:
            sock.settimeout(10)
            answer = b""
            while b"\r\n\r\n" not in answer:
                chunk = sock.recv(4096)
                if not chunk:
                    break
                answer += chunk
            assert answer.startswith(b"HTTP/1.1 408"), answer
            assert b"not received within 1 s" in answer + sock.recv(4096)
        finally:
            sock.close()
    finally:
        judge.stop()
