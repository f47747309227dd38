"""What every judge HTTP client does, on either path: it follows no redirect, and it reads at most
:data:`MAX_ANSWER_BYTES` of an answer.

A judge request carries the key (``Authorization``), the ``extra_headers`` a user configured
(``api-key``...) and the case text. httpx drops ``Authorization`` on a redirect to another
origin but re-sends every other header and the body; aiohttp and the OpenAI SDK's clients follow
redirects by default. So a redirect is never followed: the call fails with the status and the
``Location`` named, and the user points ``api_base`` at the judge itself. An answer is read as it
arrives and the call fails once it passes the limit (or at once when ``Content-Length`` says it
would), so a judge answering megabytes costs no more memory than the limit.

The direct path builds its sync client here and applies the same two rules to its aiohttp
session; the litellm path hands litellm OpenAI SDK clients built on these httpx clients for
``openai`` models (litellm's own clients for other providers keep their defaults)::

    client = guarded_client(url, timeout=30, max_connections=16)
    client.post(url, content=body)   # a 307 comes back as a 307; a 10 MB answer raises
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Mapping
from urllib.parse import urlsplit
from urllib.request import getproxies, proxy_bypass

import httpx

from spanjudge.errors import SpanjudgeError

MAX_ANSWER_BYTES = 4 * 1024 * 1024
"""The largest judge answer (HTTP body) read: a verdict with the log-probabilities of every token
is some kilobytes; beyond this the call fails (a :class:`JudgeResponseError`), unread."""


class AnswerTooLarge(SpanjudgeError):
    """The judge's answer is over the byte limit (read no further)."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"the judge's answer is over {limit:,} bytes; it was not read")


def check_declared_size(headers: Mapping[str, str], limit: int) -> None:
    """Fail before reading when the answer says it is over ``limit`` bytes."""
    declared = headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise AnswerTooLarge(limit)


def too_large(exc: BaseException | None) -> bool:
    """Whether ``exc`` or anything it was raised from is an :class:`AnswerTooLarge` (the OpenAI
    SDK and litellm wrap what the transport raised in errors of their own)."""
    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, AnswerTooLarge):
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


class ByteBudget:
    """Counts an answer's bytes as they arrive; :meth:`take` raises :class:`AnswerTooLarge`
    at the first chunk past ``limit`` (so nothing past it is held)."""

    def __init__(self, limit: int) -> None:
        self.limit, self.read = limit, 0

    def take(self, chunk: bytes) -> bytes:
        self.read += len(chunk)
        if self.read > self.limit:
            raise AnswerTooLarge(self.limit)
        return chunk


class _Capped(httpx.SyncByteStream):
    def __init__(self, inner: httpx.SyncByteStream, limit: int) -> None:
        self._inner, self._limit = inner, limit

    def __iter__(self) -> Iterator[bytes]:
        budget = ByteBudget(self._limit)
        for chunk in self._inner:
            yield budget.take(chunk)

    def close(self) -> None:
        self._inner.close()


class _AsyncCapped(httpx.AsyncByteStream):
    def __init__(self, inner: httpx.AsyncByteStream, limit: int) -> None:
        self._inner, self._limit = inner, limit

    async def __aiter__(self) -> AsyncIterator[bytes]:
        budget = ByteBudget(self._limit)
        async for chunk in self._inner:
            yield budget.take(chunk)

    async def aclose(self) -> None:
        await self._inner.aclose()


class _CappedTransport(httpx.BaseTransport):
    def __init__(self, inner: httpx.BaseTransport, limit: int) -> None:
        self._inner, self._limit = inner, limit

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self._inner.handle_request(request)
        try:
            check_declared_size(response.headers, self._limit)
        except AnswerTooLarge:
            response.close()
            raise
        assert isinstance(response.stream, httpx.SyncByteStream)
        response.stream = _Capped(response.stream, self._limit)
        return response

    def close(self) -> None:
        self._inner.close()


class _AsyncCappedTransport(httpx.AsyncBaseTransport):
    def __init__(self, inner: httpx.AsyncBaseTransport, limit: int) -> None:
        self._inner, self._limit = inner, limit

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self._inner.handle_async_request(request)
        try:
            check_declared_size(response.headers, self._limit)
        except AnswerTooLarge:
            await response.aclose()
            raise
        assert isinstance(response.stream, httpx.AsyncByteStream)
        response.stream = _AsyncCapped(response.stream, self._limit)
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()


def env_proxy(url: str) -> str | None:
    """The proxy that ``HTTP_PROXY``/``HTTPS_PROXY``/``ALL_PROXY`` name for ``url``, unless
    ``NO_PROXY`` exempts its host."""
    parts = urlsplit(url)
    if parts.hostname and proxy_bypass(parts.hostname):
        return None
    proxies = getproxies()
    return proxies.get(parts.scheme) or proxies.get("all")


def _limits(max_connections: int) -> httpx.Limits:
    return httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections)


# The environment's proxy and certificates (SSL_CERT_FILE/SSL_CERT_DIR, else certifi), as a
# default httpx client takes them, are given to the transport: the clients are told not to look
# themselves (trust_env=False), which would route proxied calls around the capped transport.


def guarded_client(
    url: str, *, timeout: float, max_connections: int, limit: int = MAX_ANSWER_BYTES
) -> httpx.Client:
    """A sync httpx client for ``url`` that follows no redirect and reads at most ``limit``
    bytes of an answer."""
    inner = httpx.HTTPTransport(
        limits=_limits(max_connections), proxy=env_proxy(url), verify=httpx.create_ssl_context()
    )
    return httpx.Client(
        timeout=httpx.Timeout(timeout),
        follow_redirects=False,
        trust_env=False,
        transport=_CappedTransport(inner, limit),
    )


def guarded_async_client(
    url: str, *, timeout: float, max_connections: int, limit: int = MAX_ANSWER_BYTES
) -> httpx.AsyncClient:
    """:func:`guarded_client` for async calls (bound to the event loop that first uses it)."""
    inner = httpx.AsyncHTTPTransport(
        limits=_limits(max_connections), proxy=env_proxy(url), verify=httpx.create_ssl_context()
    )
    return httpx.AsyncClient(
        timeout=httpx.Timeout(timeout),
        follow_redirects=False,
        trust_env=False,
        transport=_AsyncCappedTransport(inner, limit),
    )
