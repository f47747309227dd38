"""The per-call fast path (tracer/_fast_path.py): taken for the common calls, exact, and safe.

What it records is pinned by ``test_golden.py``; these tests check that common calls actually
take it (a change that silently sent every call down the general path would only show in the
benchmark), that its JSON is the ``json`` module's byte for byte, that odd values fall back to
the general path, and that tool call ids stay fresh.
"""

from __future__ import annotations

import json
import os
import random
import re
from collections.abc import Iterator
from typing import Any

import pytest

from spanjudge.tracer import _capture as capture
from spanjudge.tracer import _fast_path as fast_path
from spanjudge.tracer import observe
from spanjudge.tracer._decoration_plan import Plan
from tests.tracer.conftest import Spans

KINDS = ("agent", "llm", "retriever", "tool", "chain")


@pytest.fixture
def general_calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The names of the general-path Plan methods called, in order."""
    seen: list[str] = []
    for name in ("input_attributes", "on_start", "on_end"):
        original = getattr(Plan, name)

        def spy(self: Plan, *args: Any, _name: str = name, _original: Any = original) -> Any:
            seen.append(_name)
            return _original(self, *args)

        monkeypatch.setattr(Plan, name, spy)
    yield seen


@pytest.mark.parametrize("kind", KINDS)
def test_common_calls_take_the_fast_path(kind: str, spans: Spans, general_calls: list[str]) -> None:
    @observe(kind=kind)  # type: ignore[arg-type]
    def answer(question: str) -> str:
        return question + "!"

    answer("first")  # the first call of a function records its inputs on the started span
    assert general_calls == ["on_start", "input_attributes"]
    general_calls.clear()
    for text in ("second", "Grüße 日本"):
        assert answer(text) == text + "!"
    assert general_calls == []
    assert len(spans.all()) == 3


def test_odd_values_take_the_general_path(spans: Spans, general_calls: list[str]) -> None:
    @observe(kind="tool")
    def tool(value: Any) -> Any:
        return value

    tool("warm")
    general_calls.clear()
    huge = 10**5000  # int -> str refuses it: the fast path must not raise, nor drop the value
    assert tool(huge) is huge
    assert general_calls == ["input_attributes", "on_end"]
    arguments = spans.all()[-1].attributes or {}
    assert "gen_ai.tool.call.arguments" in arguments
    assert "gen_ai.tool.call.result" in arguments


@pytest.mark.parametrize(
    "setting",
    [{"pii": True}, {"redact": lambda key, text: text}, {"content": False}],
    ids=["pii", "redact", "content-off"],
)
def test_a_policy_that_rewrites_values_turns_the_fast_path_off(
    setting: dict[str, Any], spans: Spans, general_calls: list[str]
) -> None:
    @observe(kind="llm")
    def llm(prompt: str) -> str:
        return prompt

    llm("warm")
    capture.set_policy(**setting)
    general_calls.clear()
    llm("again")
    assert general_calls[0] == "input_attributes"


def test_plain_limit_follows_every_policy_change() -> None:
    policy = capture.reset_policy()
    assert policy.plain_limit == policy.max_value_length
    capture.set_policy(max_value_length=99)
    assert policy.plain_limit == 99
    policy.pii = True  # set directly, not through set_policy
    assert policy.plain_limit == -1
    policy.pii = False
    policy.redact = lambda key, text: text
    assert policy.plain_limit == -1
    capture.reset_policy()
    policy.content = False
    assert policy.plain_limit == -1
    capture.reset_policy()
    assert policy.plain_limit == capture.DEFAULT_MAX_VALUE_LENGTH


@pytest.mark.parametrize(
    "value",
    [
        "",
        'quote " backslash \\ newline \n tab \t nul \x00 del \x7f',
        "Grüße 日本語 \U0001f600 \u2028",
        "lone \ud800 surrogate",
        0,
        -7,
        10**599,
        True,
        False,
        None,
        [],
        {},
        ["a", 1, None, True],
        {"a": "b", "n": 2, "t": False, "z": None},
        {"ключ": "значение"},
    ],
)
def test_small_json_is_the_json_modules_text(value: Any) -> None:
    expected = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    assert capture.small_json(value) == expected
    assert capture.dumps(value) == expected


@pytest.mark.parametrize(
    "value",
    [1.5, float("nan"), 10**700, [1.5], {1: "int key"}, [[1]], {"a": {"b": 1}}, list(range(9))],
)
def test_small_json_declines_what_it_does_not_write(value: Any) -> None:
    assert capture.small_json(value) is None


def test_tool_call_ids_are_fresh_whatever_the_app_seeds(spans: Spans) -> None:
    @observe(kind="tool")
    def tool(x: int) -> int:
        return x

    for _ in range(2):
        random.seed(1234)  # the ids come from the tracer's own generator, not the app's
        for i in range(300):  # more than one draw of pooled ids
            tool(i)
    ids = [(span.attributes or {})["gen_ai.tool.call.id"] for span in spans.all()]
    assert len(ids) == 600
    assert all(re.fullmatch(r"call_[0-9a-f]{16}", str(i)) for i in ids)
    assert len(set(ids)) == len(ids)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_does_not_reuse_its_parents_tool_call_ids() -> None:
    fast_path.new_call_id()  # the pool holds ids the parent will hand out next
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        try:
            os.write(writer, ",".join(fast_path.new_call_id() for _ in range(5)).encode())
        finally:
            os._exit(0)
    os.close(writer)
    with os.fdopen(reader) as stream:
        child = stream.read().split(",")
    os.waitpid(pid, 0)
    parent = [fast_path.new_call_id() for _ in range(5)]
    assert len(child) == 5
    assert not set(child) & set(parent)
