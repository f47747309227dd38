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
import contextvars
import functools
import random
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any, Generic, TypeAlias, TypeVar

from pydantic import BaseModel
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
)

from spanjudge.errors import ConfigError, JudgeError, JudgeResponseError
from spanjudge.evaluators._judge.judges.answers import json_instruction, parse_answer
from spanjudge.evaluators._judge.judges.judge_trace import (
    JudgeCall,
    JudgeTrace,
    calling,
    current_call,
    current_trace,
)
from spanjudge.evaluators._judge.judges.slots import Slots

T = TypeVar("T", bound=BaseModel)
Messages = list[dict[str, str]]


@dataclass
class Usage:
    """Judge spend; additive. ``cost`` is None when a judge reports no cost at all;
    ``unpriced_calls`` counts calls to a model with no known price (counted at cost 0)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cost: float | None = None
    calls: int = 0
    unpriced_calls: int = 0

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
            self.unpriced_calls + other.unpriced_calls,
        )


@dataclass(frozen=True)
class TokenLogprob:
    """One generated token with its log-probability and the alternatives the model weighed at
    that position (``top``: ``(token, logprob)`` pairs, the chosen token among them)."""

    token: str
    logprob: float
    top: tuple[tuple[str, float], ...] = ()


@dataclass(frozen=True)
class Completion:
    """What one call returns: the answer text, its usage and, when asked for and given, the
    answer's token log-probabilities and why it ended (``finish_reason``, for a traced judge).
    ``_complete`` may also return a plain ``(text, usage)``."""

    text: str
    usage: Usage
    logprobs: tuple[TokenLogprob, ...] | None = None
    finish_reason: str | None = None  # as the server said (stop, length...), when it did


@dataclass(frozen=True)
class JudgeAnswer(Generic[T]):
    """A validated answer: ``value`` (the schema object), the ``usage`` of every call made for
    it (repairs and retries included) and the accepted answer's ``logprobs`` (None when the
    judge returned none: not asked for, or not offered by the model or server)."""

    value: T
    usage: Usage
    logprobs: tuple[TokenLogprob, ...] | None = None


@dataclass(frozen=True)
class CallOptions:
    """Per-call options a judge may honour; read with :func:`call_options` inside
    ``_complete``. ``top_logprobs`` > 0 asks for that many alternatives per answer token."""

    top_logprobs: int = 0


_NO_OPTIONS = CallOptions()
_CALL_OPTIONS: contextvars.ContextVar[CallOptions | None] = contextvars.ContextVar(
    "spanjudge_judge_call_options", default=None
)


def call_options() -> CallOptions:
    """The options of the judge call in progress (set by :meth:`Judge.generate_answer`)."""
    return _CALL_OPTIONS.get() or _NO_OPTIONS


Sent: TypeAlias = Completion | tuple[str, Usage]


def as_completion(sent: Sent) -> Completion:
    return sent if isinstance(sent, Completion) else Completion(sent[0], sent[1])


def _retryable(exc: BaseException) -> bool:
    return isinstance(exc, JudgeError) and exc.retryable


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
            raise ConfigError(
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
    def _complete(self, messages: Messages, schema: type[BaseModel]) -> Sent: ...

    @abstractmethod
    async def _a_complete(self, messages: Messages, schema: type[BaseModel]) -> Sent: ...

    # -- backoff -------------------------------------------------------------------------
    def _retry_policy(self, done: int) -> dict[str, Any]:
        """tenacity settings for the attempts after the first ``done``: retry what the transport
        calls retryable (429, 5xx, timeouts, connection errors), up to ``max_retries`` in all."""
        return {
            "stop": stop_after_attempt(self.max_retries + 1 - done),
            "retry": retry_if_exception(_retryable),
            "wait": lambda state: self._wait(state, done),
            "reraise": True,
        }

    def _wait(self, state: RetryCallState, done: int) -> float:
        error = state.outcome.exception() if state.outcome is not None else None
        return self._backoff(error, state.attempt_number + done)

    def _backoff(self, error: BaseException | None, failed: int) -> float:
        """Seconds to wait after ``failed`` attempts, the last of which raised ``error``: the
        server's Retry-After when it sent one, else exponential with equal jitter."""
        traced = current_call()  # only on a retry: a traced call counts it
        if traced is not None:
            traced.retries += 1
        if isinstance(error, JudgeError) and error.retry_after is not None:
            return float(min(max(error.retry_after, 0.0), self.max_backoff))
        exp = min(self.backoff_base * 2 ** (failed - 1), self.max_backoff)
        return float(exp * (0.5 + random.random() / 2))  # equal jitter: no retry stampede

    def _count(self, usage: Usage) -> None:
        with self._usage_lock:
            self.usage = self.usage + usage

    # The first attempt goes without tenacity: building its retry state costs some 50 us of
    # CPU per call, paid on every call while almost none is retried.
    def _send(self, messages: Messages, schema: type[BaseModel]) -> Completion:
        try:
            return self._send_once(messages, schema)
        except JudgeError as exc:
            if not _retryable(exc) or self.max_retries == 0:
                raise
            time.sleep(self._backoff(exc, 1))
        for attempt in Retrying(**self._retry_policy(done=1)):
            with attempt:
                return self._send_once(messages, schema)
        raise AssertionError("unreachable: tenacity re-raises the last error")

    def _send_once(self, messages: Messages, schema: type[BaseModel]) -> Completion:
        self.attempts += 1
        with self._slots:
            return as_completion(self._complete(messages, schema))

    async def _a_send(self, messages: Messages, schema: type[BaseModel]) -> Completion:
        try:
            return await self._a_send_once(messages, schema)
        except JudgeError as exc:
            if not _retryable(exc) or self.max_retries == 0:
                raise
            await asyncio.sleep(self._backoff(exc, 1))
        async for attempt in AsyncRetrying(**self._retry_policy(done=1)):
            with attempt:
                return await self._a_send_once(messages, schema)
        raise AssertionError("unreachable: tenacity re-raises the last error")

    async def _a_send_once(self, messages: Messages, schema: type[BaseModel]) -> Completion:
        self.attempts += 1
        await self._slots.a_acquire()
        try:
            return as_completion(await self._a_complete(messages, schema))
        finally:
            self._slots.release()

    # -- judge tracing (judge_trace.py): only while the loop has a JudgeTrace open --------
    def _traced_send(
        self, trace: JudgeTrace, messages: Messages, schema: type[BaseModel]
    ) -> Completion:
        call = trace.start(self.get_model_name(), messages, None)
        try:
            with calling(call):
                completion = self._send(messages, schema)
        except BaseException as exc:
            trace.end(call, error=exc)
            raise
        self._traced_end(trace, call, completion)
        return completion

    async def _a_traced_send(
        self, trace: JudgeTrace, messages: Messages, schema: type[BaseModel]
    ) -> Completion:
        call = trace.start(self.get_model_name(), messages, None)
        try:
            with calling(call):
                completion = await self._a_send(messages, schema)
        except BaseException as exc:
            trace.end(call, error=exc)
            raise
        self._traced_end(trace, call, completion)
        return completion

    @staticmethod
    def _traced_end(trace: JudgeTrace, call: JudgeCall, completion: Completion) -> None:
        usage = completion.usage
        trace.end(
            call,
            text=completion.text,
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            finish_reason=completion.finish_reason,
        )

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
    ) -> Generator[Messages, Completion, JudgeAnswer[T]]:
        """The repair-or-retry logic, shared by the sync and async twins: it yields the
        messages to send and is sent back each answer; it returns the validated answer."""
        messages = self._first_messages(prompt, schema)
        total = Usage()
        problem, text = "", ""
        for _ in range(self.max_output_attempts):
            completion = yield messages
            text = completion.text
            total = total + completion.usage
            self._count(completion.usage)
            try:
                return JudgeAnswer(self._check(text, schema), total, completion.logprobs)
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
        answer = self.generate_answer(prompt, schema)
        return answer.value, answer.usage

    async def a_generate(self, prompt: str, schema: type[T]) -> tuple[T, Usage]:
        """Async :meth:`generate`."""
        answer = await self.a_generate_answer(prompt, schema)
        return answer.value, answer.usage

    def generate_answer(
        self, prompt: str, schema: type[T], *, top_logprobs: int = 0
    ) -> JudgeAnswer[T]:
        """:meth:`generate` with the answer's token log-probabilities when ``top_logprobs`` > 0
        and the judge offers them (``answer.logprobs`` is None otherwise)."""
        token = _CALL_OPTIONS.set(CallOptions(top_logprobs=max(0, int(top_logprobs))))
        try:
            trace = current_trace()  # judge tracing off: this read is all it costs
            send = self._send if trace is None else functools.partial(self._traced_send, trace)
            steps = self._attempts(prompt, schema)
            messages = next(steps)
            while True:
                try:
                    messages = steps.send(send(messages, schema))
                except StopIteration as done:
                    return done.value  # type: ignore[no-any-return]
        finally:
            _CALL_OPTIONS.reset(token)

    async def a_generate_answer(
        self, prompt: str, schema: type[T], *, top_logprobs: int = 0
    ) -> JudgeAnswer[T]:
        """Async :meth:`generate_answer`."""
        token = _CALL_OPTIONS.set(CallOptions(top_logprobs=max(0, int(top_logprobs))))
        try:
            trace = current_trace()
            a_send = (
                self._a_send if trace is None else functools.partial(self._a_traced_send, trace)
            )
            steps = self._attempts(prompt, schema)
            messages = next(steps)
            while True:
                try:
                    messages = steps.send(await a_send(messages, schema))
                except StopIteration as done:
                    return done.value  # type: ignore[no-any-return]
        finally:
            _CALL_OPTIONS.reset(token)
