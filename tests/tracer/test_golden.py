"""Golden spans: what ``@observe`` records for every kind and input shape, byte for byte.

The per-call path of the tracer has fast paths for the common shapes (plain strings, flat dicts,
lists of strings) beside the general capture code. This test pins the exported spans (name,
attributes, status, event names) of many scenarios to ``golden_spans.json``, which was written by
the general code before any fast path existed (the tracer of commit 70eca76, every scenario
included): a fast path that records anything different fails here. Every scenario calls its
functions twice, because the first call of a decorated function
captures its inputs onto the started span and later calls hand them to ``start_span``.

To rewrite the file after an intended change of what is recorded (review the diff)::

    python -m tests.tracer.test_golden
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
import sys
from collections.abc import AsyncIterator, Callable, Generator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan

from spanjudge.tracer import _capture as capture
from spanjudge.tracer import conversation, current_span, observe
from tests.tracer.conftest import Spans

GOLDEN = Path(__file__).with_name("golden_spans.json")
_RANDOM_CALL_ID = re.compile(r"^call_[0-9a-f]{16}$")

ASCII = "What is the capital of France?"
UNICODE = 'Grüße, "Zoë" \\ naïve \u2028 日本語 \U0001f600\ttab\nline'
SURROGATE = "bad \ud800 half"
LONG = "x" * 80 + "é" * 30


@dataclasses.dataclass
class Point:
    x: int
    y: float


class Reprable:
    def __repr__(self) -> str:
        return "<Reprable>"


def _kinds_on(value: Any, *, repeat: int = 2, **options: Any) -> None:
    """Every kind's function, called ``repeat`` times on ``value``, returning it."""
    for kind in ("agent", "llm", "retriever", "tool", "chain"):

        @observe(kind=kind, name=f"echo_{kind}", **options)
        def echo(question: Any) -> Any:
            return question

        for _ in range(repeat):
            echo(value)


def _shapes(value_in: Any, value_out: Any) -> None:
    for kind in ("agent", "llm", "retriever", "tool", "chain"):

        @observe(kind=kind, name=f"shape_{kind}")
        def shape(query: Any, extra: Any = None, *rest: Any, **more: Any) -> Any:
            return value_out

        shape(value_in)
        shape(value_in, 7, "r1", "r2", flag=True)
        shape(query=value_in, extra=None)


def scenario_ascii() -> None:
    _kinds_on(ASCII)


def scenario_unicode() -> None:
    _kinds_on(UNICODE)


def scenario_surrogate() -> None:
    _kinds_on(SURROGATE)


def scenario_empty_string() -> None:
    _kinds_on("")


def scenario_long_values_cut() -> None:
    capture.set_policy(max_value_length=60)
    _kinds_on(LONG)
    _kinds_on(["a" * 40, "b" * 40])
    _kinds_on({"k": "v" * 70})


def scenario_tiny_limit() -> None:
    capture.set_policy(max_value_length=5)
    _kinds_on("abcdef")
    _kinds_on("abc")


def scenario_pii_and_redaction() -> None:
    capture.set_policy(pii=True)
    _kinds_on("mail jane@example.com or call +1 415-555-0132")
    capture.set_policy(redact=lambda key, text: f"{key}|{text[:12]}")
    _kinds_on("secret value here")


def scenario_failing_redaction() -> None:
    def redact(key: str, text: str) -> str:
        raise RuntimeError("no")

    capture.set_policy(redact=redact)
    _kinds_on(ASCII)


def scenario_content_off() -> None:
    capture.set_policy(content=False)
    _kinds_on(ASCII)
    _kinds_on([{"id": "d1", "score": 0.5, "content": "text"}])


def scenario_capture_flags_off() -> None:
    _kinds_on(ASCII, capture_input=False)
    _kinds_on(ASCII, capture_output=False)
    _kinds_on(ASCII, capture_input=False, capture_output=False)


def scenario_static_options() -> None:
    _kinds_on(ASCII, attributes={"team": "search", "version": 3, "ratio": 0.5, "on": True})
    _kinds_on(ASCII, model="openai/gpt-4o-mini")
    _kinds_on(ASCII, model="gpt-4o", provider="azure")
    _kinds_on(ASCII, description="Looks things up", tool_call_id="call-fixed")


def scenario_values_of_every_shape() -> None:
    values: list[Any] = [
        None,
        0,
        -3,
        2.5,
        float("nan"),
        float("inf"),
        True,
        b"raw bytes \xff",
        [],
        {},
        [ASCII, UNICODE],
        ["a", 1, None, 2.0, False],
        ("t", "u"),
        {"question": ASCII, "n": 3, "nested": {"deep": [1, {"x": None}]}},
        {1: "int key", (2, 3): "tuple key"},
        {"set": {1}},
        Point(1, 2.0),
        Reprable(),
        [[["deep"]]],
    ]
    for value in values:
        _kinds_on(value, repeat=1)


def scenario_odd_scalars() -> None:
    class Text(str):
        pass

    class Table(dict[str, Any]):
        pass

    values: list[Any] = [
        10**5000,  # more digits than int -> str allows by default
        -(10**5000),
        10**599,
        Text("a str subclass"),
        Table(a=1),
        [10**5000],
        {"k": 10**5000},
        {"a": 1, "b": True, "c": None, "d": "e", "f": 1.5},
        list(range(20)),
        {str(i): i for i in range(20)},
    ]
    for value in values:
        _kinds_on(value)


def scenario_argument_shapes() -> None:
    _shapes(ASCII, ASCII)
    _shapes(UNICODE, {"answer": UNICODE, "n": 1})
    _shapes({"q": 1}, [ASCII, "second"])
    _shapes(7, None)


def scenario_no_arguments_and_positional() -> None:
    for kind in ("agent", "llm", "retriever", "tool", "chain"):

        @observe(kind=kind, name=f"none_{kind}")
        def none() -> str:
            return "done"

        @observe(kind=kind, name=f"pos_{kind}")
        def pos(a: int, b: str, /, c: float = 1.0) -> str:
            return b

        @observe(kind=kind, name=f"star_{kind}")
        def star(*args: Any, **kwargs: Any) -> Any:
            return args

        for _ in range(2):
            none()
            pos(1, "two", 3.0)
            star("one", 2, key="value")
            star()


def scenario_methods() -> None:
    class Service:
        @observe(kind="tool")
        def lookup(self, question: str) -> str:
            return question.upper()

        @observe(kind="chain")
        @classmethod
        def build(cls, text: str) -> str:
            return text

        @observe(kind="llm")
        @staticmethod
        def ask(prompt: str) -> str:
            return prompt[::-1]

    for _ in range(2):
        Service().lookup(ASCII)
        Service.build("built")
        Service.ask("abc")


def _llm_functions(answer: Any) -> tuple[Callable[..., Any], Callable[..., Any]]:
    @observe(kind="llm")
    def chat(messages: Any, model: str = "openai/gpt-4o") -> Any:
        return answer

    @observe(kind="llm")
    def bare(prompt: str) -> Any:
        return answer

    return chat, bare


def scenario_llm_responses() -> None:
    response = {
        "id": "chatcmpl-1",
        "model": "gpt-4o-mini-2024",
        "choices": [
            {
                "message": {
                    "role": "assistant",
                    "content": "Paris.",
                    "tool_calls": [
                        {"id": "t1", "function": {"name": "lookup", "arguments": '{"q":"x"}'}}
                    ],
                },
                "finish_reason": "tool_calls",
            }
        ],
        "usage": {"prompt_tokens": 12, "completion_tokens": 3},
    }
    obj = SimpleNamespace(
        id="r-2",
        model="claude",
        choices=[SimpleNamespace(message=SimpleNamespace(role="assistant", content="Hi"))],
        usage=SimpleNamespace(input_tokens=5, output_tokens=1),
    )
    legacy = {"choices": [{"text": "old style", "finish_reason": "length"}]}
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "part"}, {"type": "image"}]},
        {"role": "tool", "tool_call_id": "t1", "content": "42"},
    ]

    for answer in (response, obj, legacy, {"no": "choices"}, None, 42):
        chat, bare = _llm_functions(answer)
        for _ in range(2):
            chat(messages)
            chat(messages=messages, model="anthropic/claude-3")
            chat("plain text messages")
            bare("hello")

    @observe(kind="llm")
    def first_arg_messages(history: Any) -> str:
        return "ok"

    @observe(kind="agent")
    def agent_messages(question: Any) -> str:
        return "ok"

    for _ in range(2):
        first_arg_messages(messages)
        agent_messages(messages)
        agent_messages({"role": "user"})


def scenario_retriever_documents() -> None:
    docs: list[Any] = [
        ["plain one", "plain two"],
        ["s"] * 300,
        [{"id": "d1", "score": 0.9, "content": "Refunds take 5 days."}, {"text": "no id"}],
        [SimpleNamespace(page_content="lc doc", metadata={"id": "m1", "score": 0.3})],
        [({"id": "p", "content": "paired"}, 0.75), ("tuple", "of strings")],
        ("tuple", "docs"),
        "a single string",
        None,
        42,
        [{"id": 5, "score": True, "content": {"rich": "object"}}],
    ]
    for value in docs:
        search = observe(kind="retriever", name="search")(lambda query, value=value: value)
        for _ in range(2):
            search("refunds")


def scenario_tool_call_ids() -> None:
    @observe(kind="tool")
    def with_id(x: int, tool_call_id: str = "unset") -> int:
        return x

    for _ in range(2):
        with_id(1, tool_call_id="call-from-arg")
        with_id(2)


def scenario_conversations() -> None:
    @observe(kind="agent")
    def agent(question: str, conversation_id: str | None = None) -> str:
        inner(question)
        return "answer"

    @observe(kind="agent", conversation_id_arg="thread")
    def threaded(thread: str, text: str) -> str:
        return text

    @observe(kind="tool")
    def inner(question: str) -> str:
        return question

    for _ in range(2):
        agent("q1", conversation_id="conv-1")
        agent("q2")
        threaded("t-9", "hello")
        with conversation("chat-42", user_id="u-7"):
            agent("q3")
            inner("q4")
            with conversation("nested"):
                inner("q5")
        with conversation("c-1", user_id=None):
            agent("q6", conversation_id="conv-own")


def scenario_handle_writes() -> None:
    @observe(kind="llm")
    def handled(prompt: str) -> str:
        span = current_span()
        span.set_model("gpt-4o-mini", provider="openai")
        span.set_usage(input_tokens=12, output_tokens=30)
        span.set_metadata(experiment="b", n=1)
        span.set_metadata(more=[1, 2])
        span.set_attribute("custom.list", ["a", "b"])
        span.set_attribute("custom.obj", {"k": "v"})
        return "result"

    @observe(kind="tool")
    def replaced(x: str) -> str:
        current_span().set_output({"shown": x})
        return "hidden"

    @observe(kind="retriever")
    def chosen(query: str) -> list[str]:
        current_span().set_output([{"id": "x", "score": 1}])
        return ["ignored"]

    @observe(kind="chain")
    def chained(x: str) -> str:
        current_span().set_output("explicit")
        return "implicit"

    for _ in range(2):
        handled("p")
        replaced("v")
        chosen("q")
        chained("c")


def scenario_output_set_through_the_handle() -> None:
    for kind, key in (
        ("llm", "gen_ai.output.messages"),
        ("agent", "gen_ai.output.messages"),
        ("tool", "gen_ai.tool.call.result"),
        ("chain", "spanjudge.output"),
        ("retriever", "gen_ai.retrieval.documents"),
    ):
        sync, coro = _presetting(kind, key)
        for _ in range(2):
            sync("q")
            asyncio.run(coro("q"))


def _presetting(kind: str, key: str) -> tuple[Any, Any]:
    @observe(kind=kind, name=f"preset_{kind}")
    def sync(question: str) -> str:
        current_span().set_attribute(key, "set by hand")
        return "returned"

    @observe(kind=kind, name=f"apreset_{kind}")
    async def coro(question: str) -> str:
        current_span().set_attribute(key, "set by hand")
        await asyncio.sleep(0)
        return "returned"

    return sync, coro


def scenario_concurrent_coroutines() -> None:
    @observe(kind="llm")
    async def writes_usage(prompt: str) -> str:
        await asyncio.sleep(0)
        current_span().set_usage(input_tokens=3, output_tokens=4)
        await asyncio.sleep(0)
        return "with usage"

    @observe(kind="tool")
    async def quiet(x: str) -> str:
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        return x

    async def both() -> None:
        await asyncio.gather(writes_usage("p"), quiet("a"), quiet("b"), writes_usage("r"))

    for _ in range(2):
        asyncio.run(both())


def scenario_policy_changes_between_calls() -> None:
    functions = []
    for kind in ("agent", "llm", "retriever", "tool", "chain"):

        @observe(kind=kind, name=f"switch_{kind}", tool_call_id="call-1")
        def switch(question: str) -> str:
            return question + "!"

        functions.append(switch)
    for change in (
        {},
        {"pii": True},
        {"pii": False, "max_value_length": 20},
        {"max_value_length": 16_384, "content": False},
        {"content": True, "redact": lambda key, text: text.upper()},
    ):
        capture.set_policy(**change)
        if "redact" not in change:
            capture.POLICY.redact = None
        for function in functions:
            function("call me at jane@example.com")
            function("call me at jane@example.com")


def scenario_errors() -> None:
    class Failure(Exception):
        pass

    for kind in ("agent", "llm", "retriever", "tool", "chain"):

        @observe(kind=kind, name=f"fail_{kind}")
        def fail(question: str) -> str:
            raise Failure(f"bad {question}")

        for _ in range(2):
            with pytest.raises(Failure):
                fail("input")


def _streams(kind: str, chunks: list[Any]) -> tuple[Any, Any, Any]:
    @observe(kind=kind, name=f"gen_{kind}")
    def gen(question: str) -> Generator[Any, None, str]:
        yield from chunks
        return "returned"

    @observe(kind=kind, name=f"agen_{kind}")
    async def agen(question: str) -> AsyncIterator[Any]:
        for chunk in chunks:
            yield chunk

    @observe(kind=kind, name=f"empty_{kind}")
    def empty(question: str) -> Generator[Any, None, str]:
        return "only returned"
        yield  # makes this a generator

    return gen, agen, empty


def scenario_generators() -> None:
    chunks_by_kind: dict[str, list[Any]] = {
        "llm": [
            {"choices": [{"delta": {"content": "Hel"}}], "model": "m-1"},
            {"choices": [{"delta": {"content": "lo"}}], "usage": {"prompt_tokens": 4}},
        ],
        "agent": ["a", "b"],
        "retriever": ["doc one", "doc two"],
        "tool": [1, 2],
        "chain": ["x", {"y": 1}],
    }
    for kind, chunks in chunks_by_kind.items():
        gen, agen, empty = _streams(kind, chunks)

        async def consume() -> list[Any]:
            return [chunk async for chunk in agen("q")]  # noqa: B023 - run in this iteration

        for _ in range(2):
            assert list(gen("q")) == chunks
            assert asyncio.run(consume()) == chunks
            assert list(empty("q")) == []
            early = gen("q")
            next(early)
            early.close()


def scenario_coroutines() -> None:
    for kind in ("agent", "llm", "retriever", "tool", "chain"):

        @observe(kind=kind, name=f"coro_{kind}")
        async def coro(question: str) -> str:
            await asyncio.sleep(0)
            return question.upper()

        for _ in range(2):
            assert asyncio.run(coro(ASCII)) == ASCII.upper()


SCENARIOS: dict[str, Callable[[], None]] = {
    name.removeprefix("scenario_"): fn
    for name, fn in sorted(globals().items())
    if name.startswith("scenario_") and callable(fn)
}


def _plain(value: Any) -> Any:
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    if isinstance(value, str) and _RANDOM_CALL_ID.match(value):
        return "call_<random>"
    return value


def _record(span: ReadableSpan) -> dict[str, Any]:
    return {
        "name": span.name,
        "attributes": {key: _plain(value) for key, value in (span.attributes or {}).items()},
        "status": [span.status.status_code.name, span.status.description],
        "events": [event.name for event in span.events],
    }


def _run(name: str, spans: Spans) -> list[dict[str, Any]]:
    spans.exporter.clear()
    capture.reset_policy()
    try:
        SCENARIOS[name]()
    finally:
        capture.reset_policy()
    return [_record(span) for span in spans.all()]


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_spans_match_the_golden_file(name: str, spans: Spans) -> None:
    expected = json.loads(GOLDEN.read_text())[name]
    got = json.loads(json.dumps(_run(name, spans)))  # the file's shape: tuples become lists
    assert len(got) == len(expected)
    for index, (got_span, expected_span) in enumerate(zip(got, expected, strict=True)):
        assert got_span == expected_span, f"{name}: span {index} ({expected_span['name']})"


def test_golden_file_covers_every_scenario() -> None:
    assert sorted(json.loads(GOLDEN.read_text())) == sorted(SCENARIOS)


def _write_golden() -> None:
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    provider = TracerProvider()
    trace.set_tracer_provider(provider)
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    spans = Spans(exporter, provider)
    golden = {name: _run(name, spans) for name in sorted(SCENARIOS)}
    # one span per line, so a diff shows which spans changed
    lines = []
    for name, recorded in golden.items():
        rows = ",\n  ".join(json.dumps(span, sort_keys=True) for span in recorded)
        lines.append(f" {json.dumps(name)}: [\n  {rows}\n ]")
    GOLDEN.write_text("{\n" + ",\n".join(lines) + "\n}\n")
    print(f"wrote {GOLDEN} ({sum(len(v) for v in golden.values())} spans)", file=sys.stderr)


if __name__ == "__main__":
    _write_golden()
