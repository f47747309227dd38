"""Any litellm model as a judge: hosted (``gpt-4o``, ``anthropic/...``) or OpenAI-compatible
(``openai/<name>`` with ``api_base``: vLLM, llama.cpp, Ollama, LM Studio...). litellm is imported
on the first call, never before.

::

    judge = LiteLLMJudge("gpt-4o-mini", timeout=30)
    local = LiteLLMJudge("openai/smollm2", api_base="http://127.0.0.1:8080/v1")
    metric = FaithfulnessMetric(model=judge)
"""

from __future__ import annotations

import copy
import logging
import os
from typing import Any

from pydantic import BaseModel

from spanjudge.errors import (
    ConfigError,
    JudgeConnectionError,
    JudgeError,
    JudgeRateLimitError,
    JudgeServerError,
    JudgeTimeoutError,
)
from spanjudge.evaluators._judge.judges.base import (
    Completion,
    Judge,
    Messages,
    Usage,
    call_options,
)
from spanjudge.evaluators._judge.judges.direct import (
    OPENAI_BASE,
    choose_direct,
    direct_body,
    direct_error,
    price,
    speaks_openai,
)
from spanjudge.evaluators._judge.judges.guarded_http import guarded_async_client, guarded_client
from spanjudge.evaluators._judge.judges.openai_format import (
    answer_text,
    field,
    first_choice,
    read_logprobs,
    token_usage,
)
from spanjudge.evaluators._judge.judges.structured import (
    NEGOTIATOR,
    pick_form,
    refuses,
    refuses_logprobs,
    request_fields,
)

log = logging.getLogger("spanjudge.judge")

SELF_HOSTED_MAX_TOKENS = 2048
DEFAULT_TRANSPORT = "auto"
"""The transport of judges built without one (tests run the engine over both paths)."""

_litellm: Any = None


def _load_litellm() -> Any:
    global _litellm
    if _litellm is None:
        # never fetch the price map from the internet; the bundled copy prices known models
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        import litellm

        litellm.suppress_debug_info = True
        litellm.telemetry = False
        _litellm = litellm
    return _litellm


def _retry_after(exc: BaseException) -> float | None:
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    if not headers:
        return None
    value = headers.get("retry-after")
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def _redact(text: str, secrets: list[str]) -> str:
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, "***")
    return text


# The default judge, here once: resolve_judge(None), LiteLLMJudge() and the worker's
# `judge_model` setting (spanjudge/settings.py) all read it.
DEFAULT_MODEL = "gpt-4o"


class LiteLLMJudge(Judge):
    """A judge calling ``litellm.completion`` / ``acompletion``.

    Retries (rate limits with Retry-After, timeouts, connection errors, 5xx) are ours, so litellm
    and the OpenAI client are told not to retry. ``structured_output`` picks how JSON is asked
    for: ``"auto"`` (the default) negotiates per endpoint and model, from ``json_schema`` down to
    ``json_object`` + schema, tool calling and the plain prompt, moving on when a form is refused
    (see :mod:`~spanjudge.evaluators._judge.judges.structured`); a form name pins it. Models litellm
    knows without schema support start at the plain prompt, as before. Cost comes from litellm's
    price table; a model it has no price for costs 0 with its tokens counted, and the usage says
    so (``unpriced_calls``).

    A self-hosted judge: ``api_base`` is the server's OpenAI-compatible URL; ``api_key_env`` names
    the environment variable holding its key (the key itself is never logged or shown). An
    ``openai/`` model served from ``api_base`` with no key anywhere gets a placeholder key, since
    the OpenAI client insists on one and local servers ignore it. Calls to an endpoint of your
    own ask for at most ``max_output_tokens`` (default 2,048; hosted models: no limit unless set),
    and an answer cut there is reported as such. ``transport="auto"`` (the default) posts to
    providers that speak the OpenAI chat API itself, with one keep-alive HTTP client (see
    :mod:`~spanjudge.evaluators._judge.judges.direct`), and uses litellm for every other provider;
    ``"litellm"`` always uses litellm::

        LiteLLMJudge("openai/qwen2.5-7b", api_base="http://127.0.0.1:8000/v1",
                     api_key_env="VLLM_API_KEY")
    """

    def __init__(
        self,
        model: str = DEFAULT_MODEL,
        *,
        timeout: float = 60.0,
        max_retries: int = 4,
        max_output_attempts: int = 3,
        max_concurrency: int = 8,
        backoff_base: float = 0.5,
        max_backoff: float = 20.0,
        structured_output: str | bool | None = "auto",
        api_key_env: str | None = None,
        max_output_tokens: int | None = None,
        transport: str | None = None,
        **litellm_kwargs: Any,
    ) -> None:
        super().__init__(
            max_retries=max_retries,
            max_output_attempts=max_output_attempts,
            max_concurrency=max_concurrency,
            backoff_base=backoff_base,
            max_backoff=max_backoff,
        )
        if not isinstance(model, str) or not model:
            raise ConfigError("LiteLLMJudge(model=...) needs a litellm model string")
        self.model_name = model
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
            raise ConfigError(
                f"LiteLLMJudge(timeout=...) must be a positive number, got {timeout!r}"
            )
        self.timeout = timeout
        if max_output_tokens is not None and max_output_tokens < 1:
            raise ConfigError(f"max_output_tokens must be >= 1, got {max_output_tokens!r}")
        self.max_output_tokens = max_output_tokens
        transport = transport or DEFAULT_TRANSPORT
        if transport not in ("auto", "litellm", "direct"):
            raise ConfigError(f"transport must be auto, litellm or direct, got {transport!r}")
        self.transport = transport
        self._direct: Any = None  # DirectTransport, or False once the litellm path is chosen
        self._openai_provider: bool | None = None  # litellm path: an openai model (decided once)
        self._sync_sdk: Any = None  # litellm path, openai models: the OpenAI SDK client
        self.structured_output = pick_form(structured_output)
        if api_key_env:
            key = os.environ.get(api_key_env)
            if not key:
                raise ConfigError(
                    f"api_key_env={api_key_env!r}: that environment variable is not set or empty"
                )
            litellm_kwargs["api_key"] = key
        elif (
            model.startswith("openai/")
            and (litellm_kwargs.get("api_base") or litellm_kwargs.get("base_url"))
            and not litellm_kwargs.get("api_key")
            and not os.environ.get("OPENAI_API_KEY")
        ):
            litellm_kwargs["api_key"] = "no-key-self-hosted"
        self._kwargs = litellm_kwargs
        self._secrets = [str(v) for k, v in litellm_kwargs.items() if "key" in k.lower() and v]

    def __repr__(self) -> str:  # never show api keys
        return f"LiteLLMJudge(model={self.model_name!r})"

    def endpoint(self) -> str:
        """Where the calls go: ``api_base``, else the OpenAI base URL from the environment for
        ``openai/`` models, else "" (the provider's own endpoint)."""
        explicit = self._kwargs.get("api_base") or self._kwargs.get("base_url")
        if explicit:
            return str(explicit)
        if self.model_name.startswith("openai/"):
            return os.environ.get("OPENAI_API_BASE") or os.environ.get("OPENAI_BASE_URL") or ""
        return ""

    def output_limit(self) -> int | None:
        """``max_tokens`` sent: ``max_output_tokens``, else 2,048 for a server of your own, else
        none. A self-hosted server that lets a small model run on until its context is full
        holds its only slot for minutes, long after the judge's timeout gave up on the call."""
        if self.max_output_tokens is not None:
            return self.max_output_tokens
        return SELF_HOSTED_MAX_TOKENS if self.endpoint() else None

    def _start_form(self) -> str:
        """The first form to try in auto mode: a schema for any endpoint of the user's own and
        any model litellm does not know; the prompt for a known model without schema support."""
        if self.endpoint():
            return "json_schema"
        litellm = _load_litellm()
        try:
            litellm.get_model_info(self.model_name)
        except Exception:
            return "json_schema"  # unknown model: ask, and step down if refused
        try:
            known = bool(litellm.supports_response_schema(model=self.model_name))
        except Exception:
            known = False
        return "json_schema" if known else "prompt"

    def _request(
        self, messages: Messages, schema: type[BaseModel], form: str, top_logprobs: int
    ) -> dict[str, Any]:
        request: dict[str, Any] = {
            "model": self.model_name,
            "messages": messages,
            "timeout": self.timeout,
            "num_retries": 0,
            "max_retries": 0,
            **self._kwargs,
        }
        fields = request_fields(form, schema)
        # litellm may rewrite response_format/tools per provider; the cached fields stay intact
        request.update(fields if self._direct_transport() else copy.deepcopy(fields))
        limit = self.output_limit()
        if limit is not None and "max_tokens" not in request:
            request["max_tokens"] = limit
        if top_logprobs > 0:
            request["logprobs"] = True
            request["top_logprobs"] = top_logprobs
        return request

    def _plan(self) -> tuple[tuple[str, str], str, int]:
        """(negotiation key, form, top_logprobs) for the next request."""
        if self.structured_output == "auto":
            key = (self.endpoint(), self.model_name)
            state = NEGOTIATOR.state(key, start=self._start_form)
        else:  # pinned: only logprobs support is learnt, under a key of its own
            key = (self.endpoint(), f"{self.model_name}#{self.structured_output}")
            state = NEGOTIATOR.state(key, start=lambda: self.structured_output)
            state.form = self.structured_output
        wanted = call_options().top_logprobs
        return key, state.form, wanted if state.logprobs else 0

    def _renegotiate(self, key: tuple[str, str], form: str, top: int, exc: Exception) -> bool:
        """Whether ``exc`` refused a request field and the call should go again without it."""
        if top and refuses_logprobs(exc):
            NEGOTIATOR.no_logprobs(key)
            log.info("judge %s at %r refuses logprobs; asking without", key[1], key[0])
            return True
        if self.structured_output == "auto" and refuses(exc, form):
            nxt = NEGOTIATOR.step_down(key, form)
            log.info(
                "judge %s at %r refused structured output %r (%s); using %r from now on",
                key[1],
                key[0] or "the provider",
                form,
                _redact(str(exc), self._secrets)[:200],
                nxt,
            )
            return True
        return False

    def _translate(self, exc: Exception) -> JudgeError:
        message = _redact(f"{self.model_name}: {type(exc).__name__}: {exc}", self._secrets)[:600]
        direct = direct_error(exc, message)
        if direct is not None:
            return direct
        litellm = _load_litellm()
        status = getattr(exc, "status_code", None)
        if isinstance(exc, litellm.Timeout):
            return JudgeTimeoutError(message)
        if isinstance(exc, litellm.RateLimitError) or status == 429:
            return JudgeRateLimitError(message, retry_after=_retry_after(exc))
        # litellm reports a refused connection as a 500 "Connection error."; it is not one
        text = str(exc).lower()
        if isinstance(exc, litellm.APIConnectionError) or "connection error" in text:
            return JudgeConnectionError(message)
        if isinstance(status, int) and status >= 500:
            return JudgeServerError(message, retry_after=_retry_after(exc))
        if isinstance(status, int) and 300 <= status < 400:
            return JudgeError(
                f"{message} (a redirect: not followed, the request carries credentials)"
            )
        return JudgeError(message)

    def _answer(self, response: Any, cost: float | None) -> Completion:
        """The call's answer, from litellm's response object or the direct path's JSON."""
        choice = first_choice(response)
        text = answer_text(field(choice, "message"))
        finish = field(choice, "finish_reason")
        if finish == "length":
            log.warning(
                "judge %s stopped at its output limit (max_tokens=%s): the answer is cut short",
                self.model_name,
                self.output_limit(),
            )
        tokens_in, tokens_out = token_usage(response)
        return Completion(
            text,
            Usage(
                input_tokens=tokens_in,
                output_tokens=tokens_out,
                cost=0.0 if cost is None else cost,
                calls=1,
                unpriced_calls=1 if cost is None else 0,
            ),
            read_logprobs(field(choice, "logprobs")),
            finish if isinstance(finish, str) and finish else None,
        )

    def _litellm_cost(self, response: Any) -> float | None:
        # litellm prices every response as it logs it; reuse that rather than pricing twice
        hidden = getattr(response, "_hidden_params", None) or {}
        if "response_cost" in hidden:
            cost = hidden.get("response_cost")
            return None if cost is None else float(cost)
        try:
            return float(_load_litellm().completion_cost(completion_response=response))
        except Exception:
            return None  # model not in the price table

    def _direct_transport(self) -> Any:
        """The direct path's transport when this judge uses it, else None (decided once)."""
        if self._direct is None:
            self._direct = choose_direct(self, _load_litellm) or False
        return self._direct or None

    def _sdk_client(self, *, asynchronous: bool = False) -> dict[str, Any]:
        """``{"client": ...}`` for an ``openai`` model on the litellm path: an OpenAI SDK client
        on a guarded httpx client (:mod:`~spanjudge.evaluators._judge.judges.guarded_http`: no
        redirect followed, answers capped), since litellm's own follows redirects with the
        extra headers and the body. ``{}`` for other providers (litellm's clients). The sync
        client is kept; an async one lives for one call (its connections belong to a loop)."""
        if self._openai_provider is None:
            self._openai_provider = speaks_openai(self.model_name, _load_litellm)
        if not self._openai_provider:
            return {}
        if not asynchronous and self._sync_sdk is not None:
            return {"client": self._sync_sdk}
        import openai

        url = self.endpoint() or OPENAI_BASE
        options: dict[str, Any] = {
            "api_key": self._kwargs.get("api_key") or os.environ.get("OPENAI_API_KEY") or "",
            "base_url": url,
            "max_retries": 0,
            "timeout": self.timeout,
        }
        connections = max(self.max_concurrency, 1) * 2
        # the SDK takes an httpx client as it takes its own httpx2 one (typed for the latter)
        http: Any
        if asynchronous:
            http = guarded_async_client(url, timeout=self.timeout, max_connections=connections)
            return {"client": openai.AsyncOpenAI(http_client=http, **options)}
        http = guarded_client(url, timeout=self.timeout, max_connections=connections)
        self._sync_sdk = openai.OpenAI(http_client=http, **options)
        return {"client": self._sync_sdk}

    def _failed(self, key: tuple[str, str], form: str, top: int, exc: Exception) -> None:
        """Returns when the call should go again without a refused field; raises otherwise."""
        if not self._renegotiate(key, form, top, exc):
            raise self._translate(exc) from None

    def _read(self, raw: Any, direct: Any) -> Completion:
        if direct is not None:
            return self._answer(raw, price(self.model_name, raw, _load_litellm))
        return self._answer(raw, self._litellm_cost(raw))

    def _unsettled(self) -> JudgeError:
        return JudgeError(f"{self.model_name}: structured-output negotiation did not settle")

    def _complete(self, messages: Messages, schema: type[BaseModel]) -> Completion:
        direct = self._direct_transport()
        for _ in range(8):  # each pass drops a refused field; the prompt form is never refused
            key, form, top = self._plan()
            request = self._request(messages, schema, form, top)
            try:
                if direct is not None:
                    raw = direct.complete(direct_body(request))
                else:
                    raw = _load_litellm().completion(**request, **self._sdk_client())
            except Exception as exc:
                self._failed(key, form, top, exc)
                continue
            return self._read(raw, direct)
        raise self._unsettled()

    async def _a_complete(self, messages: Messages, schema: type[BaseModel]) -> Completion:
        direct = self._direct_transport()
        for _ in range(8):
            key, form, top = self._plan()
            request = self._request(messages, schema, form, top)
            try:
                if direct is not None:
                    raw = await direct.a_complete(direct_body(request))
                else:
                    client = self._sdk_client(asynchronous=True)
                    try:
                        raw = await _load_litellm().acompletion(**request, **client)
                    finally:
                        if client:
                            await client["client"].close()
            except Exception as exc:
                self._failed(key, form, top, exc)
                continue
            return self._read(raw, direct)
        raise self._unsettled()
