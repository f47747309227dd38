"""The judge engine every judge shares: JSON extraction, validation, repair-or-retry, backoff,
concurrency limit and usage accounting. A judge subclass supplies only the call itself.

::

    class EchoJudge(Judge):
        model_name = "echo"

        def _complete(self, messages, schema):
            return '{"reason": "ok"}', Usage(calls=1)

        async def _a_complete(self, messages, schema):
            return self._complete(messages, schema)

    obj, usage = EchoJudge().generate("Why?", Reason)
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import threading
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential,
)

from spanjudge.evaluators.judges.slots import Slots

T = TypeVar("T", bound=BaseModel)
Messages = list[dict[str, str]]

_FENCE = re.compile(r"```(?:json|JSON)?\s*(.*?)```", re.DOTALL)
_TRAILING_COMMA = re.compile(r",\s*([}\]])")
_MAX_RAW_IN_ERROR = 500


@dataclass
class Usage:
    """Judge spend; additive. ``cost`` is None when the model's price is unknown."""

    input_tokens: int = 0
    output_tokens: int = 0
    cost: float | None = None
    calls: int = 0

    def __add__(self, other: Usage) -> Usage:
        if self.cost is None and other.cost is None:
            cost = None
        else:
            cost = (self.cost or 0.0) + (other.cost or 0.0)
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            cost,
            self.calls + other.calls,
        )


# ------------------------------------------------------------------------------- errors
class JudgeError(Exception):
    """A judge call failed; ``error_type`` is what evaluation spans carry as ``error.type``."""

    error_type = "judge_error"
    retryable = False

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class JudgeTimeoutError(JudgeError):
    error_type = "judge_timeout"
    retryable = True


class JudgeRateLimitError(JudgeError):
    error_type = "judge_rate_limited"
    retryable = True


class JudgeConnectionError(JudgeError):
    error_type = "judge_connection"
    retryable = True


class JudgeServerError(JudgeError):
    error_type = "judge_server_error"
    retryable = True


class JudgeResponseError(JudgeError):
    """The judge kept answering with text that is not valid JSON for the schema."""

    error_type = "judge_invalid_response"

    def __init__(self, message: str, *, raw: str = "") -> None:
        super().__init__(message)
        self.raw = raw[:_MAX_RAW_IN_ERROR]


# ------------------------------------------------------------------------------- JSON
def extract_json(text: str) -> Any:
    """The JSON value in a chatty answer: plain, inside a code fence, or with text around it."""
    candidates = [text.strip()]
    candidates += [m.strip() for m in _FENCE.findall(text)]
    for opener, closer in (("{", "}"), ("[", "]")):
        start, end = text.find(opener), text.rfind(closer)
        if 0 <= start < end:
            candidates.append(text[start : end + 1])
    for candidate in candidates:
        for variant in (candidate, _TRAILING_COMMA.sub(r"\1", candidate)):
            try:
                return json.loads(variant)
            except (json.JSONDecodeError, ValueError):
                continue
    raise ValueError("no JSON object found in the answer")


def parse_answer(text: str, schema: type[T]) -> T:
    """Validate ``text`` against ``schema``; raises ValueError with a short explanation."""
    try:
        data = extract_json(text)
    except ValueError as exc:
        raise ValueError(str(exc)) from None
    try:
        return schema.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or '(root)'}: {e['msg']}"
            for e in exc.errors()[:5]
        )
        raise ValueError(
            f"the JSON does not match the schema {schema.__name__}: {problems}"
        ) from None


def json_instruction(schema: type[BaseModel]) -> str:
    fields = ", ".join(schema.model_json_schema().get("properties", {}))
    return (
        f"\n\nReply with a single JSON object for the schema {schema.__name__} "
        f"(keys: {fields}) and nothing else."
    )


# ------------------------------------------------------------------------------- engine
class Judge(ABC):
    """Base judge. Subclasses implement :meth:`_complete` and :meth:`_a_complete`, which send
    the messages once and return ``(text, usage)``, raising a :class:`JudgeError` subclass for
    transport failures. Everything else (retries, repair, limits, accounting) lives here."""

    model_name: str = "judge"

    def __init__(
        self,
        *,
        max_retries: int = 4,
        max_output_attempts: int = 3,
        max_concurrency: int = 8,
        backoff_base: float = 0.5,
        max_backoff: float = 20.0,
    ) -> None:
        if max_output_attempts < 1 or max_retries < 0 or max_concurrency < 1:
            raise ValueError(
                "max_output_attempts and max_concurrency must be >= 1, max_retries >= 0"
            )
        self.max_retries = max_retries
        self.max_output_attempts = max_output_attempts
        self.max_concurrency = max_concurrency
        self.backoff_base = backoff_base
        self.max_backoff = max_backoff
        # One limit across threads and event loops (see Slots).
        self._slots = Slots(max_concurrency)
        self._usage_lock = threading.Lock()
        self.usage = Usage()
        self.attempts = 0  # every HTTP call, including retried ones

    def get_model_name(self) -> str:
        return self.model_name

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model={self.model_name!r})"

    @abstractmethod
    def _complete(self, messages: Messages, schema: type[BaseModel]) -> tuple[str, Usage]: ...

    @abstractmethod
    async def _a_complete(
        self, messages: Messages, schema: type[BaseModel]
    ) -> tuple[str, Usage]: ...

    # -- backoff -------------------------------------------------------------------------
    def _retry_policy(self) -> dict[str, Any]:
        """tenacity settings shared by the sync and async sends: retry what the transport
        calls retryable (429, 5xx, timeouts, connection errors), ``max_retries`` times."""
        return {
            "stop": stop_after_attempt(self.max_retries + 1),
            "retry": retry_if_exception(lambda exc: isinstance(exc, JudgeError) and exc.retryable),
            "wait": self._wait,
            "reraise": True,
        }

    def _wait(self, state: RetryCallState) -> float:
        error = state.outcome.exception() if state.outcome is not None else None
        if isinstance(error, JudgeError) and error.retry_after is not None:
            return float(min(max(error.retry_after, 0.0), self.max_backoff))
        exp = wait_exponential(multiplier=self.backoff_base, max=self.max_backoff)(state)
        return float(exp * (0.5 + random.random() / 2))  # equal jitter: no retry stampede

    def _count(self, usage: Usage) -> None:
        with self._usage_lock:
            self.usage = self.usage + usage

    def _send(self, messages: Messages, schema: type[BaseModel]) -> tuple[str, Usage]:
        for attempt in Retrying(**self._retry_policy()):
            with attempt:
                self.attempts += 1
                with self._slots:
                    return self._complete(messages, schema)
        raise AssertionError("unreachable: tenacity re-raises the last error")

    async def _a_send(self, messages: Messages, schema: type[BaseModel]) -> tuple[str, Usage]:
        async for attempt in AsyncRetrying(**self._retry_policy()):
            with attempt:
                self.attempts += 1
                await self._slots.a_acquire()
                try:
                    return await self._a_complete(messages, schema)
                finally:
                    self._slots.release()
        raise AssertionError("unreachable: tenacity re-raises the last error")

    # -- repair or retry -----------------------------------------------------------------
    def _first_messages(self, prompt: str, schema: type[BaseModel]) -> Messages:
        return [{"role": "user", "content": prompt + json_instruction(schema)}]

    def _repair(self, messages: Messages, text: str, problem: str) -> Messages:
        return [
            *messages,
            {"role": "assistant", "content": text[:4000]},
            {
                "role": "user",
                "content": f"That answer could not be used: {problem}. "
                "Answer again with only the corrected JSON object.",
            },
        ]

    def _check(self, text: str, schema: type[T]) -> T:
        return parse_answer(text, schema)

    def _attempts(
        self, prompt: str, schema: type[T]
    ) -> Generator[Messages, tuple[str, Usage], tuple[T, Usage]]:
        """The repair-or-retry logic, shared by the sync and async twins: it yields the
        messages to send and is sent back each answer; it returns the validated object."""
        messages = self._first_messages(prompt, schema)
        total = Usage()
        problem, text = "", ""
        for _ in range(self.max_output_attempts):
            text, usage = yield messages
            total = total + usage
            self._count(usage)
            try:
                return self._check(text, schema), total
            except ValueError as exc:
                problem = str(exc)
                messages = self._repair(messages, text, problem)
        raise JudgeResponseError(
            f"{self.model_name} gave no valid {schema.__name__} in "
            f"{self.max_output_attempts} attempts: {problem}",
            raw=text,
        )

    def generate(self, prompt: str, schema: type[T]) -> tuple[T, Usage]:
        """Ask the judge; returns the validated object and the usage of every call made."""
        steps = self._attempts(prompt, schema)
        messages = next(steps)
        while True:
            try:
                messages = steps.send(self._send(messages, schema))
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]

    async def a_generate(self, prompt: str, schema: type[T]) -> tuple[T, Usage]:
        """Async :meth:`generate`."""
        steps = self._attempts(prompt, schema)
        messages = next(steps)
        while True:
            try:
                messages = steps.send(await self._a_send(messages, schema))
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]


# ------------------------------------------------------------------------------- custom models
class DeepEvalModelJudge(Judge):
    """Wraps an object with deepeval's custom-model interface (``generate(prompt, schema=None)``,
    ``a_generate``, ``get_model_name``), so existing custom judges carry over.

    Its answers may be a pydantic object, a string (parsed and repaired like any judge), or a
    ``(answer, cost)`` tuple; its transport errors surface as :class:`JudgeError`.
    """

    def __init__(self, model: Any, **options: Any) -> None:
        super().__init__(**options)
        self.model = model
        try:
            self.model_name = str(model.get_model_name())
        except Exception:
            self.model_name = type(model).__name__

    @staticmethod
    def _unpack(answer: Any) -> tuple[Any, float | None]:
        if isinstance(answer, tuple) and len(answer) == 2 and isinstance(answer[1], (int, float)):
            return answer[0], float(answer[1])
        return answer, None

    def _to_text(self, answer: Any, schema: type[BaseModel]) -> tuple[str, Usage]:
        value, cost = self._unpack(answer)
        if isinstance(value, BaseModel):
            text = value.model_dump_json()
        elif isinstance(value, (dict, list)):
            text = json.dumps(value)
        else:
            text = str(value)
        return text, Usage(cost=cost, calls=1)

    def _call(self, fn: Callable[..., Any], prompt: str, schema: type[BaseModel]) -> Any:
        try:
            return fn(prompt, schema=schema)
        except TypeError:
            return fn(prompt)

    def _complete(self, messages: Messages, schema: type[BaseModel]) -> tuple[str, Usage]:
        prompt = "\n\n".join(m["content"] for m in messages)
        try:
            return self._to_text(self._call(self.model.generate, prompt, schema), schema)
        except JudgeError:
            raise
        except Exception as exc:
            raise JudgeError(f"custom judge {self.model_name} raised {type(exc).__name__}") from exc

    async def _a_complete(self, messages: Messages, schema: type[BaseModel]) -> tuple[str, Usage]:
        prompt = "\n\n".join(m["content"] for m in messages)
        a_generate = getattr(self.model, "a_generate", None)
        try:
            if a_generate is None:
                answer = await asyncio.to_thread(self._call, self.model.generate, prompt, schema)
            else:
                result = self._call(a_generate, prompt, schema)
                answer = await result if isinstance(result, Awaitable) else result
        except JudgeError:
            raise
        except Exception as exc:
            raise JudgeError(f"custom judge {self.model_name} raised {type(exc).__name__}") from exc
        return self._to_text(answer, schema)
