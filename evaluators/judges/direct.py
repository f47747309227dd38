"""The direct path to OpenAI-compatible chat completions: one HTTP client with keep-alive per
judge (and per event loop), the request body as the judge built it, the answer read as JSON.

litellm reaches any provider, and it stays the way to reach them; but for each call it builds
its request, logs, prices and wraps the response in ways the judge never uses, some 10-20 ms of
CPU per call spent while the call holds a judge slot. For providers that speak the OpenAI chat
API (OpenAI itself, vLLM, llama.cpp, Ollama, LM Studio, any ``openai/<model>`` at an
``api_base``), the judge posts the same body itself. Retries, repair, negotiation, budgets and
cost stay in the :class:`~spanjudge.evaluators.judges.Judge` engine either way.

Example::

    transport = DirectTransport("http://127.0.0.1:8000/v1", api_key=None, timeout=30)
    body = transport.complete({"model": "qwen", "messages": [{"role": "user", "content": "hi"}]})
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import weakref
from collections.abc import Callable
from typing import Any

import httpx

from spanjudge.evaluators.judges.base import (
    JudgeConnectionError,
    JudgeError,
    JudgeRateLimitError,
    JudgeServerError,
    JudgeTimeoutError,
)


class HTTPFailure(Exception):
    """A non-2xx answer: ``status_code``, the server's error text and its Retry-After."""

    def __init__(self, status_code: int, message: str, retry_after: float | None) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.retry_after = retry_after


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after")
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def _check(response: httpx.Response) -> dict[str, Any]:
    if response.status_code >= 300:
        try:
            error = response.json().get("error")
            text = error.get("message") if isinstance(error, dict) else str(error)
        except (ValueError, AttributeError):
            text = response.text
        raise HTTPFailure(
            response.status_code,
            f"HTTP {response.status_code}: {str(text)[:1000]}",
            _retry_after(response),
        )
    try:
        body = json.loads(response.content)
    except ValueError as exc:
        raise HTTPFailure(502, f"the answer is not JSON: {response.text[:200]}", None) from exc
    if not isinstance(body, dict):
        raise HTTPFailure(502, "the answer is not a JSON object", None)
    return body


class DirectTransport:
    """POST ``{base_url}/chat/completions``; thread-safe, usable from any event loop."""

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None,
        timeout: float,
        headers: dict[str, str] | None = None,
        max_connections: int = 64,
    ) -> None:
        self.url = base_url.rstrip("/") + "/chat/completions"
        self._headers = {"content-type": "application/json", **(headers or {})}
        if api_key:
            self._headers["authorization"] = f"Bearer {api_key}"
        self._timeout = httpx.Timeout(timeout)
        self._limits = httpx.Limits(
            max_connections=max_connections, max_keepalive_connections=max_connections
        )
        self._lock = threading.Lock()
        self._client: httpx.Client | None = None
        # an AsyncClient's connections belong to the loop that opened them
        self._async: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, httpx.AsyncClient] = (
            weakref.WeakKeyDictionary()
        )

    def _sync_client(self) -> httpx.Client:
        with self._lock:
            if self._client is None:
                self._client = httpx.Client(timeout=self._timeout, limits=self._limits)
            return self._client

    def _async_client(self) -> httpx.AsyncClient:
        loop = asyncio.get_running_loop()
        with self._lock:
            client = self._async.get(loop)
            if client is None:
                client = httpx.AsyncClient(timeout=self._timeout, limits=self._limits)
                self._async[loop] = client
            return client

    def complete(self, body: dict[str, Any]) -> dict[str, Any]:
        content = json.dumps(body).encode()
        response = self._sync_client().post(self.url, content=content, headers=self._headers)
        return _check(response)

    async def a_complete(self, body: dict[str, Any]) -> dict[str, Any]:
        content = json.dumps(body).encode()
        response = await self._async_client().post(self.url, content=content, headers=self._headers)
        return _check(response)

    def close(self) -> None:
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


def _speaks_openai(model: str, load_litellm: Callable[[], Any]) -> bool:
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
        raise ValueError(
            f"transport='direct' cannot send {', '.join(unknown)}; use transport='litellm'"
        )
    if judge.transport == "auto" and (
        unknown or not _speaks_openai(judge.model_name, load_litellm)
    ):
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


def price(model: str, body: dict[str, Any], load_litellm: Callable[[], Any]) -> float | None:
    """The answer's cost from litellm's price table (looked up once per model), from the usage
    the server reported; None when the model has no price."""
    with _PRICES_LOCK:
        known = model in _PRICES
        rates = _PRICES.get(model)
    if not known:
        rates = None
        try:
            table = load_litellm().model_cost
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
    if isinstance(exc, HTTPFailure):
        status = exc.status_code
        if status == 429:
            return JudgeRateLimitError(message, retry_after=exc.retry_after)
        if status >= 500:
            return JudgeServerError(message, retry_after=exc.retry_after)
        return JudgeError(message)
    if isinstance(exc, httpx.TimeoutException):
        return JudgeTimeoutError(message)
    if isinstance(exc, httpx.TransportError):
        return JudgeConnectionError(message)
    return None
