"""The fast path (``tracer/_fast_path.py``) and the general path (``Plan``) record the same thing.

``@observe`` has one start path (``_wrappers._begin``) but two ways to compute what a call
records: closures specialised per decorated function for the common shapes, and the general
capture code they fall back to. The fast closures are kept because they pay for themselves
(the measured figure is in ``_fast_path.py``'s docstring). This test holds the two together:
for any call the fast path accepts, its start attributes and its output attributes are the
general path's, key for key and in the same order; whatever the general path would cut to the
size limit, mask or redact, the fast path declines. ``test_golden.py`` pins the exported bytes of
fixed scenarios; this one draws the arguments, the results and the size limit.
"""

from __future__ import annotations

import contextlib
import itertools
import re
from collections.abc import Callable, Mapping
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spanjudge.tracer import _attributes as attrs
from spanjudge.tracer import _capture as capture
from spanjudge.tracer import _fast_path as fast_path
from spanjudge.tracer import conversation, observe
from spanjudge.tracer._decoration_plan import Options, Plan
from tests.tracer.conftest import Spans

KINDS = ("agent", "llm", "retriever", "tool", "chain")
_CALL_ID = re.compile(r"call_[0-9a-f]{16}")


def one(question: Any) -> Any: ...


def method(self: Any, question: Any, extra: Any = None) -> Any: ...


def keyword_only(*, query: Any) -> Any: ...


def several(a: Any, b: Any, c: Any = None) -> Any: ...


def nothing() -> Any: ...


SIGNATURES: dict[str, Callable[..., Any]] = {
    "one": one,
    "method": method,
    "keyword_only": keyword_only,
    "several": several,
    "nothing": nothing,
}

# Any character, lone surrogates included (not valid UTF-8: both paths must replace them alike);
# joined from a list because st.text() leaves surrogates out.
_characters = st.one_of(
    st.characters(),
    st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF),
    st.sampled_from('"\\\n\x00\x7f\u2028é日\U0001f600'),
)
texts = st.lists(_characters, max_size=40).map("".join)
# Text half the time: the fast path is for text (and flat scalars).
scalars = st.one_of(
    texts,
    st.one_of(
        st.integers(),
        st.integers(min_value=10**590, max_value=10**610),
        st.booleans(),
        st.none(),
        st.floats(allow_nan=True),
    ),
)
results = st.one_of(
    scalars,
    st.lists(texts, max_size=10),
    st.lists(scalars, max_size=3),
    st.dictionaries(st.text(max_size=5), scalars, max_size=3),
)
# The size limit, as an offset from the longest value the general path records under the default
# limit: the fast path must decline exactly where the general one starts cutting (at -1, not at
# 0). None: the default limit.
SLACKS = (None, -2, -1, 0, 1)


class Recorder:
    """A recording span: the attributes it was started with and everything set on it since."""

    def __init__(self, started: Mapping[str, Any]) -> None:
        self.attributes = dict(started)
        self.set: list[tuple[str, Any]] = []

    def set_attribute(self, key: str, value: Any) -> None:
        self.attributes[key] = value
        self.set.append((key, value))

    def set_attributes(self, values: Mapping[str, Any]) -> None:
        for key, value in values.items():
            self.set_attribute(key, value)

    def update_name(self, name: str) -> None:
        self.set.append(("<name>", name))


def _same_ids(items: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """The items, with a fresh random tool call id written as one placeholder."""
    out = []
    for key, value in items.items():
        if key == attrs.GEN_AI_TOOL_CALL_ID and _CALL_ID.fullmatch(str(value)):
            value = "<fresh id>"
        out.append((key, value))
    return out


def _call(
    signature: str, values: list[Any], by_keyword: bool
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """A call of one of SIGNATURES with two or three ``values``, positional or by keyword."""
    if signature == "nothing":
        return (), {}
    if signature == "keyword_only":
        return (), {"query": values[0]}
    if signature == "one":
        return ((), {"question": values[0]}) if by_keyword else ((values[0],), {})
    if signature == "method":
        if by_keyword:
            return (object(),), {"question": values[0]}
        return (object(), *values[: len(values) - 1]), {}  # with and without ``extra``
    return ((values[0],), {"b": values[1]}) if by_keyword else (tuple(values), {})


def _general_start(plan: Plan, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """What the general path starts a warm call's span with (``wrappers._begin``)."""
    return plan.input_attributes(args, kwargs, dict(plan.start_attributes(args, kwargs)))


def _general_end(plan: Plan, value: Any, started: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """What the general path sets on a span started with ``started`` for the output ``value``."""
    span = Recorder(started)
    plan.on_end(span, value, started)
    return span.set


def _limit_near(
    recorded: list[tuple[str, Any]], static: Mapping[str, Any], slack: int | None
) -> None:
    """Set the size limit ``slack`` characters off the longest content value in ``recorded``."""
    lengths = [len(v) for k, v in recorded if isinstance(v, str) and k not in static]
    if slack is not None and lengths:
        capture.set_policy(max_value_length=max(1, max(lengths) + slack))


# The enclosing conversation() block: none, an id alone, an id and a user (drawn text too).
conversations = st.one_of(
    st.none(), st.tuples(texts, st.one_of(st.none(), texts)), st.just(("chat-42", "u-7"))
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    values=st.lists(scalars, min_size=2, max_size=3),
    tool_call_id=st.sampled_from([None, "call_fixed"]),
    inside=conversations,
)
def test_the_fast_start_is_the_general_start(
    values: list[Any], tool_call_id: str | None, inside: tuple[str, str | None] | None
) -> None:
    # Every kind, signature, call shape and limit per example: the edges are rare draws.
    for kind, signature in itertools.product(KINDS, SIGNATURES):
        plan = Plan(SIGNATURES[signature], kind, None, Options(tool_call_id=tool_call_id))  # type: ignore[arg-type]
        if plan.hot_start is None:
            continue  # this function always takes the general path: nothing to hold together
        for by_keyword, slack in itertools.product((False, True), SLACKS):
            args, kwargs = _call(signature, values, by_keyword)
            block = conversation(*inside) if inside is not None else contextlib.nullcontext()
            try:
                with block:
                    started = _general_start(plan, args, kwargs)
                    _limit_near(list(started.items()), plan.static, slack)
                    try:
                        fast = plan.hot_start(args, kwargs)
                    except Exception:
                        fast = None  # the wrapper sends the call down the general path
                    if fast is not None:
                        general = _general_start(plan, args, kwargs)
                        assert _same_ids(fast) == _same_ids(general), (kind, signature, slack)
                        if inside is not None:
                            assert fast[attrs.GEN_AI_CONVERSATION_ID] == inside[0]
            finally:
                capture.reset_policy()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=results)
def test_the_fast_end_is_the_general_end(value: Any) -> None:
    for kind, slack in itertools.product(KINDS, SLACKS):
        plan = Plan(one, kind, None, Options())  # type: ignore[arg-type]
        assert plan.hot_end is not None
        started = dict(plan.static)
        try:
            _limit_near(_general_end(plan, value, started), started, slack)
            fast = Recorder(started)
            try:
                done = plan.hot_end(fast, value)
            except Exception:
                done = False  # the wrapper records the output through the general path
            if done:
                assert fast.set == _general_end(plan, value, started), (kind, slack)
        finally:
            capture.reset_policy()


@given(kind=st.sampled_from(KINDS), text=texts)
def test_common_calls_are_taken_by_the_fast_path(kind: str, text: str) -> None:
    """Guards the test above against holding nothing: plain text in and out takes both closures."""
    plan = Plan(one, kind, None, Options())  # type: ignore[arg-type]
    assert plan.hot_start is not None and plan.hot_end is not None
    assert plan.hot_start((text,), {}) is not None
    assert plan.hot_end(Recorder(plan.static), text) is True


def test_a_rewriting_policy_sends_every_call_to_the_general_path() -> None:
    for setting in ({"pii": True}, {"redact": lambda key, text: text}):
        capture.set_policy(**setting)  # type: ignore[arg-type]
        try:
            for kind in KINDS:
                plan = Plan(one, kind, None, Options())  # type: ignore[arg-type]
                assert plan.hot_start is not None and plan.hot_end is not None
                assert plan.hot_start(("text",), {}) is None
                assert plan.hot_end(Recorder(plan.static), "text") is False
        finally:
            capture.reset_policy()


def _exported(spans: Spans, general: bool, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The spans of the same calls, inside conversation() blocks, with the fast closures made at
    decoration (``general=False``) or with none (every call takes the general path)."""
    spans.exporter.clear()
    with monkeypatch.context() as patch:
        if general:
            patch.setattr(fast_path, "start_builder", lambda *a, **k: None)
            patch.setattr(fast_path, "end_writer", lambda *a, **k: None)
        functions = {kind: observe(kind=kind)(one) for kind in KINDS}  # type: ignore[call-overload]
        with conversation("chat-42", user_id="u-7"):
            for fn in functions.values():
                fn("warm")  # a function's first call records its inputs on the started span
                fn("Grüße")
                fn(question="by keyword")
                with conversation("nested"):
                    fn("inner")
    return [
        (s.name, _same_ids(dict(s.attributes or {})), s.status.status_code) for s in spans.all()
    ]


def test_calls_inside_a_conversation_give_the_same_spans_on_both_paths(
    spans: Spans, monkeypatch: pytest.MonkeyPatch
) -> None:
    general = _exported(spans, True, monkeypatch)
    calls: list[str] = []
    original = Plan.input_attributes

    def spy(self: Plan, *args: Any) -> Any:
        calls.append(self.kind)
        return original(self, *args)

    monkeypatch.setattr(Plan, "input_attributes", spy)
    fast = _exported(spans, False, monkeypatch)
    assert calls == list(KINDS)  # the first (warming) call of each; the rest took the fast path
    assert fast == general
    assert len(fast) == 4 * len(KINDS)
    ids = [dict(attributes).get(attrs.GEN_AI_CONVERSATION_ID) for _, attributes, _ in fast]
    assert set(ids) == {"chat-42", "nested"}
