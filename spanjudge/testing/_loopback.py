"""The HTTP side both scripted servers share: a threaded server on 127.0.0.1, its lifecycle, the
request body read and the answer written. A server subclasses :class:`LoopbackServer` and says
only what a request gets back (:meth:`LoopbackServer.handle`)::

    class Echo(LoopbackServer):
        def handle(self, handler, raw):
            self.send(handler, 200, raw, "application/json")

    with Echo() as server:
        httpx.post(server.base_url + "/chat/completions", content=b"{}")
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypeVar

S = TypeVar("S", bound="LoopbackServer")


class _Server(ThreadingHTTPServer):
    # the default listen backlog (5) resets connections when a judge opens dozens at once
    request_queue_size = 256
    daemon_threads = True


class LoopbackServer:
    """A threaded HTTP server on ``host:port`` (a random port by default) that hands every POST
    to :meth:`handle`; ``base_url`` is its OpenAI-style ``.../v1``."""

    def __init__(self, *, host: str = "127.0.0.1", port: int = 0) -> None:
        self._stopping = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # headers and body leave in two writes: with Nagle on, the body waits for the
            # client's delayed ACK, 40 ms added to every answer on Linux
            disable_nagle_algorithm = True

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0) or 0)
                server.handle(self, self.rfile.read(length))

            def log_message(self, *args: Any) -> None:
                pass

        self._httpd = _Server((host, port), Handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._started = False

    def handle(self, handler: BaseHTTPRequestHandler, raw: bytes) -> None:
        """Answer one POST whose body is ``raw`` (with :meth:`send`)."""
        raise NotImplementedError

    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def start(self: S) -> S:
        if not self._started:
            self._thread.start()
            self._started = True
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._started:
            self._httpd.shutdown()
        self._httpd.server_close()

    def serve_until_stopped(self) -> None:
        """Block until :meth:`stop` (from another thread) or the process is interrupted."""
        self.start()
        self._thread.join()

    def __enter__(self: S) -> S:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @staticmethod
    def send(
        handler: BaseHTTPRequestHandler,
        status: int,
        data: bytes,
        content_type: str = "application/json",
        headers: dict[str, str] | None = None,
    ) -> None:
        """Write one answer; a client that went away (timed out) is not an error."""
        try:
            handler.send_response(status)
            handler.send_header("Content-Type", content_type)
            handler.send_header("Content-Length", str(len(data)))
            for key, value in (headers or {}).items():
                handler.send_header(key, value)
            handler.end_headers()
            handler.wfile.write(data)
        except OSError:
            pass
