"""An HTTP proxy that forwards each request to a real server and then never answers: what a
worker sees when it is killed after the product wrote a result but before it heard back (the
case that duplicates a write that is not idempotent)::

    with HangingProxy("http://127.0.0.1:6006") as proxy:
        ...  # a worker with phoenix_endpoint = proxy.url writes through it, hears nothing
        assert proxy.forwarded

:func:`deliver_across_a_kill` runs that with two workers on one store.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx

from spanjudge._core.span_record import EvaluationRecord


class HangingProxy:
    def __init__(self, target: str, hold_seconds: float = 120.0) -> None:
        self.target = target.rstrip("/")
        self.forwarded: list[tuple[str, str, int]] = []  # method, path, the server's status
        self._release = threading.Event()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def _forward(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                headers = {
                    k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")
                }
                answer = httpx.request(
                    self.command, proxy.target + self.path, content=body, headers=headers,
                    timeout=30,
                )  # fmt: skip
                proxy.forwarded.append((self.command, self.path, answer.status_code))
                if self.command == "GET":  # reads are answered: only writes hang
                    self.send_response(answer.status_code)
                    self.send_header("Content-Type", answer.headers.get("content-type", ""))
                    self.send_header("Content-Length", str(len(answer.content)))
                    self.end_headers()
                    self.wfile.write(answer.content)
                    return
                proxy._release.wait(hold_seconds)  # written upstream; the client hears nothing

            do_GET = do_POST = _forward

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def writes(self) -> int:
        return sum(1 for method, _, status in self.forwarded if method == "POST" and status < 300)

    def __enter__(self) -> HangingProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self._release.set()
        self.server.shutdown()
        self.server.server_close()


def wait_until(done: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"not in {timeout} s: {what}")
        time.sleep(0.3)


def deliver_across_a_kill(
    start_worker: Callable[..., Any],
    base: dict[str, Any],
    sink: str,
    product_url: str,
    app_request: Any,
    evaluations: int,
    before_stop: Callable[[Any, list[EvaluationRecord]], None] | None = None,
) -> tuple[list[EvaluationRecord], int]:
    """A worker (``base`` config with outputs span and ``sink``) whose sink writes through a
    :class:`HangingProxy` to ``product_url`` is killed once the product wrote its first write
    (unanswered); a second worker on the same store writes to the product directly until every
    one of ``evaluations`` results is evaluated and delivered. Returns the results and how
    many writes the first worker made; the second must exit 0 with no ERROR or refusal logged.
    ``before_stop(second worker, results)`` runs while the second worker still serves."""
    from spanjudge._store import open_store

    # a short lease: the first worker's jobs and unconfirmed results are taken over at once
    config = {**base, "outputs": ["span", sink], "lease_seconds": 1.0}

    with HangingProxy(product_url) as proxy:
        first = start_worker({**config, f"{sink}_endpoint": proxy.url}, name="first")
        first.wait_ready()
        assert first.post(app_request).status_code == 200
        wait_until(lambda: proxy.writes() >= 1, 60, f"a first {sink} write")
        first.kill()
        written = proxy.writes()
    second = start_worker({**config, f"{sink}_endpoint": product_url}, name="second")
    second.wait_ready()
    store = open_store(config["store_url"])
    try:
        wait_until(
            lambda: (
                len(store.results()) == evaluations
                # the span output's mark is set once the span and the sink took the result
                and not store.unemitted_results(outputs=["span"])
            ),
            120,
            "every result evaluated and delivered",
        )
        results = store.results()
    finally:
        store.close()
    if before_stop is not None:
        before_stop(second, results)
    assert second.terminate() == 0
    log = second.log()
    assert " ERROR " not in log and "refused" not in log, log
    return results, written
