"""Running an ASGI app (the OTLP receiver, the worker) with uvicorn: in the foreground, or in a
daemon thread for tests and embedding.

Example::

    with BackgroundServer(create_receiver_app(sink=store.write_spans)) as server:
        httpx.post(f"{server.url}/v1/traces", content=body, headers=headers)
"""

from __future__ import annotations

import threading
import time
from typing import Any


def serve_receiver(app: Any, host: str = "127.0.0.1", port: int = 4318, **kwargs: Any) -> None:
    """Run ``app`` with uvicorn in the foreground (blocks until stopped).

    Binds 127.0.0.1 by default: exposing the receiver is an explicit choice.
    """
    import uvicorn

    kwargs.setdefault("log_level", "warning")
    uvicorn.run(app, host=host, port=port, **kwargs)


class BackgroundServer:
    """Runs an ASGI app with uvicorn in a daemon thread (tests, embedding); ``port=0`` picks a
    free port, read back from ``url``.

    Example::

        with BackgroundServer(app) as server:
            httpx.post(f"{server.url}/v1/traces", ...)
    """

    def __init__(self, app: Any, host: str = "127.0.0.1", port: int = 0) -> None:
        import uvicorn

        config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="off")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True)
        self.host = host
        self.port = port

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self, timeout: float = 10.0) -> BackgroundServer:
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("receiver did not start")
            time.sleep(0.01)
        sockets = self._server.servers[0].sockets
        self.port = int(sockets[0].getsockname()[1])
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)

    def __enter__(self) -> BackgroundServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
