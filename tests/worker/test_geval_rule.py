"""``metric = "geval"`` rules: built from the config file with errors naming the key, and a real
worker started from a TOML file with only G-Eval rules scoring demo traffic end to end."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import httpx
import pytest

from spanjudge.errors import ConfigError
from spanjudge.evaluators._judge.metrics.geval import ConversationalGEval, GEval
from spanjudge.settings import load_settings
from spanjudge.testing import ScriptedJudgeServer
from spanjudge.tracer import _attributes as attrs
from spanjudge.worker.rule_config import build_rules
from tests.support.otlp_sink import OtlpSink
from tests.worker.conftest import WorkerProcess
from tests.worker.rules_module import NO_JUDGE

RULES = """
[[rules]]
metric = "geval"
target = "agent"

[rules.params]
name = "politeness"
criteria = "The answer is courteous and never blames the customer."
evaluation_params = ["input", "actual_output"]
threshold = 0.7

[[rules]]
metric = "geval"
target = "conversation"
name = "patience-rule"
params = { name = "patience", criteria = "The assistant stays patient with the customer." }
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "w.toml"
    path.write_text('store_url = "sqlite:///x.db"\n' + text)
    return path


def test_geval_rules_from_toml(tmp_path: Path) -> None:
    politeness, patience = build_rules(load_settings(write(tmp_path, RULES)), NO_JUDGE)
    assert type(politeness.metric) is GEval
    assert politeness.name == "politeness-agent"
    assert politeness.metric.name == "politeness"
    assert politeness.metric.threshold == 0.7
    assert politeness.metric.evaluation_params == ("input", "actual_output")
    # on conversations "geval" is the conversational variant
    assert type(patience.metric) is ConversationalGEval
    assert (patience.name, patience.metric.name) == ("patience-rule", "patience")
    assert patience.metric.evaluation_params == ("role", "content")


def rule(params: str, target: str = "agent") -> str:
    return f'[[rules]]\nmetric = "geval"\ntarget = "{target}"\nparams = {{ {params} }}\n'


NAME = 'name = "p"'
CRIT = 'criteria = "Polite."'


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            rule(f'{NAME}, {CRIT}, evaluation_params = ["inptu"]'),
            "rules.0.params.evaluation_params: unknown field 'inptu' (allowed: input, "
            "actual_output, expected_output, context, retrieval_context, tools_called, "
            "expected_tools, metadata)",
        ),
        (
            rule(f'{NAME}, {CRIT}, evaluation_params = ["actual_output"]', "conversation"),
            "rules.0.params.evaluation_params: unknown field 'actual_output' (allowed: role, ",
        ),
        (rule(CRIT), "rules.0.params.name: missing (required by GEval)"),
        (rule(NAME), "rules.0.params.criteria: give criteria or evaluation_steps"),
        (
            rule(f'{NAME}, critera = "Polite."'),
            "rules.0.params.critera: unknown parameter (allowed: name, criteria, ",
        ),
        (rule(f"{NAME}, {CRIT}, evaluation_steps = []"), "rules.0.params.evaluation_steps: "),
        (rule(f"{NAME}, {CRIT}, threshold = 1.5"), "rules.0.params: threshold must be between"),
        (rule(f'name = "", {CRIT}'), "rules.0.params.name: must be a non-empty string"),
        ('[[rules]]\nmetric = "gevla"\n', "rules.0.metric"),
    ],
)
def test_bad_geval_params_name_the_key(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        build_rules(load_settings(write(tmp_path, text)), NO_JUDGE)
    assert message in str(info.value)


def geval_judge() -> ScriptedJudgeServer:
    """Answers G-Eval's two schemas: conversations 6, single turns 8 (or 7 by logprobs)."""
    server = ScriptedJudgeServer()
    server.add_rule({"steps": ["Read the request.", "Check the tone."]}, schema="GEvalSteps")
    server.add_rule(
        {"reason": "Patient throughout.", "score": 6},
        schema="GEvalScore",
        contains="You judge one conversation",
    )
    server.add_rule(
        {"reason": "Courteous and clear.", "score": 8},
        schema="GEvalScore",
        logprobs={"8": {"8": math.log(0.8), "7": math.log(0.2)}},
    )
    return server.start()


def test_worker_from_a_toml_file_with_only_geval_rules_scores_demo_traffic(
    tmp_path: Path, demo_request: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPANJUDGE_CACHE_DIR", str(tmp_path / "cache"))
    judge = geval_judge()
    agents = {
        s.span_id.hex()
        for rs in demo_request.resource_spans
        for ss in rs.scope_spans
        for s in ss.spans
        if any(
            kv.key == attrs.GEN_AI_OPERATION_NAME and kv.value.string_value == "invoke_agent"
            for kv in s.attributes
        )
    }
    assert len(agents) > 1
    try:
        with OtlpSink() as sink:
            toml = f"""store_url = "sqlite:///{tmp_path}/w.db"
downstream_endpoint = "{sink.endpoint}"
judge_model = "openai/scripted-judge"
judge_options = {{ api_base = "{judge.base_url}", api_key = "x" }}
interval_seconds = 0.2
settle_seconds = 0.3
idle_seconds = 0.5
{RULES}"""
            worker = WorkerProcess({}, tmp_path, toml=toml)
            try:
                worker.wait_ready()
                assert worker.post(demo_request).status_code == 200

                def evaluations(spans: list[Any]) -> list[Any]:
                    return [s for s in spans if attrs.GEN_AI_EVALUATION_NAME in s.attributes]

                def done(spans: list[Any]) -> bool:
                    names = [s.attributes[attrs.GEN_AI_EVALUATION_NAME] for s in evaluations(spans)]
                    return names.count("politeness") >= len(agents) and "patience" in names

                spans = sink.wait_for(done, timeout=60)
                logs = sink.wait_for_logs(lambda got: len(got) >= len(evaluations(spans)), 30)
                metrics = httpx.get(worker.url + "/metrics").text
            finally:
                worker.kill()
    finally:
        judge.stop()

    named = attrs.GEN_AI_EVALUATION_NAME
    polite = [s for s in evaluations(spans) if s.attributes[named] == "politeness"]
    assert sorted(s.parent_span_id for s in polite) == sorted(agents)
    for span in polite:
        assert span.name == "evaluation politeness"
        # 0.8 * 8 + 0.2 * 7 = 7.8 -> 0.78 >= 0.7
        assert span.attributes[attrs.GEN_AI_EVALUATION_SCORE_VALUE] == 0.78
        assert span.attributes[attrs.GEN_AI_EVALUATION_SCORE_LABEL] == "pass"
        assert span.attributes[attrs.GEN_AI_EVALUATION_EXPLANATION] == "Courteous and clear."
        assert span.attributes[attrs.SPANJUDGE_EVAL_RULE] == "politeness-agent"
    (patience,) = [s for s in evaluations(spans) if s.attributes[named] == "patience"]
    assert patience.attributes[attrs.GEN_AI_EVALUATION_SCORE_VALUE] == 0.6
    assert patience.attributes[attrs.GEN_AI_EVALUATION_SCORE_LABEL] == "pass"
    # the event output carries the user's names as well
    assert {e.attributes[attrs.GEN_AI_EVALUATION_NAME] for e in logs} == {"politeness", "patience"}
    # Prometheus series are labelled with the metric's and the rule's names
    assert 'metric="politeness"' in metrics and 'rule="politeness-agent"' in metrics
    assert 'metric="patience"' in metrics and 'rule="patience-rule"' in metrics
    # steps generated once per criteria for all of the worker's cases
    steps_calls = [r for r in judge.requests if r.schema_name == "GEvalSteps"]
    assert len(steps_calls) == 2
    assert (tmp_path / "cache" / "geval_steps.json").exists()
