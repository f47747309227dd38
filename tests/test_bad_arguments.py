"""Every public constructor and function refuses a bad argument with a ``SpanjudgeError``.

The docs promise ``except spanjudge.SpanjudgeError`` catches everything the package raises; a
bare ``ValueError``/``TypeError`` or pydantic's ``ValidationError`` from a public name breaks it.
Each public callable is either in ``BAD`` (a bad call of it) or in ``NOTHING_TO_REFUSE`` with the
reason it takes no argument a user could get wrong; a new public name in neither fails the suite.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import spanjudge
import spanjudge.errors


def _dataset(tmp_path: Path) -> Any:
    bad = tmp_path / "cases.json"
    bad.write_text('[{"input": "q"}]', encoding="utf-8")  # no actual_output
    return spanjudge.load_dataset(bad)


def _not_json(tmp_path: Path) -> Any:
    bad = tmp_path / "cases.jsonl"
    bad.write_text("{not json\n", encoding="utf-8")
    return spanjudge.load_dataset(bad)


M = spanjudge.FaithfulnessMetric
# name -> a call with a bad argument (tmp_path given to those that need a file)
BAD: dict[str, list[Callable[[Path], Any]]] = {
    "Rule": [
        lambda _: spanjudge.Rule(M(), sample_rate=2),
        lambda _: spanjudge.Rule(M(), target="llmm"),  # type: ignore[arg-type]
        lambda _: spanjudge.Rule(M(), name=""),
    ],
    "SpanFilter": [lambda _: spanjudge.SpanFilter(service=3)],  # type: ignore[arg-type]
    "TrajectoryFilter": [lambda _: spanjudge.TrajectoryFilter(min_tool_calls=-1)],
    "MonitorConfig": [lambda _: spanjudge.MonitorConfig(interval_seconds=-1)],
    "RegressionBaseline": [lambda _: spanjudge.RegressionBaseline(key="", value="v")],
    "observe": [lambda _: spanjudge.observe(kind="x")],  # type: ignore[arg-type]
    "load_dataset": [_dataset, _not_json],
    "open_store": [lambda _: spanjudge.open_store("mysql://host/db")],
    "LLMTestCase": [lambda _: spanjudge.LLMTestCase(input="q")],  # type: ignore[call-arg]
    "ConversationalTestCase": [lambda _: spanjudge.ConversationalTestCase(turns=[])],
    "Turn": [lambda _: spanjudge.Turn(role="robot", content="x")],  # type: ignore[arg-type]
    "ToolCall": [lambda _: spanjudge.ToolCall(name="")],
    "FaithfulnessMetric": [lambda _: M(threshold=2)],
    "BiasMetric": [lambda _: spanjudge.BiasMetric(threshold=-1)],
    "TopicAdherenceMetric": [lambda _: spanjudge.TopicAdherenceMetric(relevant_topics=[])],
    "GEval": [lambda _: spanjudge.GEval(name="g")],  # neither criteria nor steps
    "ConversationalGEval": [lambda _: spanjudge.ConversationalGEval(name="g")],
    "StepLimitCheck": [lambda _: spanjudge.StepLimitCheck(max_steps=-1)],
    "ToolErrorCheck": [lambda _: spanjudge.ToolErrorCheck(max_errors=-1)],
    "RepeatedCallCheck": [lambda _: spanjudge.RepeatedCallCheck(max_repeats=0)],
    "LiteLLMJudge": [lambda _: spanjudge.LiteLLMJudge("m", timeout=-1)],
    "feedback": [
        lambda _: spanjudge.feedback(metric="faithfulness", label="maybe", store=":memory:")
    ],
    "monitor": [lambda _: spanjudge.monitor([], store=":memory:", start=False)],
    "Reader": [lambda _: spanjudge.Reader(name="", kind="llm", match={})],  # type: ignore[arg-type]
    "ReaderMatch": [lambda _: spanjudge.ReaderMatch(scope="")],
    "FieldSource": [lambda _: spanjudge.FieldSource(attribute="")],
}
for _name in (
    "TaskCompletionMetric", "ToolCorrectnessMetric", "ArgumentCorrectnessMetric",
    "StepEfficiencyMetric", "PlanAdherenceMetric", "PlanQualityMetric", "GoalAccuracyMetric",
):  # fmt: skip
    BAD[_name] = [lambda _, n=_name: getattr(spanjudge, n)(threshold=1.5)]

NOTHING_TO_REFUSE = {
    # results and records the package builds and hands out; users read them
    "EvaluationResult", "TestResult", "MetricResult", "MetricSummary", "MetricData",
    "EvaluationRecord", "FeedbackRecord", "SpanRecord", "SpanEvent", "GenAIView", "Document",
    "ToolCallView", "ToolDefinition", "ToolRequest", "TickReport", "Trajectory", "Step",
    "Tracing", "SpanHandle",
    # protocols and bases: nothing to construct
    "SpanStore", "SpanLog", "Emitter", "BaseMetric",
    # prompt templates: no arguments
    "FaithfulnessTemplate", "BiasTemplate", "TopicAdherenceTemplate", "TaskCompletionTemplate",
    "ToolCorrectnessTemplate", "GoalAccuracyTemplate",
    # no argument a user could get wrong, or only objects checked where they are used
    "current_span", "Telemetry", "read_span", "store_span_processor", "configure",
    "conversation", "evaluate", "a_evaluate", "as_deepeval_model", "DeepEvalMetric", "Monitor",
}  # fmt: skip

CASES = [(name, i) for name, calls in sorted(BAD.items()) for i in range(len(calls))]


@pytest.mark.parametrize(("name", "i"), CASES, ids=[f"{n}-{i}" for n, i in CASES])
def test_a_bad_argument_raises_a_spanjudge_error(name: str, i: int, tmp_path: Path) -> None:
    with pytest.raises(spanjudge.SpanjudgeError) as caught:
        BAD[name][i](tmp_path)
    assert str(caught.value), "the error must say what is wrong"


def test_every_public_callable_is_covered() -> None:
    callables = {
        name
        for name in spanjudge.__all__
        if callable(getattr(spanjudge, name))
        and not (
            isinstance(getattr(spanjudge, name), type)
            and issubclass(getattr(spanjudge, name), BaseException)
        )
    }
    assert not (set(BAD) & NOTHING_TO_REFUSE)
    assert callables - set(BAD) - NOTHING_TO_REFUSE == set(), "add a bad call to BAD"
    assert set(BAD) | NOTHING_TO_REFUSE <= callables, "a listed name is not public any more"


# ------------------------------------------------------------------ checks inside pydantic models
ROOT = Path(__file__).resolve().parent.parent
_VALIDATORS = ("field_validator", "model_validator")


def _validator_raises(source: str) -> list[str]:
    """``raise <one of spanjudge.errors>(...)`` inside a function decorated as a pydantic
    validator: ``"<line> <function> raises <class>"`` each."""
    import ast

    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        if not any(v in ast.unparse(d) for d in node.decorator_list for v in _VALIDATORS):
            continue
        for inner in ast.walk(node):
            if isinstance(inner, ast.Raise) and inner.exc is not None:
                raised = ast.unparse(inner.exc).split("(")[0].split(".")[-1]
                if raised in spanjudge.errors.__all__:
                    found.append(f"{inner.lineno} {node.name} raises {raised}")
    return found


def test_validators_raise_value_error_and_the_model_reports_it() -> None:
    """Inside a pydantic validator a check raises ``ValueError``: pydantic gathers it with the
    model's other errors into one ``ValidationError``, which ``CheckedModel`` (or the settings
    loader) turns into one ``ConfigError`` line per key. Raising ``ConfigError`` there would only
    work because it is also a ``ValueError``, and would read as if it left the model directly."""
    import os

    found = []
    for folder, dirs, files in os.walk(ROOT / "spanjudge", followlinks=True):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for file in (f for f in files if f.endswith(".py")):
            path = Path(folder, file)
            found += [
                f"{path.relative_to(ROOT)}:{problem}"
                for problem in _validator_raises(path.read_text(encoding="utf-8"))
            ]
    assert found == []


def test_the_validator_scan_sees_a_raise() -> None:
    source = (
        "class M(CheckedModel):\n"
        "    @field_validator('x')\n"
        "    @classmethod\n"
        "    def _x(cls, v):\n"
        "        if v:\n"
        "            raise errors.ConfigError('no')\n"
        "        raise ValueError('fine')\n"
        "    def helper(self):\n"
        "        raise ConfigError('not a validator')\n"
    )
    assert _validator_raises(source) == ["6 _x raises ConfigError"]


def test_a_failed_validator_is_one_readable_config_error_line(tmp_path: Path) -> None:
    from spanjudge.human_feedback import parse_feedback
    from spanjudge.settings import load_settings

    settings = tmp_path / "worker.toml"
    settings.write_text('bearer_token = " "\n', encoding="utf-8")
    with pytest.raises(spanjudge.ConfigError) as caught:
        load_settings(settings)
    assert "bearer_token: is empty (remove the key" in str(caught.value)
    assert caught.value.__cause__ is None and caught.value.__suppress_context__

    settings.write_text('receiver_host = "0.0.0.0"\n', encoding="utf-8")
    with pytest.raises(spanjudge.ConfigError, match="allow_unauthenticated: must be"):
        load_settings(settings)

    with pytest.raises(spanjudge.FeedbackError, match="trace_id: expected 32 hex"):
        parse_feedback({"trace_id": "zz", "metric": "faithfulness", "label": "pass"})
