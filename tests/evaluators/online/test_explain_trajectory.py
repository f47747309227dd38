"""``spanjudge explain`` shows the trajectory as read and applies trajectory filters (issue 28
items 1 and 4)."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from spanjudge._core.span_record import SpanRecord
from spanjudge._receive.decode import PROTOBUF, decode_traces
from spanjudge._store.sqlite import SQLiteStore
from spanjudge.cli.app import cli
from spanjudge.evaluators._judge.metrics.faithfulness import FaithfulnessMetric
from spanjudge.evaluators._plan.rules import Rule
from spanjudge.evaluators._review.explain import OfflineJudge, explain_trace
from tests.evaluators.online.spans import Trace

FIXTURES = Path(__file__).parents[2] / "interop" / "fixtures"
QUESTION = "How long do I have to return a blender?"


def failing_turn() -> Trace:
    t = Trace()
    turn = t.agent("support", user="Where is order 7?", answer="Sorry, I could not look.")
    t.llm(parent=turn)
    failed = t.tool("lookup_order", {"id": 7}, parent=turn)
    failed.status_code, failed.status_message = "ERROR", "order service timed out"
    t.llm(parent=turn, answer="Sorry, I could not look.")
    return t


def test_the_explanation_carries_each_turns_trajectory() -> None:
    t = failing_turn()
    explanation = explain_trace(t.trace_id, t.spans, [])
    [trajectory] = explanation.trajectories
    assert trajectory.name == "invoke_agent support"
    assert trajectory.lines == [
        "task: Where is order 7?",
        "step 0 model_call gpt-4o-mini",
        'step 1 tool_call lookup_order {"id": 7} -> error: order service timed out',
        "step 2 model_call gpt-4o-mini",
        "final output: Sorry, I could not look.",
    ]


def test_a_trace_without_turns_is_explained_whole() -> None:
    t = Trace()
    root = t.span("request", None, {})
    t.tool("lookup_order", {"id": 7}, parent=root)
    [trajectory] = explain_trace(t.trace_id, t.spans, []).trajectories
    assert (trajectory.name, trajectory.span_id) == ("trace", root.span_id)
    assert 'step 0 tool_call lookup_order {"id": 7}' in trajectory.lines


def test_verdicts_apply_trajectory_filters() -> None:
    t = failing_turn()
    judge = OfflineJudge("gpt-4o-mini")
    rules = [
        Rule(FaithfulnessMetric(model=judge), target="agent", name="errors",
             filter={"trajectory": {"tool_error": True}}),
        Rule(FaithfulnessMetric(model=judge), target="agent", name="handoffs",
             filter={"trajectory": {"handoff": True}}),
    ]  # fmt: skip
    explanation = explain_trace(t.trace_id, t.spans, rules)
    verdicts = {v.rule: v for line in explanation.spans for v in line.rules}
    assert verdicts["errors"].passes_filter is True
    assert verdicts["handoffs"].passes_filter is False
    assert verdicts["handoffs"].status == "filtered"


def test_the_command_prints_the_trajectory(tmp_path: Path) -> None:
    spans: list[SpanRecord] = []
    for body in sorted((FIXTURES / "strands").glob("*-traces.pb")):
        spans.extend(decode_traces(body.read_bytes(), PROTOBUF))
    database = tmp_path / "spans.db"
    store = SQLiteStore(str(database))
    store.write_spans(spans, now=1_000.0)
    store.close()
    trace_id = min(spans, key=lambda s: s.start_time_unix_nano).trace_id
    result = CliRunner(env={"COLUMNS": "200"}).invoke(
        cli, ["explain", trace_id, "--store", f"sqlite:///{database}"]
    )
    assert result.exit_code == 0, result.output
    out = result.output
    assert "trajectory of invoke_agent support-agent" in out
    assert f"task: {QUESTION}" in out
    assert "tools available: retrieve_docs" in out
    assert "step 0 model_call gpt-4o-mini requests retrieve_docs" in out
    assert f'step 1 tool_call retrieve_docs {{"query": "{QUESTION}"}}' in out
    assert "step 2 model_call gpt-4o-mini" in out
