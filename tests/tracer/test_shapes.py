"""@observe keeps every function shape behaving exactly as before, and parents spans correctly."""

from __future__ import annotations

import asyncio
import contextvars
import gc
import json
import threading
import traceback
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.trace import StatusCode

from spanjudge.tracer import observe
from tests.tracer.conftest import Spans


class Boom(Exception):
    pass


def _raise_boom() -> None:
    raise Boom("inner")


# --- plain functions ------------------------------------------------------------------------


def test_sync_function_returns_the_same_object(spans: Spans) -> None:
    marker = object()

    @observe
    def identity(x: object) -> object:
        return x

    assert identity(marker) is marker
    assert spans.names() == ["invoke_workflow identity"]
    assert identity.__name__ == "identity"


def test_exception_is_the_same_object_with_its_traceback(spans: Spans) -> None:
    @observe(kind="tool")
    def failing() -> None:
        _raise_boom()

    with pytest.raises(Boom) as info:
        failing()
    frames = [f.name for f in traceback.extract_tb(info.value.__traceback__)]
    assert frames[-2:] == ["failing", "_raise_boom"]
    span = spans.named("execute_tool failing")
    assert span.status.status_code is StatusCode.ERROR
    assert span.attributes["error.type"] == "Boom"
    assert [e.name for e in span.events] == ["exception"]

    original = Boom("kept")

    @observe
    def reraise() -> None:
        raise original

    with pytest.raises(Boom) as again:
        reraise()
    assert again.value is original


async def test_coroutine_span_covers_the_awaited_body(spans: Spans) -> None:
    seen: list[Any] = []

    @observe(kind="agent")
    async def agent(question: str) -> str:
        await asyncio.sleep(0)
        seen.append(trace.get_current_span().get_span_context().span_id)
        return question.upper()

    coro = agent("hi")
    assert spans.all() == []  # creating the coroutine starts nothing
    assert await coro == "HI"
    span = spans.named("invoke_agent agent")
    assert seen == [span.context.span_id]


async def test_async_exception_is_the_same_object(spans: Spans) -> None:
    original = Boom("async")

    @observe
    async def failing() -> None:
        await asyncio.sleep(0)
        raise original

    with pytest.raises(Boom) as info:
        await failing()
    assert info.value is original
    assert spans.named("invoke_workflow failing").status.status_code is StatusCode.ERROR


async def test_cancellation_ends_the_span_with_error_and_reraises(spans: Spans) -> None:
    started = asyncio.Event()

    @observe(kind="llm", model="m")
    async def slow() -> str:
        started.set()
        await asyncio.sleep(60)
        return "never"

    task = asyncio.create_task(slow())
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    span = spans.named("chat m")
    assert span.status.status_code is StatusCode.ERROR
    assert span.attributes["error.type"] == "CancelledError"
    assert span.end_time is not None


# --- generators -------------------------------------------------------------------------------


def test_generator_send_throw_close_semantics(spans: Spans) -> None:
    log: list[Any] = []

    @observe
    def echo() -> Iterator[int]:
        total = 0
        try:
            while True:
                try:
                    received = yield total
                except Boom:
                    log.append("caught")
                    received = 100
                total += received or 0
        finally:
            log.append("closed")

    gen = echo()
    assert spans.all() == []  # nothing runs until the first next()
    assert next(gen) == 0
    assert gen.send(5) == 5
    assert gen.throw(Boom("x")) == 105
    gen.close()
    assert log == ["caught", "closed"]
    (span,) = spans.all()
    assert span.name == "invoke_workflow echo"
    assert span.status.status_code is StatusCode.UNSET
    assert span.attributes["spanjudge.output"] == "[0,5,105]"


def test_generator_return_value_and_exhaustion(spans: Spans) -> None:
    @observe(kind="llm", model="m")
    def stream() -> Iterator[str]:
        yield "Hel"
        yield "lo"
        return "done"

    gen = stream()
    assert list(gen) == ["Hel", "lo"]
    with pytest.raises(StopIteration):
        next(gen)
    span = spans.named("chat m")
    assert '"content":"Hello"' in span.attributes["gen_ai.output.messages"]


def test_generator_exception_passes_through(spans: Spans) -> None:
    original = Boom("gen")

    @observe
    def broken() -> Iterator[int]:
        yield 1
        raise original

    gen = broken()
    assert next(gen) == 1
    with pytest.raises(Boom) as info:
        next(gen)
    assert info.value is original
    assert spans.named("invoke_workflow broken").status.status_code is StatusCode.ERROR


def test_thrown_exception_not_handled_propagates_same_object(spans: Spans) -> None:
    @observe
    def gen_fn() -> Iterator[int]:
        yield 1
        yield 2

    gen = gen_fn()
    next(gen)
    thrown = Boom("thrown")
    with pytest.raises(Boom) as info:
        gen.throw(thrown)
    assert info.value is thrown
    assert len(spans.all()) == 1


def test_early_break_ends_the_span_once(spans: Spans) -> None:
    closed: list[bool] = []

    @observe(kind="retriever")
    def docs(query: str) -> Iterator[str]:
        try:
            yield "a"
            yield "b"
            yield "c"
        finally:
            closed.append(True)

    for item in docs("q"):
        if item == "b":
            break
    gc.collect()
    assert closed == [True]
    (span,) = spans.all()
    assert span.attributes["spanjudge.retrieval.documents.content"] == '["a","b"]'


def test_garbage_collected_unfinished_generator_ends_its_span(spans: Spans) -> None:
    @observe
    def numbers() -> Iterator[int]:
        yield 1
        yield 2

    gen = numbers()
    next(gen)
    assert spans.all() == []
    del gen
    gc.collect()
    assert spans.names() == ["invoke_workflow numbers"]


def test_generator_span_is_not_current_while_suspended(spans: Spans) -> None:
    tracer = trace.get_tracer("test")

    @observe(kind="llm", model="m")
    def stream() -> Iterator[str]:
        with tracer.start_as_current_span("inside generator"):
            yield "a"
        yield "b"

    with tracer.start_as_current_span("consumer") as consumer:
        for _ in stream():
            assert trace.get_current_span() is consumer
            with tracer.start_as_current_span("consumer step"):
                pass
    by_name = {s.name: s for s in spans.all()}
    consumer_id = by_name["consumer"].context.span_id
    assert by_name["chat m"].parent.span_id == consumer_id
    assert by_name["inside generator"].parent.span_id == by_name["chat m"].context.span_id
    steps = [s for s in spans.all() if s.name == "consumer step"]
    assert len(steps) == 2
    assert all(s.parent.span_id == consumer_id for s in steps)


async def test_async_generator_protocol_and_parenting(spans: Spans) -> None:
    tracer = trace.get_tracer("test")

    @observe(kind="llm", model="m")
    async def stream() -> AsyncIterator[str]:
        received = yield "a"
        with tracer.start_as_current_span("inside"):
            yield f"b{received}"
        yield "c"

    with tracer.start_as_current_span("consumer") as consumer:
        agen = stream()
        assert await agen.__anext__() == "a"
        assert trace.get_current_span() is consumer
        assert await agen.asend("!") == "b!"
        assert trace.get_current_span() is consumer
        assert await agen.__anext__() == "c"
        with pytest.raises(StopAsyncIteration):
            await agen.__anext__()
    by_name = {s.name: s for s in spans.all()}
    assert by_name["chat m"].parent.span_id == by_name["consumer"].context.span_id
    assert by_name["inside"].parent.span_id == by_name["chat m"].context.span_id
    assert '"content":"ab!c"' in by_name["chat m"].attributes["gen_ai.output.messages"]


async def test_async_generator_early_break_and_athrow(spans: Spans) -> None:
    closed: list[bool] = []

    @observe
    async def numbers() -> AsyncIterator[int]:
        try:
            for i in range(10):
                try:
                    yield i
                except Boom:
                    yield -1
        finally:
            closed.append(True)

    agen = numbers()
    assert await agen.__anext__() == 0
    assert await agen.athrow(Boom()) == -1
    await agen.aclose()
    assert closed == [True]

    async for i in numbers():
        if i == 2:
            break
    await asyncio.sleep(0)
    gc.collect()
    await asyncio.sleep(0)
    assert len(spans.all()) == 2
    assert all(s.end_time is not None for s in spans.all())


async def test_async_generator_cancellation(spans: Spans) -> None:
    started = asyncio.Event()

    @observe
    async def ticks() -> AsyncIterator[int]:
        started.set()
        await asyncio.sleep(60)
        yield 1

    async def consume() -> None:
        async for _ in ticks():
            pass

    task = asyncio.create_task(consume())
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    span = spans.named("invoke_workflow ticks")
    assert span.status.status_code is StatusCode.ERROR


# --- methods ----------------------------------------------------------------------------------


class Bot:
    prefix = "bot"

    def __init__(self, name: str) -> None:
        self.name = name

    @observe(kind="agent")
    def answer(self, question: str) -> str:
        return f"{self.name}:{question}"

    @classmethod
    @observe(kind="tool")
    def inner_classmethod(cls, x: int) -> str:
        return f"{cls.prefix}{x}"

    @observe(kind="tool")
    @classmethod
    def outer_classmethod(cls, x: int) -> str:
        return f"{cls.prefix}{x}"

    @staticmethod
    @observe(kind="tool")
    def inner_static(x: int) -> int:
        return x * 2

    @observe(kind="tool")
    @staticmethod
    def outer_static(x: int) -> int:
        return x * 3

    @observe(kind="chain")
    async def async_method(self, x: int) -> int:
        return x + 1


async def test_methods_of_every_kind(spans: Spans) -> None:
    bot = Bot("b")
    assert bot.answer("q") == "b:q"
    assert Bot.inner_classmethod(1) == "bot1"
    assert Bot.outer_classmethod(2) == "bot2"
    assert bot.outer_classmethod(2) == "bot2"
    assert Bot.inner_static(2) == 4
    assert Bot.outer_static(2) == 6
    assert bot.outer_static(2) == 6
    assert await bot.async_method(1) == 2
    names = spans.names()
    assert "invoke_agent Bot.answer" in names
    assert "execute_tool Bot.outer_classmethod" in names
    assert "invoke_workflow Bot.async_method" in names
    answer = spans.named("invoke_agent Bot.answer")
    # self is not the user's input: the question is
    assert '"content":"q"' in answer.attributes["gen_ai.input.messages"]
    tool = spans.named("execute_tool Bot.inner_classmethod")
    assert tool.attributes["gen_ai.tool.call.arguments"] == '{"x":1}'


# --- context propagation ----------------------------------------------------------------------


def test_nested_spans_parent_correctly(spans: Spans) -> None:
    @observe(kind="tool")
    def leaf() -> int:
        return 1

    @observe(kind="llm", model="m")
    def middle() -> int:
        return leaf() + leaf()

    @observe(kind="agent")
    def root() -> int:
        return middle()

    assert root() == 2
    by_name: dict[str, list[Any]] = {}
    for s in spans.all():
        by_name.setdefault(s.name, []).append(s)
    (root_span,) = by_name["invoke_agent root"]
    (middle_span,) = by_name["chat m"]
    assert root_span.parent is None
    assert middle_span.parent.span_id == root_span.context.span_id
    assert [s.parent.span_id for s in by_name["execute_tool leaf"]] == [
        middle_span.context.span_id
    ] * 2
    assert {s.context.trace_id for s in spans.all()} == {root_span.context.trace_id}


def test_context_carried_into_threads_with_copy_context(spans: Spans) -> None:
    @observe(kind="tool")
    def in_thread() -> str:
        return "ok"

    @observe(kind="agent")
    def root() -> None:
        ctx = contextvars.copy_context()
        thread = threading.Thread(target=ctx.run, args=(in_thread,))
        thread.start()
        thread.join()

    root()
    assert spans.named("execute_tool in_thread").parent.span_id == (
        spans.named("invoke_agent root").context.span_id
    )


async def test_context_carried_into_asyncio_tasks(spans: Spans) -> None:
    @observe(kind="tool")
    async def child(i: int) -> int:
        await asyncio.sleep(0)
        return i

    @observe(kind="agent")
    async def root() -> list[int]:
        return list(await asyncio.gather(*(asyncio.create_task(child(i)) for i in range(3))))

    assert await root() == [0, 1, 2]
    root_id = spans.named("invoke_agent root").context.span_id
    children = [s for s in spans.all() if s.name == "execute_tool child"]
    assert len(children) == 3
    assert all(s.parent.span_id == root_id for s in children)


def test_unknown_option_and_kind_fail_at_decoration() -> None:
    options: dict[str, Any] = {"modle": "typo"}  # a dict, as a caller's typo mypy cannot see
    with pytest.raises(TypeError, match="unexpected keyword argument 'modle'"):
        observe(kind="llm", **options)
    with pytest.raises(TypeError, match="unexpected keyword argument 'modle'"):
        observe(**options)
    with pytest.raises(ValueError, match="kind must be one of"):
        observe(kind="embedding")  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="positional"):
        observe("llm", "name", "gpt-4o")  # type: ignore[call-overload]


def test_options_are_typed_keyword_only_parameters() -> None:
    import inspect
    from typing import get_args

    from spanjudge.tracer import Kind
    from spanjudge.tracer._attributes import KINDS

    assert KINDS == get_args(Kind) == ("agent", "llm", "retriever", "tool", "chain")
    params = inspect.signature(observe).parameters
    assert [p.name for p in params.values() if p.kind is p.POSITIONAL_OR_KEYWORD] == [
        "kind",
        "name",
    ]
    keyword_only = {n: p.default for n, p in params.items() if p.kind is p.KEYWORD_ONLY}
    assert keyword_only == {
        "model": None,
        "provider": None,
        "description": None,
        "tool_call_id": None,
        "conversation_id_arg": None,
        "input_arg": None,
        "attributes": None,
        "capture_input": True,
        "capture_output": True,
    }
    assert not any(p.kind is p.VAR_KEYWORD for p in params.values())


def test_bare_observe_takes_the_options_too(spans: Spans) -> None:
    def step(question: str) -> str:
        return question

    # Untyped (the bare overload takes the function alone) but accepted, as it always was.
    options: dict[str, Any] = {"attributes": {"team": "search"}, "capture_input": False}
    wrapped = observe(step, **options)
    assert wrapped("hi") == "hi"
    span = spans.named("invoke_workflow step")
    assert span.attributes["team"] == "search"
    assert "spanjudge.input" not in span.attributes


async def test_sampled_out_calls_carry_the_trace_but_record_nothing(spans: Spans) -> None:
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

    parent = NonRecordingSpan(
        SpanContext(0x1234, 0x5678, is_remote=True, trace_flags=TraceFlags(TraceFlags.DEFAULT))
    )
    seen: list[tuple[int, bool]] = []

    @observe(kind="agent")
    def agent(question: str) -> str:
        current = trace.get_current_span()
        seen.append((current.get_span_context().trace_id, current.is_recording()))
        return question

    @observe(kind="agent")
    async def async_agent(question: str) -> str:
        return agent(question)

    agent("recorded first")  # makes the function "warm"
    with trace.use_span(parent):
        assert agent("dropped") == "dropped"
        assert await async_agent("dropped too") == "dropped too"
    agent("recorded again")
    assert seen[1] == (0x1234, False) and seen[2] == (0x1234, False)
    recorded = [s for s in spans.all() if s.name == "invoke_agent agent"]
    contents = [
        json.loads(s.attributes["gen_ai.input.messages"])[0]["parts"][0]["content"]
        for s in recorded
    ]
    assert contents == ["recorded first", "recorded again"]


class _HostileChunk:
    """A streamed chunk that refuses every attribute lookup."""

    def __getattr__(self, name: str) -> Any:
        raise RuntimeError(f"no {name} here")


def test_odd_stream_chunks_never_raise_into_the_consumer(spans: Any) -> None:
    chunks: list[Any] = [_HostileChunk(), {"choices": 5}, {"choices": [{"delta": 3}]}]

    @observe(kind="llm", name="odd-stream")
    def stream() -> Any:
        yield from chunks

    @observe(kind="llm", name="odd-astream")
    async def astream() -> Any:
        for chunk in chunks:
            yield chunk

    async def consume() -> list[Any]:
        return [c async for c in astream()]

    assert list(stream()) == chunks
    assert asyncio.run(consume()) == chunks
    assert len([s for s in spans.all() if s.name.startswith("chat")]) >= 2  # both spans ended
