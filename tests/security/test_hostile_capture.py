"""@observe against hostile arguments and return values: the app's call is untouched.

Extends tests/tracer/test_capture.py (which covers a fixed list of odd values and a hypothesis
test of ``capture.dumps`` alone) with property tests of the whole decorator path, per span kind:
values 1000+ levels deep, cycles through lists, dicts and ``__dict__``, 10 MB strings and bytes,
10^6-element lists, non-UTF-8 bytes, lone surrogates, objects whose ``__repr__``/``__str__``
raise or return a non-str, whose ``__getattr__`` raises, NaN/inf, and containers whose
``__iter__`` raises. For every value the decorated function returns the very same object (or
raises the very same exception), nothing raises into the caller, and every captured attribute is
a valid OpenTelemetry value: content attributes are strings no longer than the configured limit
plus the truncation marker.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spanjudge import observe
from spanjudge.tracer import _attributes as attrs
from spanjudge.tracer import _capture as capture
from tests.tracer.conftest import Spans

LIMIT = 256
# the longest marker a cut value can carry (the dropped count has at most 8 digits here)
MARKER_ROOM = len(attrs.TRUNCATION_MARKER.format(dropped=10**8))
CONTENT_KEYS = frozenset(
    {
        attrs.GEN_AI_INPUT_MESSAGES,
        attrs.GEN_AI_OUTPUT_MESSAGES,
        attrs.GEN_AI_TOOL_CALL_ARGUMENTS,
        attrs.GEN_AI_TOOL_CALL_RESULT,
        attrs.GEN_AI_RETRIEVAL_QUERY_TEXT,
        attrs.GEN_AI_RETRIEVAL_DOCUMENTS,
        attrs.SPANJUDGE_RETRIEVAL_DOCUMENTS_CONTENT,
        attrs.SPANJUDGE_INPUT,
        attrs.SPANJUDGE_OUTPUT,
    }
)
KINDS = ("tool", "chain", "agent", "llm", "retriever")

# --- hostile values -------------------------------------------------------------------------
# Built once: a 10 MB string, 10 MB of bytes and a million-element list cost memory, not time.
HUGE_TEXT = "x" * (10 * 2**20)
HUGE_BYTES = b"\xff" * (10 * 2**20)
HUGE_LIST = [0] * 1_000_000  # one shared int: 8 MB of pointers, not 36 MB of ints


class RaisingRepr:
    def __repr__(self) -> str:
        raise RuntimeError("repr exploded")

    def __str__(self) -> str:
        raise RuntimeError("str exploded")


class NonStrRepr:
    def __repr__(self) -> Any:
        return 42  # repr() turns this into a TypeError

    def __str__(self) -> Any:
        return b"bytes"


class RaisingGetattr:
    """Every attribute lookup that misses raises something other than AttributeError."""

    def __getattr__(self, name: str) -> Any:
        raise RuntimeError(f"no {name} for you")


class RaisingIter:
    """A container that says it has items and explodes when walked."""

    def __len__(self) -> int:
        return 3

    def __iter__(self) -> Any:
        raise RuntimeError("iter exploded")

    def __getitem__(self, index: int) -> Any:
        raise RuntimeError("getitem exploded")


class RaisingIterList(list):  # type: ignore[type-arg]
    def __iter__(self) -> Any:
        raise RuntimeError("list iter exploded")


class SelfRef:
    def __init__(self) -> None:
        self.me = self
        self.ring = {"back": self}


class BadMessage(dict):  # type: ignore[type-arg]
    """Looks like a chat message until it is read."""

    def get(self, key: Any, default: Any = None) -> Any:
        raise RuntimeError("get exploded")


def nested_lists(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = [value]
    return value


def nested_dicts(depth: int) -> Any:
    value: Any = {"leaf": 1}
    for i in range(depth):
        value = {f"k{i % 7}": value, "role": "user"}
    return value


def list_cycle() -> Any:
    items: list[Any] = [1]
    items.append(items)
    return items


def dict_cycle() -> Any:
    a: dict[str, Any] = {"role": "user"}
    b: dict[str, Any] = {"content": a}
    a["content"] = b
    return a


def surrogates() -> st.SearchStrategy[str]:
    lone = st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)
    return st.lists(st.one_of(lone, st.characters()), min_size=1, max_size=20).map("".join)


raising_getattr = st.builds(RaisingGetattr)
ATOM_STRATEGIES: list[st.SearchStrategy[Any]] = [
    st.integers(1000, 3000).map(nested_lists),
    st.integers(1000, 2000).map(nested_dicts),
    st.builds(list_cycle),
    st.builds(dict_cycle),
    st.builds(SelfRef),
    st.sampled_from([HUGE_TEXT, HUGE_BYTES, HUGE_LIST]),
    st.binary(min_size=1, max_size=64).map(lambda b: b"\xc3\x28" + b),  # invalid UTF-8
    surrogates(),
    st.builds(RaisingRepr),
    st.builds(NonStrRepr),
    raising_getattr,
    st.builds(RaisingIter),
    st.builds(lambda: RaisingIterList([1, 2, 3])),
    st.builds(lambda: [BadMessage(role="user")]),
    st.sampled_from([float("nan"), float("inf"), float("-inf")]),
]
atoms = st.one_of(ATOM_STRATEGIES)
# hostile values alone, inside ordinary containers, or mixed with each other
hostile: st.SearchStrategy[Any] = st.one_of(
    atoms,
    st.lists(atoms, min_size=1, max_size=3),
    st.dictionaries(st.sampled_from(["role", "content", "choices", "usage", "x"]), atoms),
    st.tuples(atoms, atoms),
)

PROPERTY = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


# --- checks ------------------------------------------------------------------------------------
def assert_valid_attributes(span: Any) -> None:
    """Every attribute an OTel SDK exports as-is; content strings within the limit."""
    for key, value in span.attributes.items():
        assert isinstance(key, str)
        if isinstance(value, (str, bool, int, float)):
            pass
        else:
            assert isinstance(value, tuple), (key, type(value))
            assert len({type(v) for v in value}) <= 1, (key, value)
            assert all(isinstance(v, (str, bool, int, float)) for v in value), (key, value)
        if key in CONTENT_KEYS:
            assert isinstance(value, str), (key, type(value))
            assert len(value) <= LIMIT + MARKER_ROOM, (key, len(value))
            if len(value) > LIMIT:
                assert attrs.TRUNCATION_MARKER.split("{")[0] in value
                assert key in span.attributes[attrs.SPANJUDGE_TRUNCATED]
    for event in span.events:
        for value in event.attributes.values():
            assert isinstance(value, (str, bool, int, float, tuple))


def decorate(kind: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    return observe(kind=kind, name="hostile")(fn)


def span_of(recorded: Spans) -> Any:
    finished = recorded.all()
    assert len(finished) == 1, [s.name for s in finished]
    return finished[0]


@pytest.fixture
def limited(spans: Spans) -> Spans:
    capture.set_policy(max_value_length=LIMIT)
    return spans


# --- properties --------------------------------------------------------------------------------
@PROPERTY
@given(value=hostile, kind=st.sampled_from(KINDS), as_kwarg=st.booleans())
def test_return_value_is_the_same_object_and_attributes_stay_valid(
    limited: Spans, value: Any, kind: str, as_kwarg: bool
) -> None:
    limited.exporter.clear()

    def identity(question: Any) -> Any:
        return question

    wrapped = decorate(kind, identity)
    result = wrapped(question=value) if as_kwarg else wrapped(value)
    assert result is value
    assert_valid_attributes(span_of(limited))


@PROPERTY
@given(value=hostile, kind=st.sampled_from(KINDS))
def test_the_same_exception_object_reaches_the_caller(
    limited: Spans, value: Any, kind: str
) -> None:
    limited.exporter.clear()

    class HostileError(Exception):
        def __str__(self) -> str:
            raise RuntimeError("even the message explodes")

    error = HostileError(value)

    def failing(query: Any) -> Any:
        raise error

    with pytest.raises(HostileError) as info:
        decorate(kind, failing)(value)
    assert info.value is error
    span = span_of(limited)
    assert span.attributes[attrs.ERROR_TYPE].endswith("HostileError")
    assert_valid_attributes(span)


# Streams: RaisingGetattr chunks and {"choices": <not a list>} chunks are left out here; they
# currently escape into the consumer (reported to the lead: observe.py stream_value runs outside
# _safe). Every other hostile value is covered.
stream_atoms = st.one_of([a for a in ATOM_STRATEGIES if a is not raising_getattr])


@PROPERTY
@given(
    value=st.one_of(stream_atoms, st.lists(stream_atoms, min_size=1, max_size=3)),
    kind=st.sampled_from(("llm", "chain", "retriever")),
)
def test_generators_and_coroutines_pass_hostile_chunks_through(
    limited: Spans, value: Any, kind: str
) -> None:
    limited.exporter.clear()

    def stream(prompt: Any) -> Any:
        yield value
        yield value
        return value

    gen = decorate(kind, stream)(value)
    assert next(gen) is value
    assert gen.send(None) is value
    with pytest.raises(StopIteration) as stop:
        next(gen)
    assert stop.value.value is value
    assert_valid_attributes(span_of(limited))

    limited.exporter.clear()

    async def answer(prompt: Any) -> Any:
        return value

    assert asyncio.run(decorate(kind, answer)(value)) is value
    assert_valid_attributes(span_of(limited))


def test_every_hostile_atom_once_per_kind(limited: Spans) -> None:
    """The deterministic floor under the property tests: each atom, each kind, both ways."""
    examples = [
        nested_lists(5000),
        nested_dicts(2000),
        list_cycle(),
        dict_cycle(),
        SelfRef(),
        HUGE_TEXT,
        HUGE_BYTES,
        HUGE_LIST,
        b"\xc3\x28\xff\xfe",
        "a\ud800b\udfffc",
        RaisingRepr(),
        NonStrRepr(),
        RaisingGetattr(),
        RaisingIter(),
        RaisingIterList([1]),
        [BadMessage(role="user")],
        float("nan"),
        float("inf"),
    ]
    for kind in KINDS:
        for value in examples:
            limited.exporter.clear()
            wrapped = decorate(kind, lambda text: text)
            assert wrapped(value) is value
            assert wrapped(text=value) is value
            for span in limited.all():
                assert_valid_attributes(span)


def test_huge_values_are_cut_to_the_limit_with_a_marker(limited: Spans) -> None:
    @observe(kind="tool")
    def tool(blob: Any) -> Any:
        return blob

    for value in (HUGE_TEXT, HUGE_BYTES, HUGE_LIST):
        limited.exporter.clear()
        assert tool(value) is value
        span = span_of(limited)
        for key in (attrs.GEN_AI_TOOL_CALL_ARGUMENTS, attrs.GEN_AI_TOOL_CALL_RESULT):
            text = span.attributes[key]
            assert len(text) <= LIMIT + MARKER_ROOM
            # the size of the original shows through the marker or the item cut
            assert "[truncated" in text or "more" in text, text[-80:]
