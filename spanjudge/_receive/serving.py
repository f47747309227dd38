"""Running an ASGI app (the OTLP receiver, the worker) with uvicorn: in the foreground, or in a
daemon thread for tests and embedding, with the connection limits that keep it answering.

A slow client must not cost the receiver its availability. uvicorn bounds a request's header
size (h11's ``max_incomplete_event_size``) and an idle keep-alive connection
(``timeout_keep_alive``), but not how long a client may take to send its headers or its body,
and it accepts connections until the process runs out of file descriptors: 1,100 unfinished
request headers on a worker limited to 1,024 open files left ``/healthz`` unanswered for as
long as they stayed open, and asyncio logged a "Too many open files" traceback on each failed
``accept`` (122 MB of log in 35 s). With :class:`ConnectionLimits`:

* a connection has ``header_timeout_seconds`` to send its request headers (again after each
  response, on a kept-alive connection); then it is closed (:class:`GuardedH11Protocol`);
* at most ``max_connections`` are open, and never more than half the process's open-file limit
  (:func:`connection_cap`). A connection beyond that closes the one that has waited longest for
  its headers, so slow clients cannot crowd out a probe or an exporter; when every connection
  has a request in progress, the new one is answered 503 with ``Retry-After`` and closed;
* a request has ``body_timeout_seconds`` to send its body, then gets 408 (:class:`BodyDeadline`,
  read by :func:`~spanjudge._receive.http.read_limited`);
* asyncio's accept loop takes at most a few dozen connections at once (``backlog``), so a burst
  is counted before it can take every descriptor, and the "out of system resource" error it
  logs should that happen anyway is said once a minute (:func:`quiet_accept_errors`).

uvicorn's ``limit_concurrency`` is not used: it counts connections only once their headers
are in, so it cannot bound descriptors held by clients that never finish them.

Example::

    with BackgroundServer(create_receiver_app(sink=store.write_spans)) as server:
        httpx.post(f"{server.url}/v1/traces", content=body, headers=headers)
"""

from __future__ import annotations

import asyncio
import logging
import resource
import threading
import time
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = [
    "BODY_TIMED_OUT",
    "BackgroundServer",
    "BodyDeadline",
    "ConnectionLimits",
    "GuardedH11Protocol",
    "connection_cap",
    "quiet_accept_errors",
    "serve_receiver",
    "uvicorn_config",
]

logger = logging.getLogger("spanjudge.receiver")

# The scope key BodyDeadline sets when a request's body did not arrive in time.
BODY_TIMED_OUT = "spanjudge.body_timeout_seconds"
# Seconds between two log lines about closed or refused connections.
_SAY_EVERY = 60.0
# h11's own default for the largest request head (start line and headers).
_MAX_HEADER_BYTES = 16 * 1024

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


def connection_cap(wanted: int) -> int:
    """``wanted``, but at most half the process's soft open-file limit: the store, the judge's
    and the exporters' sockets and a burst being accepted need the other half."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft <= 0:
        return max(1, wanted)
    return max(1, min(wanted, soft // 2))


@dataclass
class _Tally:
    """Connections closed for taking too long, evicted or refused since the last log line."""

    timed_out: int = 0
    evicted: int = 0
    refused: int = 0
    said_at: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def count(self, what: str, limits: ConnectionLimits) -> None:
        with self.lock:
            setattr(self, what, getattr(self, what) + 1)
            now = time.monotonic()
            if now - self.said_at < _SAY_EVERY:
                return
            self.said_at = now
            timed_out, evicted, refused = self.timed_out, self.evicted, self.refused
            self.timed_out = self.evicted = self.refused = 0
        logger.warning(
            "receiver: %d connection(s) closed without their request headers after %g s, %d "
            "closed to make room and %d refused with 503 at the cap of %d connections "
            "(said at most once a minute)",
            timed_out,
            limits.header_timeout_seconds,
            evicted,
            refused,
            limits.max_connections,
        )


@dataclass(frozen=True)
class ConnectionLimits:
    """How long a client may take and how many connections are open at once; the worker's
    values are its settings of the same names (``receiver_*``, :mod:`spanjudge.settings`).
    ``max_connections`` is used as given: pass it through :func:`connection_cap`."""

    max_connections: int
    header_timeout_seconds: float
    body_timeout_seconds: float
    keep_alive_seconds: int = 5  # uvicorn's default
    tally: _Tally = field(default_factory=_Tally, compare=False, repr=False)

    @property
    def backlog(self) -> int:
        """Connections asyncio accepts in one go (and the listen queue's length)."""
        return max(16, min(2048, self.max_connections // 4))


_REFUSAL_BODY = b'{"code": 14, "message": "too many connections; retry later"}'
_REFUSAL = (
    b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Type: application/json\r\n"
    b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(_REFUSAL_BODY), _REFUSAL_BODY)
)


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a deadline for request headers and a connection cap (see
    the module docstring); :func:`uvicorn_config` makes a subclass with its ``limits``."""

    limits: ClassVar[ConnectionLimits]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._header_deadline: asyncio.TimerHandle | None = None
        self._waiting_since = 0.0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self.limits.max_connections:
            victim = self._longest_waiting()
            if victim is None:
                self.limits.tally.count("refused", self.limits)
                transport.write(_REFUSAL)
                transport.close()
                return
            self.limits.tally.count("evicted", self.limits)
            victim._close()
        self._await_headers()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_waiting()
        super().connection_lost(exc)

    def handle_events(self) -> None:
        super().handle_events()
        if not self._waiting():
            self._stop_waiting()  # a request is in: the body has its own deadline

    def on_response_complete(self) -> None:
        super().on_response_complete()  # may start a pipelined request
        if self._waiting() and not self.transport.is_closing():
            self._await_headers()

    # ------------------------------------------------------------------ internals
    def _waiting(self) -> bool:
        """No request in progress: before the first one, or between two."""
        return self.cycle is None or self.cycle.response_complete

    def _await_headers(self) -> None:
        self._stop_waiting()
        self._waiting_since = self.loop.time()
        self._header_deadline = self.loop.call_later(
            self.limits.header_timeout_seconds, self._headers_late
        )

    def _stop_waiting(self) -> None:
        if self._header_deadline is not None:
            self._header_deadline.cancel()
            self._header_deadline = None

    def _headers_late(self) -> None:
        self._header_deadline = None
        if self._waiting() and not self.transport.is_closing():
            self.limits.tally.count("timed_out", self.limits)
            self._close()

    def _close(self) -> None:
        self._stop_waiting()
        self.transport.close()

    def _longest_waiting(self) -> GuardedH11Protocol | None:
        oldest: GuardedH11Protocol | None = None
        for other in self.connections:
            if (
                other is not self
                and isinstance(other, GuardedH11Protocol)
                and other._header_deadline is not None
                and (oldest is None or other._waiting_since < oldest._waiting_since)
            ):
                oldest = other
        return oldest


class BodyDeadline:
    """ASGI middleware: a request's body must have arrived ``seconds`` after the request
    started. Past that, the app's next ``receive()`` gets ``http.disconnect`` and the scope says
    why (:data:`BODY_TIMED_OUT`), which :func:`~spanjudge._receive.http.read_limited` answers with
    408."""

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]], seconds: float):
        self.app = app
        self.seconds = seconds

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.seconds
        complete = False

        async def timed_receive() -> Message:
            nonlocal complete
            if complete:
                return await receive()
            try:
                message = await asyncio.wait_for(receive(), max(0.0, deadline - loop.time()))
            except TimeoutError:
                scope[BODY_TIMED_OUT] = self.seconds
                return {"type": "http.disconnect"}
            complete = message["type"] != "http.request" or not message.get("more_body", False)
            return message

        await self.app(scope, timed_receive, send)


def quiet_accept_errors(loop: asyncio.AbstractEventLoop) -> None:
    """Say asyncio's "socket.accept() out of system resource" (a full descriptor table) once
    a minute instead of once per failed accept; other loop errors are logged as before."""
    said_at = [-_SAY_EVERY]
    skipped = [0]

    def handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if "out of system resource" not in str(context.get("message", "")):
            loop.default_exception_handler(context)
            return
        now = time.monotonic()
        if now - said_at[0] < _SAY_EVERY:
            skipped[0] += 1
            return
        said_at[0] = now
        logger.error(
            "receiver: cannot accept connections: %s (%d more since the last line); lower "
            "receiver_max_connections or raise the open-file limit",
            context.get("exception"),
            skipped[0],
        )
        skipped[0] = 0

    loop.set_exception_handler(handler)


def uvicorn_config(app: Any, *, limits: ConnectionLimits | None = None, **kwargs: Any) -> Any:
    """A ``uvicorn.Config`` for ``app``; with ``limits``, the guarded protocol, the body
    deadline and their keep-alive and backlog."""
    import uvicorn

    kwargs.setdefault("log_level", "warning")
    kwargs.setdefault("lifespan", "off")
    if limits is None:
        return uvicorn.Config(app, **kwargs)
    protocol = type("ReceiverProtocol", (GuardedH11Protocol,), {"limits": limits})
    return uvicorn.Config(
        BodyDeadline(app, limits.body_timeout_seconds),
        http=protocol,
        timeout_keep_alive=limits.keep_alive_seconds,
        h11_max_incomplete_event_size=_MAX_HEADER_BYTES,
        backlog=limits.backlog,
        **kwargs,
    )


async def serve_sockets(server: Any, sockets: Any = None, *, signals: bool = True) -> None:
    """Run a ``uvicorn.Server`` on the running loop (bound ``sockets``, or its config's);
    ``signals=False`` leaves SIGTERM and SIGINT to the caller (the worker's own handlers)."""
    quiet_accept_errors(asyncio.get_running_loop())
    if signals:
        await server.serve(sockets)
    else:
        await server._serve(sockets)


def serve_receiver(
    app: Any,
    host: str = "127.0.0.1",
    port: int = 4318,
    *,
    limits: ConnectionLimits | None = None,
    **kwargs: Any,
) -> None:
    """Run ``app`` with uvicorn in the foreground (blocks until stopped).

    Binds 127.0.0.1 by default: exposing the receiver is an explicit choice. ``limits``: the
    connection limits above (the worker always passes its settings').
    """
    import uvicorn

    server = uvicorn.Server(uvicorn_config(app, host=host, port=port, limits=limits, **kwargs))
    asyncio.run(serve_sockets(server))


class BackgroundServer:
    """Runs an ASGI app with uvicorn in a daemon thread (tests, embedding); ``port=0`` picks a
    free port, read back from ``url``.

    Example::

        with BackgroundServer(app) as server:
            httpx.post(f"{server.url}/v1/traces", ...)
    """

    def __init__(
        self,
        app: Any,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        limits: ConnectionLimits | None = None,
    ) -> None:
        import uvicorn

        self._server = uvicorn.Server(uvicorn_config(app, host=host, port=port, limits=limits))
        self._thread = threading.Thread(
            target=lambda: asyncio.run(serve_sockets(self._server)), daemon=True
        )
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
