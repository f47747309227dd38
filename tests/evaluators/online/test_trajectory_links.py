"""The general rules that relate a trajectory's steps (trajectory, inference): tool results
unwrapped, executions paired with the model's requests, hand-offs read from what a tool call
names or runs, the span around agents that hand off read as the turn. Every span here is made
up, with names no framework uses, so a rule that only matched one framework's names fails."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from spanjudge import Rule, ToolErrorCheck
from spanjudge._core.span_record import SpanEvent, SpanRecord
from spanjudge.evaluators._rebuild.inference import HANDOFF_TURN_RULE
from spanjudge.evaluators._rebuild.scope import SpanTree
from spanjudge.evaluators._rebuild.targets import find_targets
from spanjudge.evaluators._rebuild.trajectory import Trajectory, norm, tool_result, trajectory_of
from spanjudge.tracer import _attributes as attrs
from tests.evaluators.online.spans import Trace

AGENT_RULE = Rule(ToolErrorCheck(), target="agent")


def requesting(t: Trace, parent: SpanRecord, name: str, arguments: dict[str, Any]) -> SpanRecord:
    """A model call of ``parent`` that requests the tool ``name``."""
    part = {"type": "tool_call", "id": f"id-{name}", "name": name, "arguments": arguments}
    output = json.dumps([{"role": "assistant", "parts": [part]}])
    return t.llm(parent=parent, **{attrs.GEN_AI_OUTPUT_MESSAGES: output})


def kinds(trajectory: Trajectory) -> list[tuple[str, str | None]]:
    return [(s.kind, s.handoff_to if s.kind == "handoff" else s.name) for s in trajectory.steps]


# ============================================================ tool results
@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ('[{"text": "Order 7 shipped."}]', "Order 7 shipped."),
        ([{"type": "text", "text": "a"}, {"type": "text", "text": "b"}], "a\nb"),
        ({"role": "tool", "content": "done", "tool_call_id": "x"}, "done"),
        ({"type": "tool", "data": {"content": "done", "type": "tool"}}, "done"),
        ({"role": "tool", "content": [{"type": "text", "text": "in blocks"}]}, "in blocks"),
    ],
)
def test_a_tool_result_is_what_the_tool_returned(value: Any, expected: str) -> None:
    assert tool_result(value) == expected


@pytest.mark.parametrize(
    "value",
    [{"status": "shipped"}, [1, 2], [{"id": 1}], "plain text", None, {"role": "tool"}, "[{]"],
)
def test_other_results_are_left_as_they_are(value: Any) -> None:
    assert tool_result(value) == value


def test_names_meet_whatever_their_separators() -> None:
    assert norm("Refunds-Desk") == norm("refunds desk") == "refunds_desk"
    assert norm(None) == ""


# ============================================================ executions and requests
def test_an_execution_takes_the_request_s_arguments_and_name_where_the_span_has_less() -> None:
    t = Trace()
    turn = t.agent("clerk")
    requesting(t, turn, "find_parcel", {"parcel": "P-9"})
    t.tool("Find Parcel", "P-9", {"where": "depot"}, parent=turn)  # the bare value of one argument
    requesting(t, turn, "weigh", {"parcel": "P-9", "unit": "kg"})
    t.tool("weigh", {"parcel": "P-9", "unit": "kg", "scale": 2}, "3 kg", parent=turn)
    steps = trajectory_of(SpanTree(t.spans), turn).tool_calls
    assert [(s.name, s.arguments) for s in steps] == [
        ("find_parcel", {"parcel": "P-9"}),
        ("weigh", {"parcel": "P-9", "unit": "kg", "scale": 2}),  # its own arguments kept
    ]


def test_an_execution_without_a_request_keeps_what_its_span_says() -> None:
    t = Trace()
    turn = t.agent("clerk")
    t.tool("weigh", "P-9", "3 kg", parent=turn)
    [step] = trajectory_of(SpanTree(t.spans), turn).tool_calls
    assert (step.name, step.arguments, step.result) == ("weigh", "P-9", "3 kg")


# ============================================================ hand-offs
def test_a_tool_that_runs_the_model_hands_off_to_the_agent_it_names() -> None:
    t = Trace()
    turn = t.agent("front-desk", user="Please refund order 4.", answer="Refunded.")
    requesting(t, turn, "ask_colleague", {"colleague": "refunds-desk", "note": "refund order 4"})
    delegation = t.tool(
        "ask_colleague", {"colleague": "refunds-desk", "note": "refund order 4"}, parent=turn
    )
    requesting(t, delegation, "pay_back", {"order": 4})
    t.tool("pay_back", {"order": 4}, "ok", parent=delegation)
    t.llm(parent=delegation, answer="Refunded.")
    t.llm(parent=turn, answer="Refunded.")
    trajectory = trajectory_of(SpanTree(t.spans), turn)
    assert kinds(trajectory) == [
        ("model_call", "gpt-4o-mini"),
        ("handoff", "refunds-desk"),
        ("model_call", "gpt-4o-mini"),
        ("tool_call", "pay_back"),
        ("model_call", "gpt-4o-mini"),
        ("model_call", "gpt-4o-mini"),
    ]
    assert [s.agent for s in trajectory.steps] == [
        "front-desk", "front-desk", "refunds-desk", "refunds-desk", "refunds-desk", "front-desk"
    ]  # fmt: skip
    assert trajectory.handoffs[0].handoff_from == "front-desk"


def handing_trace(route_to: str = "refunds-desk") -> tuple[Trace, SpanRecord]:
    """Two agents side by side under a workflow span; the first routes to ``route_to``."""
    t = Trace()
    root = t.span("workflow")
    first = t.agent("front-desk", user="Refund order 4.", answer=None, parent=root)
    requesting(t, first, "route", {"destination": route_to})
    t.tool("route", {"destination": route_to}, "routed", parent=first)
    second = t.agent("refunds-desk", user="Refund order 4.", answer="Refunded.", parent=root)
    requesting(t, second, "pay_back", {"order": 4})
    t.tool("pay_back", {"order": 4}, "ok", parent=second)
    t.llm(parent=second, answer="Refunded.")
    return t, root


def test_the_span_around_agents_that_hand_off_is_the_turn() -> None:
    t, root = handing_trace()
    tree = SpanTree(t.spans)
    assert tree.how_kind(root) == HANDOFF_TURN_RULE
    [first, *subagents] = find_targets(AGENT_RULE, t.spans)
    assert first.span is root and len(subagents) == 2
    trajectory = trajectory_of(tree, root)
    assert kinds(trajectory) == [
        ("agent", "front-desk"),
        ("model_call", "gpt-4o-mini"),
        ("handoff", "refunds-desk"),
        ("agent", "refunds-desk"),
        ("model_call", "gpt-4o-mini"),
        ("tool_call", "pay_back"),
        ("model_call", "gpt-4o-mini"),
    ]
    # the hand-off was announced by the tool call: the agent step does not count it again
    assert len(trajectory.handoffs) == 1


def test_agents_side_by_side_without_a_hand_off_stay_separate_turns() -> None:
    t, root = handing_trace(route_to="archive")  # names no agent of the trace
    tree = SpanTree(t.spans)
    assert tree.how_kind(root) is None
    assert [x.span.name for x in find_targets(AGENT_RULE, t.spans) if x.span] == [
        attrs.span_name("agent", "front-desk"),
        attrs.span_name("agent", "refunds-desk"),
    ]
    [route] = trajectory_of(tree, t.spans[1]).tool_calls
    assert route.kind == "tool_call"


def test_a_tool_naming_an_agent_that_already_acted_is_no_hand_off() -> None:
    t = Trace()
    turn = t.agent("front-desk")
    helper = t.agent("refunds-desk", parent=turn)
    t.llm(parent=helper)
    t.llm(parent=helper, answer="Checked.")
    requesting(t, turn, "log_note", {"author": "refunds-desk"})
    t.tool("log_note", {"author": "refunds-desk"}, "noted", parent=turn)
    trajectory = trajectory_of(SpanTree(t.spans), turn)
    assert [s.name for s in trajectory.tool_calls] == ["log_note"]
    assert not [s for s in trajectory.steps if s.kind == "handoff"]


def test_a_requested_tool_marked_as_an_agent_is_read_as_that_tool() -> None:
    t = Trace()
    turn = t.agent("front-desk")
    requesting(t, turn, "escalate", {})
    t.agent("escalate", user=None, answer="escalated", parent=turn)
    t.llm(parent=turn, answer="Someone will call you.")
    targets = find_targets(AGENT_RULE, t.spans)
    assert [x.span for x in targets] == [turn]  # not a sub-agent of its own
    trajectory = trajectory_of(SpanTree(t.spans), turn)
    assert kinds(trajectory) == [
        ("model_call", "gpt-4o-mini"),
        ("tool_call", "escalate"),
        ("model_call", "gpt-4o-mini"),
    ]
    assert trajectory.tool_calls[0].arguments == {}


def test_many_turns_of_one_agent_side_by_side_stay_turns() -> None:
    """A conversation traced as one trace: the same agent answering turn after turn hands off
    to no one, however many turns there are."""
    t = Trace()
    root = t.span("session")
    turns = []
    for n in range(300):
        turn = t.agent("front-desk", user=f"Question {n}?", answer=f"Answer {n}.", parent=root)
        requesting(t, turn, "lookup", {"agent": "front-desk", "n": n})
        t.tool("lookup", {"agent": "front-desk", "n": n}, "found", parent=turn)
        t.llm(parent=turn, answer=f"Answer {n}.")
        turns.append(turn)
    tree = SpanTree(t.spans)
    assert tree.how_kind(root) is None
    assert [x.span for x in find_targets(AGENT_RULE, t.spans)] == turns
    assert [s.kind for s in trajectory_of(tree, turns[-1]).steps] == [
        "model_call", "tool_call", "model_call"
    ]  # fmt: skip


def test_a_task_recorded_as_data_gives_way_to_the_first_model_call_s_input() -> None:
    """An agent span whose input is a framework's configuration (a JSON object) does not hold
    the user's words: the first model call of the turn does."""
    t = Trace()
    config = json.dumps({"agent": {"role": "front-desk", "goal": "help"}, "tools": ["route"]})
    turn = t.span(
        "front-desk",
        attributes={
            "openinference.span.kind": "AGENT",
            "input.value": config,
            "input.mime_type": "application/json",
            "output.value": "Refunded.",
        },
    )
    t.llm(user="Current task: refund order 4.", parent=turn, answer="Refunded.")
    assert trajectory_of(SpanTree(t.spans), turn).task == "Current task: refund order 4."
    words = Trace()
    own = words.agent("front-desk", user="Refund order 4, please.", answer="Refunded.")
    words.llm(user="Current task: refund order 4.", parent=own, answer="Refunded.")
    assert trajectory_of(SpanTree(words.spans), own).task == "Refund order 4, please."


@pytest.mark.parametrize(("status", "failed"), [("OK", False), ("ERROR", True), ("UNSET", True)])
def test_an_exception_on_a_span_that_ended_ok_was_handled(status: str, failed: bool) -> None:
    """A framework may raise to pass control (LangGraph's ParentCommand) and end the span OK:
    the exception is recorded, the step did not fail."""
    t = Trace()
    turn = t.agent("front-desk")
    requesting(t, turn, "route", {"to": "x"})
    tool = t.tool("route", {"to": "x"}, "routed", parent=turn)
    event = SpanEvent("exception", 0, {"exception.type": "Handover", "exception.message": "x"})
    t.spans[t.spans.index(tool)] = replace(tool, status_code=status, events=[event])
    [step] = trajectory_of(SpanTree(t.spans), turn).tool_calls
    assert bool(step.error) is failed
    if failed:
        assert step.error == "Handover: x"
