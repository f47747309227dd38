"""The per-call side of ``@observe``: one wrapper per kind of callable.

A function, a coroutine function, a generator function and an async generator function each get
a wrapper that starts the call's span (:func:`_begin`; the sync wrapper, the one most calls go
through, writes out its fast half and shares :func:`_begin_general`), makes it current only
while the wrapped code runs, records the outcome through the
:class:`~spanjudge.tracer._decoration_plan.Plan` and ends the span exactly once. Everything a
wrapper reads per call is a closure cell or one module global: the context functions are imported
by name, not looked up through their module.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context, attach, detach, get_current
from opentelemetry.trace import Status, StatusCode, set_span_in_context

from spanjudge.tracer import _attributes as attrs
from spanjudge.tracer import _capture as capture
from spanjudge.tracer import _context
from spanjudge.tracer._context import CONVERSATION
from spanjudge.tracer._decoration_plan import Plan
from spanjudge.tracer._version import __version__

# Streams longer than this keep their first chunks only; the span records that it was cut.
_MAX_CHUNKS = 10_000

_tracer: trace.Tracer | None = None
# Bound once: a method looked up on the context variable per call is not cached by CPython 3.11.
_conversation = CONVERSATION.get
# start_span's positional parameters are (name, context, kind, attributes) in the API's Tracer:
# positional arguments take CPython's fast call path, keywords do not.
INTERNAL = trace.SpanKind.INTERNAL


def _get_tracer() -> trace.Tracer:
    # Resolved on first call, through the global (proxy) provider: an SDK provider set later by
    # the app, by configure() or by a test fixture is picked up without re-decorating anything.
    global _tracer
    if _tracer is None:
        _tracer = trace.get_tracer(attrs.TRACER_NAME, __version__)
    return _tracer


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


def _begin(
    plan: Plan, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[Any, Mapping[str, Any] | None, Context | None]:
    """Start the call's span: the start path of the async and generator wrappers (the sync one
    writes out its first half, the fast path).

    Returns the span; what the decorator may assume is already on it (``None`` when the span is
    not recording); and the current context if it was read here (``None``: not read, and
    ``set_span_in_context`` reads it), so the wrapper does not read it again.
    """
    start = plan.hot_start
    if start is None or not plan.warm:
        return _begin_general(plan, args, kwargs, None)
    ctx = get_current()  # read once, handed to the SDK (which would read it 4 times)
    try:
        known = start(args, kwargs)  # the fast path (spanjudge.tracer._fast_path) or None
    except Exception:  # an odd argument: the general path records it (or the failure)
        known = None
    if known is None:
        return _begin_general(plan, args, kwargs, ctx)
    span = (_tracer or _get_tracer()).start_span(plan.span_name, ctx, INTERNAL, known)
    if span.is_recording():
        return span, known, ctx
    plan.warm = False
    return span, None, ctx


def _begin_general(
    plan: Plan, args: tuple[Any, ...], kwargs: dict[str, Any], ctx: Context | None
) -> tuple[Any, Mapping[str, Any] | None, Context | None]:
    """``_begin`` for every call the fast path does not take; ``ctx``: the current context if
    already read (``None``: the SDK reads it)."""
    if plan.fixed and _conversation() is None:
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
    span = (_tracer or _get_tracer()).start_span(name, ctx, INTERNAL, attributes)
    if not span.is_recording():
        plan.warm = False
        return span, None, ctx
    if not warm:
        plan.warm = True
        try:
            plan.on_start(span, args, kwargs)
        except Exception as failure:
            capture.note_failure(failure)
    return span, attributes, ctx


def _enter_conversation(plan: Plan, known: Mapping[str, Any]) -> Any:
    """An agent given its conversation id as an argument: its children carry the id too."""
    conv_id = known.get(attrs.GEN_AI_CONVERSATION_ID)
    current = CONVERSATION.get()
    if conv_id is None or (current is not None and current[0] == conv_id):
        return None
    return CONVERSATION.set((conv_id, known.get(attrs.SPANJUDGE_USER_ID)))


def wrap_function(fn: Callable[..., Any], plan: Plan) -> Callable[..., Any]:
    hot_start, hot_end, span_name = plan.hot_start, plan.hot_end, plan.span_name

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        # _begin's fast half, written out: the call and its returned tuple cost ~700 instructions
        # (callgrind), 0.5% of a raw span, on the path most calls take
        known: Mapping[str, Any] | None = None
        if hot_start is not None and plan.warm:
            ctx = get_current()
            try:
                known = hot_start(args, kwargs)
            except Exception:
                known = None
        else:
            ctx = None
        if known is None:
            span, known, ctx = _begin_general(plan, args, kwargs, ctx)
        else:
            span = (_tracer or _get_tracer()).start_span(span_name, ctx, INTERNAL, known)
            if not span.is_recording():
                plan.warm = False
                known = None
        if known is None:
            if not span.get_span_context().is_valid:
                return fn(*args, **kwargs)  # no SDK: nothing to carry, nothing to record
            token = attach(set_span_in_context(span, ctx))
            try:
                return fn(*args, **kwargs)  # sampled out: still carry the trace to children
            finally:
                detach(token)
                span.end()
        writes = _context.writes
        conv_token = _enter_conversation(plan, known) if plan.conv_from_arg else None
        token = attach(set_span_in_context(span, ctx))
        try:
            # fn(*args, **kwargs) copies kwargs into a new dict even when it is empty
            result = fn(*args, **kwargs) if kwargs else fn(*args)
        except BaseException as exc:
            detach(token)
            if conv_token is not None:
                CONVERSATION.reset(conv_token)
            _record_error(span, exc)
            span.end()
            raise
        detach(token)
        if conv_token is not None:
            CONVERSATION.reset(conv_token)
        try:
            if writes != _context.writes:  # a handle wrote to the span: read it back
                plan.on_end(span, result, None)
            else:  # what the span was started with is all it has
                try:
                    done = hot_end is not None and hot_end(span, result)
                except Exception:  # an odd result: the general path records it
                    done = False
                if not done:
                    plan.on_end(span, result, known)
        except Exception as failure:
            capture.note_failure(failure)
        span.end()
        return result

    return wrapper


def wrap_coroutine(fn: Callable[..., Any], plan: Plan) -> Callable[..., Any]:
    @functools.wraps(fn)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        # The span starts when the coroutine runs (is awaited), not when it is created.
        span, known, ctx = _begin(plan, args, kwargs)
        if known is None and not span.get_span_context().is_valid:
            return await fn(*args, **kwargs)
        conv_token = (
            _enter_conversation(plan, known) if known is not None and plan.conv_from_arg else None
        )
        token = attach(set_span_in_context(span, ctx))
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
            detach(token)
            if conv_token is not None:
                CONVERSATION.reset(conv_token)
            span.end()

    return wrapper


def wrap_generator(fn: Callable[..., Any], plan: Plan) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        # Runs at the first next(): that is when the span starts.
        span, known, current = _begin(plan, args, kwargs)
        recording = known is not None
        if not recording and not span.get_span_context().is_valid:
            return (yield from fn(*args, **kwargs))
        ctx = set_span_in_context(span, current)
        chunks: list[Any] = []
        gen = fn(*args, **kwargs)
        method: Callable[[Any], Any] = gen.send
        arg: Any = None
        try:
            while True:
                # The span is current only while the generator's own code runs; at a yield the
                # consumer's context is left exactly as it was.
                token = attach(ctx)
                try:
                    value = method(arg)
                finally:
                    detach(token)
                if recording and len(chunks) < _MAX_CHUNKS:
                    chunks.append(value)
                try:
                    arg = yield value
                    method = gen.send
                except GeneratorExit:
                    # close(), early break, or garbage collection of the consumer's iterator
                    token = attach(ctx)
                    try:
                        gen.close()
                    finally:
                        detach(token)
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


def wrap_async_generator(fn: Callable[..., Any], plan: Plan) -> Callable[..., Any]:
    @functools.wraps(fn)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        span, known, current = _begin(plan, args, kwargs)
        recording = known is not None
        # No SDK (invalid span): leave the OpenTelemetry context alone, but keep the protocol.
        ctx = set_span_in_context(span, current) if span.get_span_context().is_valid else None
        chunks: list[Any] = []
        agen = fn(*args, **kwargs)
        method: Callable[[Any], Any] = agen.asend
        arg: Any = None
        try:
            while True:
                token = attach(ctx) if ctx is not None else None
                try:
                    value = await method(arg)
                finally:
                    if token is not None:
                        detach(token)
                if recording and len(chunks) < _MAX_CHUNKS:
                    chunks.append(value)
                try:
                    arg = yield value
                    method = agen.asend
                except GeneratorExit:
                    token = attach(ctx) if ctx is not None else None
                    try:
                        await agen.aclose()
                    finally:
                        if token is not None:
                            detach(token)
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
