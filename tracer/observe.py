"""``@observe``: one GenAI span per call of a function, method, coroutine or (async) generator.

Everything that depends only on the function (span name, static attributes, which argument holds
the query or the messages) is worked out once, at decoration time, in a :class:`_Plan`. The
per-call path starts a span, and only if it is recording does it capture anything.
"""

from __future__ import annotations

import functools
import inspect
import random
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, overload

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode

from spanjudge.tracer import attributes as attrs
from spanjudge.tracer import capture, messages, record
from spanjudge.tracer import context as _context
from spanjudge.tracer.context import CONVERSATION

F = TypeVar("F", bound=Callable[..., Any])

_INPUT_NAMES = ("input", "query", "question", "message", "prompt", "user_input", "text")
_CONVERSATION_NAMES = ("conversation_id", "session_id")
_OPTIONS = frozenset(
    {
        "model",
        "provider",
        "conversation_id_arg",
        "input_arg",
        "tool_call_id",
        "description",
        "attributes",
        "capture_input",
        "capture_output",
    }
)
# Streams longer than this keep their first chunks only; the span records that it was cut.
_MAX_CHUNKS = 10_000

_tracer: trace.Tracer | None = None


def _get_tracer() -> trace.Tracer:
    # Resolved on first call, through the global (proxy) provider: an SDK provider set later by
    # the app, by configure() or by a test fixture is picked up without re-decorating anything.
    global _tracer
    if _tracer is None:
        from spanjudge._version import __version__

        _tracer = trace.get_tracer(attrs.TRACER_NAME, __version__)
    return _tracer


class _Plan:
    """Decoration-time facts about one decorated function."""

    __slots__ = (
        "capture_input",
        "capture_output",
        "conv_arg",
        "conv_from_arg",
        "fixed",
        "input_arg",
        "kind",
        "messages_arg",
        "model_arg",
        "name",
        "names",
        "skip",
        "span_name",
        "static",
        "tool_call_id",
        "tool_call_id_arg",
        "var_positional",
        "warm",
    )

    def __init__(
        self, fn: Callable[..., Any], kind: str, name: str | None, options: dict[str, Any]
    ):
        unknown = set(options) - _OPTIONS
        if unknown:
            raise TypeError(
                f"observe() got unknown options {sorted(unknown)}; valid: {sorted(_OPTIONS)}"
            )
        if kind not in attrs.OPERATION_BY_KIND:
            raise ValueError(f"observe(kind={kind!r}): kind must be one of {attrs.KINDS}")
        self.kind = kind
        # True once a call of this function was recorded: later calls then capture their inputs
        # before the span starts and hand them to start_span (one attribute pass, not two).
        self.warm = False
        qualname = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or "call"
        # "test.<locals>.f" names a place in the source, not the step: keep the last part.
        self.name = name or qualname.rsplit("<locals>.", 1)[-1]
        try:
            params = list(inspect.signature(fn).parameters.values())
        except (TypeError, ValueError):
            params = []
        positional = [
            p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
        self.names = positional
        self.var_positional = next((p.name for p in params if p.kind == p.VAR_POSITIONAL), None)
        self.skip = 1 if positional and positional[0] in ("self", "cls") else 0
        all_names = {p.name for p in params}

        def arg(candidates: tuple[str, ...]) -> tuple[int | None, str] | None:
            for cand in candidates:
                if cand in all_names:
                    return (positional.index(cand) if cand in positional else None, cand)
            return None

        self.input_arg = arg((options["input_arg"],) if "input_arg" in options else _INPUT_NAMES)
        self.messages_arg = arg(("messages",))
        self.model_arg = arg(("model",))
        self.conv_arg = arg(
            (options["conversation_id_arg"],)
            if "conversation_id_arg" in options
            else _CONVERSATION_NAMES
        )
        self.conv_from_arg = kind == "agent" and self.conv_arg is not None
        self.tool_call_id_arg = arg(("tool_call_id",))
        self.tool_call_id: str | None = options.get("tool_call_id")
        self.capture_input = bool(options.get("capture_input", True))
        self.capture_output = bool(options.get("capture_output", True))

        static: dict[str, Any] = {
            attrs.GEN_AI_OPERATION_NAME: attrs.OPERATION_BY_KIND[kind],
            attrs.SPANJUDGE_KIND: kind,
        }
        model = options.get("model")
        provider = options.get("provider")
        if kind == "llm":
            if model:
                static[attrs.GEN_AI_REQUEST_MODEL] = str(model)
                if provider is None and "/" in str(model):
                    provider = str(model).split("/", 1)[0]  # litellm-style "openai/gpt-4o"
            if provider:
                static[attrs.GEN_AI_PROVIDER_NAME] = str(provider)
            self.span_name = attrs.span_name("llm", str(model) if model else self.name)
        else:
            self.span_name = attrs.span_name(kind, self.name)
            if model:
                static[attrs.GEN_AI_REQUEST_MODEL] = str(model)
            if provider:
                static[attrs.GEN_AI_PROVIDER_NAME] = str(provider)
        if kind == "agent":
            static[attrs.GEN_AI_AGENT_NAME] = self.name
        elif kind == "tool":
            static[attrs.GEN_AI_TOOL_NAME] = self.name
            if options.get("description"):
                static[attrs.GEN_AI_TOOL_DESCRIPTION] = str(options["description"])
        for key, value in (options.get("attributes") or {}).items():
            static[str(key)] = value
        self.static = static
        if kind != "llm" or model:
            self.model_arg = None  # the name is fixed; no per-call model lookup
        # No argument can change the span name or the start attributes (conversation() can).
        self.fixed = self.model_arg is None and self.conv_arg is None

    # --- per call -----------------------------------------------------------------------------
    def start_attributes(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        """Static attributes plus what the call's arguments decide before the span starts."""
        conv = CONVERSATION.get()
        conv_id = _value(self.conv_arg, args, kwargs) if self.conv_arg is not None else None
        if conv is None and conv_id is None and self.model_arg is None:
            return self.static
        found = dict(self.static)
        if conv is not None:
            found[attrs.GEN_AI_CONVERSATION_ID] = conv[0]
            if conv[1] is not None:
                found[attrs.SPANJUDGE_USER_ID] = conv[1]
        if conv_id is not None and self.kind == "agent":
            found[attrs.GEN_AI_CONVERSATION_ID] = str(conv_id)
        if self.model_arg is not None:
            model = _value(self.model_arg, args, kwargs)
            if isinstance(model, str) and model:
                found[attrs.GEN_AI_REQUEST_MODEL] = model
                if attrs.GEN_AI_PROVIDER_NAME not in found and "/" in model:
                    found[attrs.GEN_AI_PROVIDER_NAME] = model.split("/", 1)[0]
        return found

    def call_span_name(self, attributes: Mapping[str, Any]) -> str:
        if self.model_arg is not None:
            model = attributes.get(attrs.GEN_AI_REQUEST_MODEL)
            if model:
                return attrs.span_name("llm", model)
        return self.span_name

    def bound(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        """The call's arguments by parameter name (self/cls left out), without inspect."""
        out: dict[str, Any] = {}
        names = self.names
        extra: list[Any] = []
        for i in range(self.skip, len(args)):
            if i < len(names):
                out[names[i]] = args[i]
            else:
                extra.append(args[i])
        if extra:
            out[self.var_positional or "args"] = extra
        out.update(kwargs)
        return out

    def input_text(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if self.input_arg is not None:
            return _value(self.input_arg, args, kwargs)
        for value in args[self.skip :]:
            if isinstance(value, str):
                return value
        for value in kwargs.values():
            if isinstance(value, str):
                return value
        return None

    def input_attributes(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], out: dict[str, Any]
    ) -> dict[str, Any]:
        """Stage the call's input attributes (content policy permitting) into ``out``."""
        kind = self.kind
        if kind == "tool":
            call_id = _value(self.tool_call_id_arg, args, kwargs) if self.tool_call_id_arg else None
            if call_id is None:
                call_id = self.tool_call_id or f"call_{random.getrandbits(64):016x}"
            out[attrs.GEN_AI_TOOL_CALL_ID] = str(call_id)
        if capture.POLICY.content and self.capture_input:
            if kind == "llm" or kind == "agent":
                record.put(out, attrs.GEN_AI_INPUT_MESSAGES, self._input_messages(args, kwargs))
            elif kind == "retriever":
                query = self.input_text(args, kwargs)
                if query is not None:
                    record.put(out, attrs.GEN_AI_RETRIEVAL_QUERY_TEXT, capture.serialize(query))
            elif kind == "tool":
                arguments = capture.dumps(self.bound(args, kwargs))
                record.put(out, attrs.GEN_AI_TOOL_CALL_ARGUMENTS, arguments)
            else:
                record.put(out, attrs.SPANJUDGE_INPUT, capture.dumps(self.bound(args, kwargs)))
        return out

    def on_start(self, span: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Capture the inputs onto a span that is already recording."""
        record.apply(span, self.input_attributes(args, kwargs, {}))

    def _input_messages(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
        """``gen_ai.input.messages`` JSON from the messages argument or the user's text."""
        if self.messages_arg is not None:
            value = _value(self.messages_arg, args, kwargs)
            if value is not None and not isinstance(value, str):
                return capture.dumps(messages.to_semconv_messages(value))
        text = self.input_text(args, kwargs)
        if isinstance(text, str):
            return messages.text_message_json("user", text)
        if text is None:
            first: Any = args[self.skip] if len(args) > self.skip else None
            if messages.looks_like_messages(first):
                return capture.dumps(messages.to_semconv_messages(first))
            text = self.bound(args, kwargs)
        elif messages.looks_like_messages(text):
            return capture.dumps(messages.to_semconv_messages(text))
        return messages.text_message_json("user", capture.serialize(text))

    def on_end(self, span: Any, value: Any, existing: Mapping[str, Any] | None = None) -> None:
        if self.capture_output:
            out: dict[str, Any] = {}
            record.write_output(span, self.kind, value, out, False, existing)
            record.apply(span, out)

    def end_stream(self, span: Any, chunks: list[Any], returned: Any = None) -> None:
        """Record a finished stream's output (called under ``_safe``: odd chunks never raise
        into the consumer). A generator that yields nothing but returns a value is recorded by
        that value."""
        value = returned if not chunks and returned is not None else self.stream_value(chunks)
        self.on_end(span, value)

    def stream_value(self, chunks: list[Any]) -> Any:
        """What a finished stream recorded as its output."""
        if self.kind == "retriever":
            return chunks
        text = messages.stream_text(chunks)
        if self.kind == "llm":
            usage_chunk = next((c for c in reversed(chunks) if messages.field(c, "usage")), None)
            if text is not None:
                response: dict[str, Any] = {
                    "choices": [
                        {"message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
                    ]
                }
                if usage_chunk is not None:
                    response["usage"] = messages.field(usage_chunk, "usage")
                model = messages.field(chunks[-1], "model") if chunks else None
                if isinstance(model, str):
                    response["model"] = model
                return response
            return chunks
        if text is not None and all(isinstance(c, str) for c in chunks):
            return text
        return chunks


def _value(
    where: tuple[int | None, str] | None, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    if where is None:
        return None
    index, name = where
    if name in kwargs:
        return kwargs[name]
    if index is not None and index < len(args):
        return args[index]
    return None


def _safe(step: Callable[..., None], *args: Any) -> None:
    try:
        step(*args)
    except Exception as exc:
        capture.note_failure(exc)


def _record_error(span: Any, exc: BaseException) -> None:
    try:
        span.set_attribute(attrs.ERROR_TYPE, type(exc).__qualname__)
        try:
            description = f"{type(exc).__name__}: {exc}"
        except Exception:
            description = type(exc).__name__
        span.set_status(Status(StatusCode.ERROR, description[:1024]))
        span.record_exception(exc, escaped=True)
    except Exception as failure:
        capture.note_failure(failure)


def _start(plan: _Plan, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    attributes = plan.start_attributes(args, kwargs)
    tracer = _tracer or _get_tracer()
    return tracer.start_span(plan.call_span_name(attributes), attributes=attributes)


def _begin(plan: _Plan, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, Any]:
    """Start the call's span; returns (span, what the decorator may assume is already on it).

    The second item is ``None`` when the span is not recording.
    """
    if plan.fixed and CONVERSATION.get() is None:
        attributes = plan.static  # nothing about this call changes the name or the start set
        name = plan.span_name
    else:
        attributes = plan.start_attributes(args, kwargs)
        name = plan.call_span_name(attributes)
    warm = plan.warm
    if warm:
        try:
            attributes = plan.input_attributes(args, kwargs, dict(attributes))
        except Exception as failure:
            capture.note_failure(failure)
    tracer = _tracer or _get_tracer()
    span = tracer.start_span(name, attributes=attributes)
    if not span.is_recording():
        plan.warm = False
        return span, None
    if not warm:
        plan.warm = True
        try:
            plan.on_start(span, args, kwargs)
        except Exception as failure:
            capture.note_failure(failure)
    return span, attributes


def _enter_conversation(plan: _Plan, known: Mapping[str, Any]) -> Any:
    """An agent given its conversation id as an argument: its children carry the id too."""
    conv_id = known.get(attrs.GEN_AI_CONVERSATION_ID)
    current = CONVERSATION.get()
    if conv_id is None or (current is not None and current[0] == conv_id):
        return None
    return CONVERSATION.set((conv_id, known.get(attrs.SPANJUDGE_USER_ID)))


def _wrap_function(fn: Callable[..., Any], plan: _Plan) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        span, known = _begin(plan, args, kwargs)
        if known is None:
            if not span.get_span_context().is_valid:
                return fn(*args, **kwargs)  # no SDK: nothing to carry, nothing to record
            token = otel_context.attach(trace.set_span_in_context(span))
            try:
                return fn(*args, **kwargs)  # sampled out: still carry the trace to children
            finally:
                otel_context.detach(token)
                span.end()
        writes = _context.writes
        conv_token = _enter_conversation(plan, known) if plan.conv_from_arg else None
        token = otel_context.attach(trace.set_span_in_context(span))
        try:
            result = fn(*args, **kwargs)
        except BaseException as exc:
            otel_context.detach(token)
            if conv_token is not None:
                CONVERSATION.reset(conv_token)
            _record_error(span, exc)
            span.end()
            raise
        otel_context.detach(token)
        if conv_token is not None:
            CONVERSATION.reset(conv_token)
        try:
            # No handle write during the call: what we started the span with is all it has.
            plan.on_end(span, result, known if writes == _context.writes else None)
        except Exception as failure:
            capture.note_failure(failure)
        span.end()
        return result

    return wrapper


def _wrap_coroutine(fn: Callable[..., Any], plan: _Plan) -> Callable[..., Any]:
    @functools.wraps(fn)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        # The span starts when the coroutine runs (is awaited), not when it is created.
        span, known = _begin(plan, args, kwargs)
        if known is None and not span.get_span_context().is_valid:
            return await fn(*args, **kwargs)
        conv_token = (
            _enter_conversation(plan, known) if known is not None and plan.conv_from_arg else None
        )
        token = otel_context.attach(trace.set_span_in_context(span))
        try:
            result = await fn(*args, **kwargs)
        except BaseException as exc:  # CancelledError included: ERROR status, then re-raised
            if known is not None:
                _record_error(span, exc)
            raise
        else:
            if known is not None:
                # other tasks may write through handles meanwhile: read the span back
                _safe(plan.on_end, span, result)
            return result
        finally:
            otel_context.detach(token)
            if conv_token is not None:
                CONVERSATION.reset(conv_token)
            span.end()

    return wrapper


def _collect(chunks: list[Any], value: Any) -> None:
    if len(chunks) < _MAX_CHUNKS:
        chunks.append(value)


def _wrap_generator(fn: Callable[..., Any], plan: _Plan) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        # Runs at the first next(): that is when the span starts.
        span = _start(plan, args, kwargs)
        recording = span.is_recording()
        if not recording and not span.get_span_context().is_valid:
            return (yield from fn(*args, **kwargs))
        if recording:
            _safe(plan.on_start, span, args, kwargs)
        ctx = trace.set_span_in_context(span)
        chunks: list[Any] = []
        gen = fn(*args, **kwargs)
        method: Callable[[Any], Any] = gen.send
        arg: Any = None
        try:
            while True:
                # The span is current only while the generator's own code runs; at a yield the
                # consumer's context is left exactly as it was.
                token = otel_context.attach(ctx)
                try:
                    value = method(arg)
                finally:
                    otel_context.detach(token)
                if recording:
                    _collect(chunks, value)
                try:
                    arg = yield value
                    method = gen.send
                except GeneratorExit:
                    # close(), early break, or garbage collection of the consumer's iterator
                    token = otel_context.attach(ctx)
                    try:
                        gen.close()
                    finally:
                        otel_context.detach(token)
                    if recording:
                        _safe(plan.end_stream, span, chunks)
                    raise
                except BaseException as thrown:
                    method, arg = gen.throw, thrown
        except StopIteration as stop:
            if recording:
                _safe(plan.end_stream, span, chunks, stop.value)
            return stop.value
        except GeneratorExit:
            raise
        except BaseException as exc:
            if recording:
                _record_error(span, exc)
            raise
        finally:
            span.end()

    return wrapper


def _wrap_async_generator(fn: Callable[..., Any], plan: _Plan) -> Callable[..., Any]:
    @functools.wraps(fn)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        span = _start(plan, args, kwargs)
        recording = span.is_recording()
        if recording:
            _safe(plan.on_start, span, args, kwargs)
        # No SDK (invalid span): leave the OpenTelemetry context alone, but keep the protocol.
        ctx = trace.set_span_in_context(span) if span.get_span_context().is_valid else None
        chunks: list[Any] = []
        agen = fn(*args, **kwargs)
        method: Callable[[Any], Any] = agen.asend
        arg: Any = None
        try:
            while True:
                token = otel_context.attach(ctx) if ctx is not None else None
                try:
                    value = await method(arg)
                finally:
                    if token is not None:
                        otel_context.detach(token)
                if recording:
                    _collect(chunks, value)
                try:
                    arg = yield value
                    method = agen.asend
                except GeneratorExit:
                    token = otel_context.attach(ctx) if ctx is not None else None
                    try:
                        await agen.aclose()
                    finally:
                        if token is not None:
                            otel_context.detach(token)
                    if recording:
                        _safe(plan.end_stream, span, chunks)
                    raise
                except BaseException as thrown:
                    method, arg = agen.athrow, thrown
        except StopAsyncIteration:
            if recording:
                _safe(plan.end_stream, span, chunks)
        except GeneratorExit:
            raise
        except BaseException as exc:
            if recording:
                _record_error(span, exc)
            raise
        finally:
            span.end()

    return wrapper


def _decorate(fn: Any, kind: str, name: str | None, options: dict[str, Any]) -> Any:
    if isinstance(fn, (classmethod, staticmethod)):
        # @observe above @classmethod/@staticmethod: wrap the function, keep the descriptor.
        return type(fn)(_decorate(fn.__func__, kind, name, options))
    plan = _Plan(fn, kind, name, options)
    if inspect.isasyncgenfunction(fn):
        wrapped = _wrap_async_generator(fn, plan)
    elif inspect.iscoroutinefunction(fn):
        wrapped = _wrap_coroutine(fn, plan)
    elif inspect.isgeneratorfunction(fn):
        wrapped = _wrap_generator(fn, plan)
    else:
        wrapped = _wrap_function(fn, plan)
    wrapped.__spanjudge_kind__ = kind  # type: ignore[attr-defined]
    return wrapped


@overload
def observe(kind: F) -> F: ...


@overload
def observe(kind: str = "chain", name: str | None = None, **options: Any) -> Callable[[F], F]: ...


def observe(kind: Any = "chain", name: str | None = None, **options: Any) -> Any:
    """Record each call of the decorated function as an OpenTelemetry GenAI span.

    ``kind`` is ``"agent"``, ``"llm"``, ``"retriever"``, ``"tool"`` or ``"chain"`` (the default);
    ``name`` defaults to the function's name. Options: ``model``, ``provider`` (llm),
    ``description``, ``tool_call_id`` (tool), ``conversation_id_arg`` (agent), ``input_arg``,
    ``attributes`` (static extra attributes), ``capture_input`` / ``capture_output`` (bool).
    The function behaves exactly as before: same results, same exceptions, same generator
    protocol::

        @observe(kind="retriever")
        def search(query: str) -> list[dict]:
            return [{"id": "d1", "score": 0.9, "content": "Refunds take 5 days."}]

        @observe  # a plain "chain" step
        def pipeline(question: str) -> str: ...
    """
    if callable(kind) or isinstance(kind, (classmethod, staticmethod)):
        return _decorate(kind, "chain", name, options)

    # Validate now, so a typo fails at import time rather than on the first call.
    _Plan(lambda: None, kind, name, options)

    def decorator(fn: F) -> F:
        return _decorate(fn, kind, name, options)  # type: ignore[no-any-return]

    return decorator
