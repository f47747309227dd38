"""Any litellm model as a judge: hosted (``gpt-4o``, ``anthropic/...``) or OpenAI-compatible
(``openai/<name>`` with ``api_base``). litellm is imported on the first call, never before.

::

    judge = LiteLLMJudge("gpt-4o-mini", timeout=30)
    metric = FaithfulnessMetric(model=judge)
"""

from __future__ import annotations

import os
from typing import Any

from pydantic import BaseModel

from spanjudge.evaluators.judges.base import (
    Judge,
    JudgeConnectionError,
    JudgeError,
    JudgeRateLimitError,
    JudgeServerError,
    JudgeTimeoutError,
    Messages,
    Usage,
)

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


class LiteLLMJudge(Judge):
    """A judge calling ``litellm.completion`` / ``acompletion``.

    Retries (rate limits with Retry-After, timeouts, connection errors, 5xx) are ours, so litellm
    and the OpenAI client are told not to retry. Structured output (JSON schema) is requested
    when the model supports it or when the model is served from ``api_base``; the prompt asks for
    JSON as well, so plain models work too. Cost comes from litellm's price table where it knows
    the model (None otherwise); tokens are always counted.
    """

    def __init__(
        self,
        model: str = "gpt-4o",
        *,
        timeout: float = 60.0,
        max_retries: int = 4,
        max_output_attempts: int = 3,
        max_concurrency: int = 8,
        backoff_base: float = 0.5,
        max_backoff: float = 20.0,
        structured_output: bool | None = None,
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
            raise ValueError("LiteLLMJudge(model=...) needs a litellm model string")
        self.model_name = model
        self.timeout = timeout
        self.structured_output = structured_output
        self._kwargs = litellm_kwargs
        self._secrets = [str(v) for k, v in litellm_kwargs.items() if "key" in k.lower() and v]

    def __repr__(self) -> str:  # never show api keys
        return f"LiteLLMJudge(model={self.model_name!r})"

    def _wants_schema(self) -> bool:
        if self.structured_output is not None:
            return self.structured_output
        if self._kwargs.get("api_base") or self._kwargs.get("base_url"):
            return True
        try:
            return bool(_load_litellm().supports_response_schema(model=self.model_name))
        except Exception:
            return False

    def _request(self, messages: Messages, schema: type[BaseModel]) -> dict[str, Any]:
        request: dict[str, Any] = {
            "model": self.model_name,
            "messages": messages,
            "timeout": self.timeout,
            "num_retries": 0,
            "max_retries": 0,
            **self._kwargs,
        }
        if self._wants_schema():
            request["response_format"] = {
                "type": "json_schema",
                "json_schema": {
                    "name": schema.__name__,
                    "schema": schema.model_json_schema(),
                    "strict": False,
                },
            }
        return request

    def _translate(self, exc: Exception) -> JudgeError:
        litellm = _load_litellm()
        message = _redact(f"{self.model_name}: {type(exc).__name__}: {exc}", self._secrets)[:600]
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
        return JudgeError(message)

    def _answer(self, response: Any) -> tuple[str, Usage]:
        litellm = _load_litellm()
        try:
            text = response.choices[0].message.content or ""
        except (AttributeError, IndexError, TypeError):
            text = ""
        usage = getattr(response, "usage", None)
        # litellm prices every response as it logs it; reuse that rather than pricing twice
        hidden = getattr(response, "_hidden_params", None) or {}
        cost: float | None = hidden.get("response_cost") if "response_cost" in hidden else None
        if cost is None and "response_cost" not in hidden:
            try:
                cost = float(litellm.completion_cost(completion_response=response))
            except Exception:
                cost = None  # model not in the price table
        elif cost is not None:
            cost = float(cost)
        return text, Usage(
            input_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
            output_tokens=int(getattr(usage, "completion_tokens", 0) or 0),
            cost=cost,
            calls=1,
        )

    def _complete(self, messages: Messages, schema: type[BaseModel]) -> tuple[str, Usage]:
        litellm = _load_litellm()
        try:
            response = litellm.completion(**self._request(messages, schema))
        except Exception as exc:
            raise self._translate(exc) from None
        return self._answer(response)

    async def _a_complete(self, messages: Messages, schema: type[BaseModel]) -> tuple[str, Usage]:
        litellm = _load_litellm()
        try:
            response = await litellm.acompletion(**self._request(messages, schema))
        except Exception as exc:
            raise self._translate(exc) from None
        return self._answer(response)
