"""An HTTP proxy that forwards each request to a real server and then never answers: what a
worker sees when it is killed after the product wrote a result but before it heard back (the
case that duplicates a write that is not idempotent)::

    with HangingProxy("http://127.0.0.1:6006") as proxy:
        ...  # a worker with phoenix_endpoint = proxy.url writes through it, hears nothing
        assert proxy.forwarded
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx


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
