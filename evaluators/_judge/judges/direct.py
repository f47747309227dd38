"""The direct path to OpenAI-compatible chat completions: one HTTP client with keep-alive per
judge (and per event loop), the request body as the judge built it, the answer read as JSON.

litellm reaches any provider, and it stays the way to reach them; but for each call it builds
its request, logs, prices and wraps the response in ways the judge never uses, CPU spent while
the call holds a judge slot. For providers that speak the OpenAI chat API (OpenAI itself, vLLM,
llama.cpp, Ollama, LM Studio, any ``openai/<model>`` at an ``api_base``), the judge posts the
same body itself. Retries, repair, negotiation, budgets and cost stay in the
:class:`~spanjudge.evaluators._judge.judges.Judge` engine either way, and both paths share
:mod:`~spanjudge.evaluators._judge.judges.guarded_http` (no redirects, capped answers).

Why a second transport is kept (issue 36 asked for one unless it pays for itself): it does, by
a wide margin. ``benchmarks/judge_cost.py --grid`` on 2026-12-08, a shared 2-CPU Linux machine
(Python 3.11.7, load 8.1 during the run, litellm 1.110.2, aiohttp 3.14.5, httpx 0.29.0), the
scripted judge on loopback, each row in a fresh process (cases/s vs the concurrency bound, CPU
of this process per judge request)::

    latency  slots   litellm                    direct
    0.2 s      8     5.41/s (0.69)  7.97 ms     7.30/s (0.93)  0.82 ms
    0.2 s     32    21.41/s (0.66)  5.97 ms    31.18/s (0.95)  0.47 ms
    0.05 s     8    21.41/s (0.66)  6.51 ms    29.58/s (0.91)  0.65 ms
    0.05 s    32    27.93/s (0.21)  6.54 ms   117.56/s (0.89)  0.55 ms

A bare aiohttp client reaches 0.79-0.97 of the bound at 0.28-0.47 ms a request, so the direct
path is within a few per cent of the machine's ceiling, while litellm's CPU per call caps a
worker at a fifth of its judge concurrency when the judge is fast. The litellm path stays for
every other provider, and for options the OpenAI body cannot carry (``transport="litellm"``).

Async calls go through aiohttp, sync calls through httpx. httpx's async connection pool spends
CPU on every request in proportion to the requests in flight times the open connections (2.4 ms
per request at 8 in flight, 5-7 ms at 32, measured against a loopback server that answers at
once), which capped a worker's judge throughput well below its concurrency bound; aiohttp's pool
costs 0.4-0.7 ms per request at either concurrency (``benchmarks/judge_cost.py --grid`` has the
figures). aiohttp comes with litellm already.

Example::

    transport = DirectTransport("http://127.0.0.1:8000/v1", api_key=None, timeout=30)
    body = transport.complete({"model": "qwen", "messages": [{"role": "user", "content": "hi"}]})
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import logging
import os
import ssl
import sys
import threading
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pydantic_core

if TYPE_CHECKING:
    import aiohttp

from spanjudge.errors import (
    ConfigError,
    JudgeConnectionError,
    JudgeError,
    JudgeRateLimitError,
    JudgeResponseError,
    JudgeServerError,
    JudgeTimeoutError,
    SpanjudgeError,
)
from spanjudge.evaluators._judge.judges.guarded_http import (
    MAX_ANSWER_BYTES,
    ByteBudget,
    check_declared_size,
    env_proxy,
    guarded_client,
    too_large,
)

log = logging.getLogger("spanjudge.judge")


class HTTPFailure(SpanjudgeError):
    """A non-2xx answer: ``status_code``, the server's error text and its Retry-After."""

    def __init__(self, status_code: int, message: str, retry_after: float | None) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.retry_after = retry_after


def _retry_after(headers: Mapping[str, str]) -> float | None:
    value = headers.get("retry-after")
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def _check(status: int, headers: Mapping[str, str], content: bytes) -> dict[str, Any]:
    """The answer's JSON object, or an :class:`HTTPFailure` saying what came back instead."""
    if 300 <= status < 400:
        # never followed: the request carries the key, extra headers and the case text, which
        # must reach only the endpoint configured (a redirect may name any host)
        location = headers.get("location", "")
        raise HTTPFailure(
            status,
            f"HTTP {status}: the judge redirected to {location[:200]!r}; redirects are not "
            "followed (the request carries credentials): set api_base to the judge's own URL",
            None,
        )
    if status >= 300:
        text: object = content.decode("utf-8", "replace")
        try:
            error = json.loads(content).get("error")
            text = error.get("message") if isinstance(error, dict) else str(error)
        except (ValueError, AttributeError):
            pass
        raise HTTPFailure(status, f"HTTP {status}: {str(text)[:1000]}", _retry_after(headers))
    try:
        body = pydantic_core.from_json(content)
    except ValueError as exc:
        shown = content[:200].decode("utf-8", "replace")
        raise HTTPFailure(502, f"the answer is not JSON: {shown}", None) from exc
    if not isinstance(body, dict):
        raise HTTPFailure(502, "the answer is not a JSON object", None)
    return body


class DirectTransport:
    """POST ``{base_url}/chat/completions``; thread-safe, usable from any event loop.

    The sync client is made on first use; an async client is made per event loop on first use in
    it, and closed when that loop shuts its async generators down (``asyncio.run`` does, and so
    does every loop spanjudge runs). A loop closed without that leaves its client to the garbage
    collector, and aiohttp then warns that a session was not closed.
    """

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None,
        timeout: float,
        headers: dict[str, str] | None = None,
        max_connections: int = 64,
        max_answer_bytes: int = MAX_ANSWER_BYTES,
    ) -> None:
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.max_answer_bytes = max_answer_bytes
        self._headers = {"content-type": "application/json", **(headers or {})}
        if api_key:
            self._headers["authorization"] = f"Bearer {api_key}"
        self._timeout_s = timeout
        self._max_connections = max_connections
        self._lock = threading.Lock()
        self._client: httpx.Client | None = None
        self._ssl: ssl.SSLContext | None = None
        # an async client's connections belong to the loop that opened them; each entry holds the
        # client and the async generator that closes it when the loop finalises generators
        self._async: dict[
            asyncio.AbstractEventLoop,
            tuple[aiohttp.ClientSession, AsyncIterator[aiohttp.ClientSession]],
        ] = {}

    def _sync_client(self) -> httpx.Client:
        with self._lock:
            if self._client is None:
                self._client = guarded_client(
                    self.url,
                    timeout=self._timeout_s,
                    max_connections=self._max_connections,
                    limit=self.max_answer_bytes,
                )
            return self._client

    def _ssl_context(self) -> ssl.SSLContext | bool:
        """For an https endpoint, the certificates the sync client (and litellm) trusts:
        ``SSL_CERT_FILE`` or ``SSL_CERT_DIR`` when set, else certifi's bundle; made once."""
        if not self.url.startswith("https:"):
            return True  # aiohttp's default; a plain http endpoint never uses it
        with self._lock:
            if self._ssl is None:
                self._ssl = httpx.create_ssl_context()
            return self._ssl

    async def _async_client(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        entry = self._async.get(loop)
        if entry is not None and not entry[0].closed:
            return entry[0]
        holder = self._hold_session(loop)
        # runs to the generator's first yield without suspending, so no other task of this loop
        # can make a second client meanwhile; the loop now finalises the holder at shutdown
        session = await holder.__anext__()
        with self._lock:
            for old in [other for other in self._async if other.is_closed()]:
                del self._async[old]
            self._async[loop] = (session, holder)
        return session

    async def _hold_session(
        self, loop: asyncio.AbstractEventLoop
    ) -> AsyncIterator[aiohttp.ClientSession]:
        import aiohttp

        session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=self._max_connections, ssl=self._ssl_context()),
            # the whole call, connection included: one timer per request (a timer between two
            # reads is re-armed on every chunk received, a few per cent of the call's CPU)
            timeout=aiohttp.ClientTimeout(total=self._timeout_s),
            # the environment's proxy, as httpx and litellm honour it, looked up once here:
            # aiohttp's trust_env looks it up (and reads ~/.netrc) in a worker thread per request
            proxy=env_proxy(self.url),
        )
        try:
            yield session
        finally:
            with self._lock:
                entry = self._async.get(loop)
                if entry is not None and entry[0] is session:
                    del self._async[loop]
            await session.close()

    def _content(self, body: dict[str, Any]) -> bytes:
        content = pydantic_core.to_json(body)  # a fifth of json.dumps' CPU for a long prompt
        # the request line only: headers carry the key
        log.debug(
            "judge request: POST %s, model %s, %d bytes", self.url, body.get("model"), len(content)
        )
        return content

    def complete(self, body: dict[str, Any]) -> dict[str, Any]:
        content = self._content(body)
        # the guarded client follows no redirect and stops reading at the byte limit
        response = self._sync_client().post(self.url, content=content, headers=self._headers)
        return _check(response.status_code, response.headers, response.content)

    async def a_complete(self, body: dict[str, Any]) -> dict[str, Any]:
        content = self._content(body)
        limit = self.max_answer_bytes
        session = await self._async_client()
        async with session.post(
            # aiohttp follows redirects by default, extra headers and body included
            self.url,
            data=content,
            headers=self._headers,
            allow_redirects=False,
        ) as response:
            check_declared_size(response.headers, limit)
            budget, answer = ByteBudget(limit), bytearray()
            async for chunk in response.content.iter_chunked(65536):
                answer += budget.take(chunk)
            return _check(response.status, response.headers, bytes(answer))

    def close(self) -> None:
        """Close the sync client; async clients close with their event loops."""
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None


# ------------------------------------------------------------------------------ judge glue
# request keys litellm reads itself (never sent in the body), and body options passed through
_CALL_KEYS = frozenset({"timeout", "num_retries", "max_retries", "api_base", "base_url", "api_key"})
BODY_OPTIONS = frozenset(
    {"temperature", "top_p", "seed", "stop", "user", "presence_penalty", "frequency_penalty"}
)
OPENAI_BASE = "https://api.openai.com/v1"


def speaks_openai(model: str, load_litellm: Callable[[], Any]) -> bool:
    if model.startswith("openai/"):
        return True
    if "/" in model:
        return False
    try:
        return bool(load_litellm().get_llm_provider(model)[1] == "openai")
    except Exception:
        return False


def choose_direct(judge: Any, load_litellm: Callable[[], Any]) -> DirectTransport | None:
    """The transport for ``judge`` (a LiteLLMJudge) when it takes the direct path: ``auto`` for a
    provider that speaks the OpenAI chat API and options the body can carry; ``direct`` always
    (options it cannot carry are an error); ``litellm`` never."""
    if judge.transport == "litellm":
        return None
    options = set(judge._kwargs)
    unknown = sorted(options - _CALL_KEYS - BODY_OPTIONS - {"extra_headers"})
    if judge.transport == "direct" and unknown:
        raise ConfigError(
            f"transport='direct' cannot send {', '.join(unknown)}; use transport='litellm'"
        )
    if judge.transport == "auto" and (unknown or not speaks_openai(judge.model_name, load_litellm)):
        return None
    kwargs = judge._kwargs
    return DirectTransport(
        judge.endpoint() or OPENAI_BASE,
        api_key=kwargs.get("api_key") or os.environ.get("OPENAI_API_KEY"),
        timeout=judge.timeout,
        headers=kwargs.get("extra_headers"),
        max_connections=max(judge.max_concurrency, 1) * 2,
    )


def direct_body(request: dict[str, Any]) -> dict[str, Any]:
    """The JSON body for the direct path from the litellm request the judge built."""
    body = {k: v for k, v in request.items() if k not in _CALL_KEYS and k != "extra_headers"}
    model = str(body.get("model", ""))
    body["model"] = model.removeprefix("openai/")
    return body


_PRICES: dict[str, tuple[float, float] | None] = {}
_PRICES_LOCK = threading.Lock()


# the price table litellm ships and reads when LITELLM_LOCAL_MODEL_COST_MAP is set, as spanjudge
# always sets it (no price map is fetched from the internet)
_SHIPPED_PRICES = "model_prices_and_context_window_backup.json"


def price_table(load_litellm: Callable[[], Any]) -> Mapping[str, Any]:
    """litellm's model price table. Once litellm is imported (the litellm path, or the user's own
    ``litellm.register_model`` prices) its live table; before that, the table file litellm ships,
    read without importing litellm: importing it costs seconds of CPU and over 100 MB, which a
    worker whose judge takes only the direct path never needs otherwise."""
    litellm = sys.modules.get("litellm")
    if litellm is None:
        spec = importlib.util.find_spec("litellm")  # finds the package without running it
        for folder in (spec.submodule_search_locations or []) if spec else []:
            shipped = Path(folder) / _SHIPPED_PRICES
            if shipped.is_file():
                table: Mapping[str, Any] = json.loads(shipped.read_bytes())
                return table
        litellm = load_litellm()
    return litellm.model_cost  # type: ignore[no-any-return]


def price(model: str, body: dict[str, Any], load_litellm: Callable[[], Any]) -> float | None:
    """The answer's cost from litellm's price table (looked up once per model), from the usage
    the server reported; None when the model has no price."""
    with _PRICES_LOCK:
        known = model in _PRICES
        rates = _PRICES.get(model)
    if not known:
        rates = None
        try:
            table = price_table(load_litellm)
            entry = table.get(model) or table.get(model.removeprefix("openai/"))
            if entry and entry.get("input_cost_per_token") is not None:
                rates = (
                    float(entry["input_cost_per_token"]),
                    float(entry.get("output_cost_per_token") or 0.0),
                )
        except Exception:
            rates = None
        with _PRICES_LOCK:
            _PRICES[model] = rates
    if rates is None:
        return None
    usage = body.get("usage") or {}
    return rates[0] * int(usage.get("prompt_tokens") or 0) + rates[1] * int(
        usage.get("completion_tokens") or 0
    )


def direct_error(exc: BaseException, message: str) -> JudgeError | None:
    """The judge error for a failure of the direct path (None: not one of its failures)."""
    if too_large(exc):
        return JudgeResponseError(message)
    if isinstance(exc, HTTPFailure):
        status = exc.status_code
        if status == 429:
            return JudgeRateLimitError(message, retry_after=exc.retry_after)
        if status >= 500:
            return JudgeServerError(message, retry_after=exc.retry_after)
        return JudgeError(message)
    # aiohttp's read and connect timeouts are asyncio.TimeoutError (TimeoutError from 3.11)
    if isinstance(exc, (httpx.TimeoutException, asyncio.TimeoutError)):
        return JudgeTimeoutError(message)
    if isinstance(exc, httpx.TransportError) or _is_aiohttp_failure(exc):
        return JudgeConnectionError(message)
    return None


def _is_aiohttp_failure(exc: BaseException) -> bool:
    """aiohttp's connection, protocol and payload errors (it is imported by then, since only
    its calls raise them)."""
    aiohttp = sys.modules.get("aiohttp")
    return aiohttp is not None and isinstance(exc, aiohttp.ClientError)
