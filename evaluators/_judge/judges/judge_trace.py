"""A traced judge: each judge call of one evaluation as a span in a trace of its own.

The evaluation loop opens a :class:`JudgeTrace` around one evaluation's judge calls
(:func:`tracing`) when judge tracing is on and the evaluation is sampled; the judge engine
(:class:`~spanjudge.evaluators._judge.judges.base.Judge`) records every call it sends while one
is open: prompt messages, completion, model, tokens, latency, transport retries, error. With
none open, a call costs one context-variable read and nothing else: no span object is made.

:meth:`JudgeTrace.spans` turns the calls into OpenTelemetry spans: a root ``judge {metric}``
span linked to the evaluation span (and the evaluation span links back to the root), and one
``chat {model}`` child per call with the GenAI semantic conventions' client span attributes
(``gen_ai.operation.name = chat``, ``gen_ai.request.model``, ``gen_ai.usage.input_tokens`` /
``output_tokens``, ``gen_ai.input.messages`` / ``gen_ai.output.messages``). Without content
capture the messages are left out. The judge trace is not the app's trace: the judged trace
keeps only its evaluation span.

Example::

    trace = JudgeTrace("faithfulness", capture_content=True, max_calls=16)
    with tracing(trace):
        metric.measure(case)
    spans = trace.spans(evaluation_trace_id, evaluation_span_id, resource)
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import random
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, TraceFlags
from opentelemetry.trace.status import Status, StatusCode

from spanjudge.tracer import _attributes as attrs

__all__ = ["JudgeCall", "JudgeTrace", "current_call", "current_trace", "tracing"]

# what the judge trace's spans are called and say about themselves
JUDGE_RETRIES = "spanjudge.judge.retries"
JUDGE_CALLS_DROPPED = "spanjudge.judge.calls_dropped"
JUDGE_METRIC = "spanjudge.judge.metric"
RESPONSE_FINISH_REASONS = "gen_ai.response.finish_reasons"
# every message text kept on a span is cut here (a judge prompt may quote a long context)
MAX_MESSAGE_CHARS = 16_384
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)


@dataclass
class JudgeCall:
    """One call the judge sent (repairs are calls of their own; transport retries are not)."""

    model: str
    messages: list[dict[str, str]]
    started_ns: int
    server: str | None = None
    ended_ns: int = 0
    text: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    retries: int = 0
    error: BaseException | None = None
    finish_reason: str | None = None


@dataclass
class JudgeTrace:
    """The judge calls of one evaluation; at most ``max_calls`` are kept, the rest counted."""

    metric: str
    capture_content: bool = True
    max_calls: int = 16
    trace_id: int = field(default_factory=lambda: random.getrandbits(128) or 1)
    root_span_id: int = field(default_factory=lambda: random.getrandbits(64) or 1)
    calls: list[JudgeCall] = field(default_factory=list)
    dropped: int = 0

    def start(self, model: str, messages: list[dict[str, str]], server: str | None) -> JudgeCall:
        return JudgeCall(model, list(messages), time.time_ns(), server)

    def end(
        self,
        call: JudgeCall,
        *,
        text: str | None = None,
        input_tokens: int = 0,
        output_tokens: int = 0,
        error: BaseException | None = None,
        finish_reason: str | None = None,
    ) -> None:
        call.ended_ns = max(time.time_ns(), call.started_ns)
        call.finish_reason = finish_reason
        call.text, call.error = text, error
        call.input_tokens, call.output_tokens = input_tokens, output_tokens
        if len(self.calls) < self.max_calls:
            self.calls.append(call)
        else:
            self.dropped += 1

    @property
    def ids(self) -> tuple[str, str]:
        """The judge trace's trace id and root span id, as hex (what the evaluation keeps)."""
        return f"{self.trace_id:032x}", f"{self.root_span_id:016x}"

    def spans(
        self, evaluation_trace_id: int, evaluation_span_id: int, resource: Resource
    ) -> list[ReadableSpan]:
        """The root span (linked to the evaluation span) and one span per call kept."""
        if not self.calls:
            return []
        scope = InstrumentationScope(attrs.TRACER_NAME)
        root = SpanContext(self.trace_id, self.root_span_id, False, _SAMPLED)
        back = SpanContext(evaluation_trace_id, evaluation_span_id, True, _SAMPLED)
        out = [
            ReadableSpan(
                name=f"judge {self.metric}",
                context=root,
                resource=resource,
                attributes={
                    JUDGE_METRIC: self.metric,
                    **({JUDGE_CALLS_DROPPED: self.dropped} if self.dropped else {}),
                },
                links=[Link(back)],
                kind=SpanKind.INTERNAL,
                start_time=min(c.started_ns for c in self.calls),
                end_time=max(c.ended_ns for c in self.calls),
                instrumentation_scope=scope,
            )
        ]
        for call in self.calls:
            context = SpanContext(self.trace_id, random.getrandbits(64) or 1, False, _SAMPLED)
            out.append(
                ReadableSpan(
                    name=f"chat {call.model}",
                    context=context,
                    parent=root,
                    resource=resource,
                    attributes=self._call_attributes(call),
                    kind=SpanKind.CLIENT,
                    status=(
                        Status(StatusCode.ERROR, str(call.error)[:1000])
                        if call.error is not None
                        else Status(StatusCode.UNSET)
                    ),
                    start_time=call.started_ns,
                    end_time=call.ended_ns,
                    instrumentation_scope=scope,
                )
            )
        return out

    def _call_attributes(self, call: JudgeCall) -> dict[str, Any]:
        out: dict[str, Any] = {
            attrs.GEN_AI_OPERATION_NAME: "chat",
            attrs.GEN_AI_REQUEST_MODEL: call.model,
            attrs.GEN_AI_USAGE_INPUT_TOKENS: call.input_tokens,
            attrs.GEN_AI_USAGE_OUTPUT_TOKENS: call.output_tokens,
            JUDGE_RETRIES: call.retries,
        }
        provider, slash, _ = call.model.partition("/")
        if slash and provider:  # litellm's "provider/model" (the conventions require the name)
            out[attrs.GEN_AI_PROVIDER_NAME] = provider
        if call.server:
            out["server.address"] = call.server
        if call.error is not None:
            out[attrs.ERROR_TYPE] = type(call.error).__name__
        if call.finish_reason:
            out[RESPONSE_FINISH_REASONS] = (call.finish_reason,)
        if self.capture_content:
            out[attrs.GEN_AI_INPUT_MESSAGES] = _messages_json(call.messages)
            if call.text is not None:
                answer = {"role": "assistant", "content": call.text}
                out[attrs.GEN_AI_OUTPUT_MESSAGES] = _messages_json([answer], call.finish_reason)
        return out


def _messages_json(messages: list[dict[str, str]], finish_reason: str | None = None) -> str:
    """Chat messages in the conventions' shape: ``[{role, parts: [{type: text, content}]}]``,
    an output message with its ``finish_reason`` when the server gave one."""
    shaped: list[dict[str, Any]] = [
        {
            "role": m.get("role", "user"),
            "parts": [{"type": "text", "content": str(m.get("content", ""))[:MAX_MESSAGE_CHARS]}],
        }
        for m in messages
    ]
    if finish_reason:
        for message in shaped:
            message["finish_reason"] = finish_reason
    return json.dumps(shaped, ensure_ascii=False)


_TRACE: contextvars.ContextVar[JudgeTrace | None] = contextvars.ContextVar(
    "spanjudge_judge_trace", default=None
)
_CALL: contextvars.ContextVar[JudgeCall | None] = contextvars.ContextVar(
    "spanjudge_judge_call", default=None
)


def current_trace() -> JudgeTrace | None:
    """The judge trace open in this context (None: judge calls are not traced)."""
    return _TRACE.get()


def current_call() -> JudgeCall | None:
    """The traced judge call in progress (its retries are counted on it)."""
    return _CALL.get()


@contextlib.contextmanager
def tracing(trace: JudgeTrace | None) -> Iterator[JudgeTrace | None]:
    """Record the judge calls made inside the block on ``trace`` (None: record nothing)."""
    if trace is None:
        yield None
        return
    token = _TRACE.set(trace)
    try:
        yield trace
    finally:
        _TRACE.reset(token)


@contextlib.contextmanager
def calling(call: JudgeCall) -> Iterator[JudgeCall]:
    """Make ``call`` the one whose retries :func:`current_call` counts."""
    token = _CALL.set(call)
    try:
        yield call
    finally:
        _CALL.reset(token)
