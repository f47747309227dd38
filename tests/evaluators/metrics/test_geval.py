"""GEval: steps once from the criteria, a 0..10 score (probability-weighted with logprobs),
normalised to 0..1, strict mode, out-of-scale answers as errors, the steps cache on disk."""

from __future__ import annotations

import asyncio
import inspect
import json
import math
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spanjudge.errors import MetricError, MissingFieldError, ParamError
from spanjudge.evaluators._judge.judges.base import TokenLogprob
from spanjudge.evaluators._judge.metrics.geval import (
    GEval,
    GEvalBase,
    GEvalBinaryScore,
    GEvalScore,
    GEvalSteps,
    GEvalTemplate,
    weighted_score,
)
from spanjudge.evaluators._judge.metrics.geval_steps import FILE_NAME, StepsCache, steps_cache
from spanjudge.evaluators._judge.test_case import LLMTestCase, ToolCall
from spanjudge.evaluators._plan.rules import Rule
from spanjudge.testing import ScriptedJudgeServer
from tests.evaluators.metrics.conftest import prompts_for, schema_names

ROOT = Path(__file__).resolve().parents[3]
CRITERIA = "The answer is courteous and never blames the customer."
STEPS = {"steps": ["Read what the customer asked.", "Look for rude or blaming wording."]}
CASE = LLMTestCase(input="Where is my parcel?", actual_output="It ships tomorrow, sorry!")


@pytest.fixture(autouse=True)
def _own_steps_cache(tmp_path: Path) -> Iterator[Path]:
    # the cache is process-wide and on disk by design; each test gets an empty one of its own
    steps_cache.directory = tmp_path / "cache"
    steps_cache.disk = True
    steps_cache.clear()
    yield tmp_path / "cache"
    steps_cache.directory = None
    steps_cache.clear()


def lp(p: float) -> float:
    return math.log(p)


def politeness(judge: Any, **kwargs: Any) -> GEval:
    return GEval(name="politeness", criteria=CRITERIA, model=judge, **kwargs)


def script(server: ScriptedJudgeServer, score: Any, **kwargs: Any) -> None:
    server.add_rule(STEPS, schema="GEvalSteps")
    server.add_rule(
        {"reason": "Courteous, no blame.", "score": score}, schema="GEvalScore", **kwargs
    )


# ---------------------------------------------------------------------------- arithmetic


def tokens(score: str, top: dict[str, float]) -> tuple[TokenLogprob, ...]:
    """The tokens of '{"reason": "ok", "score": <score>}' with ``top`` at the score."""
    head = ['{"', "reason", '":', ' "', "ok", '",', ' "', "score", '":', " "]
    items = [TokenLogprob(t, 0.0, ((t, 0.0),)) for t in head]
    items.append(TokenLogprob(score, top.get(score, 0.0), tuple(top.items())))
    items.append(TokenLogprob("}", 0.0, (("}", 0.0),)))
    return tuple(items)


def test_weighted_mean_of_the_score_alternatives() -> None:
    # 0.8 * 8 + 0.2 * 7 = 6.4 + 1.4 = 7.8
    assert weighted_score(8, tokens("8", {"8": lp(0.8), "7": lp(0.2)})) == 7.8
    # 0.5 * 10 + 0.5 * 9 = 9.5 ("10" is one token)
    assert weighted_score(10, tokens("10", {"10": lp(0.5), "9": lp(0.5)})) == 9.5


def test_under_one_percent_and_non_integers_are_left_out_and_the_rest_renormalised() -> None:
    top = {
        "6": lp(0.6),
        "4": lp(0.3),
        "0": lp(0.009),  # under 1%: out (it would pull the mean down)
        " the": lp(0.05),  # not a number: out
        "11": lp(0.04),  # off the 0..10 scale: out
        "٣": lp(0.001),  # a digit, but not an ASCII one: out
    }
    # kept: 6 (0.6) and 4 (0.3); (0.6 * 6 + 0.3 * 4) / 0.9 = 4.8 / 0.9 = 5.333333
    assert weighted_score(6, tokens("6", top)) == 5.333333


def test_plain_score_when_it_cannot_be_weighted() -> None:
    assert weighted_score(7, None) == 7.0
    assert weighted_score(7, ()) == 7.0
    # every alternative filtered out
    assert weighted_score(7, tokens("7", {"7": lp(0.005), "x": lp(0.9)})) == 7.0
    # the answer text has no score token where the logprobs say
    assert weighted_score(7, tokens("8", {"8": lp(0.5), "7": lp(0.5)})) == 7.0


def test_the_score_position_is_found_by_offset_not_by_the_first_equal_token() -> None:
    # the reason also contains "8", with other alternatives: only the score's position counts
    text = ['{"', "reason", '":', ' "', "8", " items", '",', ' "', "score", '":', " ", "8", "}"]
    items = [TokenLogprob(t, 0.0, ((t, 0.0),)) for t in text]
    items[4] = TokenLogprob("8", lp(0.5), (("8", lp(0.5)), ("3", lp(0.5))))
    items[11] = TokenLogprob("8", lp(0.75), (("8", lp(0.75)), ("10", lp(0.25))))
    # 0.75 * 8 + 0.25 * 10 = 6 + 2.5 = 8.5
    assert weighted_score(8, items) == 8.5


def test_strict_and_plain_score_schemas_send_the_same_json_schema() -> None:
    assert GEvalBinaryScore.__name__ == GEvalScore.__name__ == "GEvalScore"
    assert GEvalBinaryScore.model_json_schema() == GEvalScore.model_json_schema()
    assert GEvalScore(reason="r", score=10).score == 10
    assert GEvalBinaryScore(reason="r", score=1).score == 1
    with pytest.raises(ValueError, match="an integer from 0 to 1, got 2"):
        GEvalBinaryScore(reason="r", score=2)


def test_steps_lose_the_judges_own_numbering() -> None:
    steps = GEvalSteps(steps=["1. Read it.", "2) Check tone.", "- Look for blame.", "Plain."])
    assert steps.steps == ["Read it.", "Check tone.", "Look for blame.", "Plain."]
    with pytest.raises(ValueError, match="non-empty instruction"):
        GEvalSteps(steps=["1. "])


# ---------------------------------------------------------------------------- through the judge


def test_logprobs_give_the_weighted_score_normalised(
    judge_server: ScriptedJudgeServer, scripted_judge: Any
) -> None:
    script(judge_server, 8, logprobs={"8": {"8": lp(0.8), "7": lp(0.2)}})
    metric = politeness(scripted_judge, threshold=0.78)
    # 7.8 / 10 = 0.78; the threshold exactly at the score passes
    assert metric.measure(CASE) == 0.78
    assert metric.success is True
    assert (metric.raw_score, metric.weighted_score) == (8, 7.8)
    assert metric.reason == "Courteous, no blame."
    score_request = judge_server.requests[-1]
    assert score_request.body.get("logprobs") is True
    assert score_request.body.get("top_logprobs") == 20


def test_without_logprobs_the_plain_integer_counts(judge_server: ScriptedJudgeServer) -> None:
    with ScriptedJudgeServer(profile="ollama") as server:  # a server that offers no logprobs
        script(server, 7, logprobs={"7": {"7": lp(0.5), "9": lp(0.5)}})
        metric = politeness(server.judge(timeout=10.0), threshold=0.7)
        assert metric.measure(CASE) == 0.7  # 7 / 10, threshold at the boundary passes
        assert metric.success is True
        assert metric.weighted_score == 7.0


def test_top_logprobs_zero_asks_for_none(
    judge_server: ScriptedJudgeServer, scripted_judge: Any
) -> None:
    script(judge_server, 3, logprobs={"3": {"3": lp(0.5), "9": lp(0.5)}})
    metric = politeness(scripted_judge, top_logprobs=0)
    assert metric.measure(CASE) == 0.3
    assert metric.success is False
    assert not judge_server.requests[-1].body.get("logprobs")


@pytest.mark.parametrize(("answer", "score", "success"), [(1, 1.0, True), (0, 0.0, False)])
def test_strict_mode_is_binary(
    judge_server: ScriptedJudgeServer, scripted_judge: Any, answer: int, score: float, success: bool
) -> None:
    script(judge_server, answer, logprobs={str(answer): {"0": lp(0.5), "1": lp(0.5)}})
    metric = politeness(scripted_judge, strict_mode=True, threshold=0.2)
    assert metric.measure(CASE) == score
    assert metric.success is success
    assert metric.threshold == 1.0
    # 0 or 1 as written: no weighting, so no logprobs asked for
    assert not judge_server.requests[-1].body.get("logprobs")
    assert (
        "1 if the case meets every step completely, otherwise 0"
        in (prompts_for(judge_server, "GEvalScore")[-1])
    )


@pytest.mark.parametrize(
    ("answer", "strict"),
    [(11, False), (-1, False), (7.5, False), ("high", False), (True, False), (2, True)],
)
def test_a_score_off_the_scale_is_an_error_never_clipped(
    judge_server: ScriptedJudgeServer, scripted_judge: Any, answer: Any, strict: bool
) -> None:
    script(judge_server, answer)
    metric = politeness(scripted_judge, strict_mode=strict)
    with pytest.raises(MetricError) as info:
        metric.measure(CASE)
    assert info.value.error_type == "judge_invalid_response"
    assert metric.score is None and metric.success is False
    data = metric.to_data()
    assert data.score is None and data.error_type == "judge_invalid_response"
    # the judge was asked again (repair or retry) before giving up
    assert schema_names(judge_server).count("GEvalScore") > 1


# ---------------------------------------------------------------------------- steps


def test_steps_are_generated_once_for_many_cases(
    judge_server: ScriptedJudgeServer, scripted_judge: Any
) -> None:
    script(judge_server, 9)
    metric = politeness(scripted_judge)

    async def run_all() -> list[GEvalBase]:
        copies = [metric.clone() for _ in range(6)]
        cases = [CASE.model_copy(update={"input": f"question {i}"}) for i in range(6)]
        await asyncio.gather(*(m.a_measure(c) for m, c in zip(copies, cases, strict=True)))
        return list(copies)

    copies = asyncio.run(run_all())
    assert schema_names(judge_server).count("GEvalSteps") == 1
    assert schema_names(judge_server).count("GEvalScore") == 6
    assert (steps_cache.generated, steps_cache.memory_hits) == (1, 5)
    assert sorted(m.steps_source or "" for m in copies) == ["judge"] + ["memory"] * 5
    for m in copies:
        assert m.score == 0.9
        assert m.evaluation_steps == STEPS["steps"]
    # the case that generated the steps paid for two calls, the others for one
    assert sorted(m.judge_calls for m in copies) == [1, 1, 1, 1, 1, 2]
    assert all(m.input_tokens > 0 and m.output_tokens > 0 for m in copies)
    # the steps and the case are in the score prompt
    prompt = prompts_for(judge_server, "GEvalScore")[0]
    assert "1. Read what the customer asked.\n2. Look for rude or blaming wording." in prompt
    assert "Input:\nquestion" in prompt and "Actual Output:\nIt ships tomorrow" in prompt


def test_steps_come_back_from_disk_in_a_new_process(
    judge_server: ScriptedJudgeServer, scripted_judge: Any, _own_steps_cache: Path
) -> None:
    script(judge_server, 6)
    politeness(scripted_judge).measure(CASE)
    assert (_own_steps_cache / FILE_NAME).exists()
    judge_server.clear()
    # the server no longer knows GEvalSteps: asking for steps again would fail the case
    judge_server.add_rule({"reason": "ok", "score": 6}, schema="GEvalScore")
    code = f"""
import json
from spanjudge import GEval, LLMTestCase
from spanjudge.evaluators._judge.judges import LiteLLMJudge
judge = LiteLLMJudge("openai/scripted-judge", api_base={judge_server.base_url!r}, api_key="x")
m = GEval(name="politeness", criteria={CRITERIA!r}, model=judge)
m.measure(LLMTestCase(input="a", actual_output="b"))
print(json.dumps([m.score, m.steps_source, m.judge_calls, m.evaluation_steps]))
"""
    env = {"SPANJUDGE_CACHE_DIR": str(_own_steps_cache), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert out.returncode == 0, out.stderr
    score, source, calls, steps = json.loads(out.stdout.strip().splitlines()[-1])
    assert (score, source, calls, steps) == (0.6, "disk", 1, STEPS["steps"])
    assert schema_names(judge_server) == ["GEvalScore"]


def test_a_second_instance_reads_the_file_when_memory_is_empty(
    judge_server: ScriptedJudgeServer, scripted_judge: Any
) -> None:
    script(judge_server, 5)
    politeness(scripted_judge).measure(CASE)
    steps_cache.clear()  # memory only: the file stays
    metric = politeness(scripted_judge)
    metric.measure(CASE)
    assert metric.steps_source == "disk"
    assert schema_names(judge_server).count("GEvalSteps") == 1
    assert "Evaluation steps (cached, disk)" in (metric.verbose_logs or "")


@pytest.mark.parametrize("garbage", ["{not json", "[1, 2]", '{"format": 99, "entries": {}}', ""])
def test_a_corrupt_cache_file_is_ignored_and_rewritten(
    judge_server: ScriptedJudgeServer, scripted_judge: Any, _own_steps_cache: Path, garbage: str
) -> None:
    _own_steps_cache.mkdir(parents=True)
    path = _own_steps_cache / FILE_NAME
    path.write_text(garbage)
    script(judge_server, 4)
    metric = politeness(scripted_judge)
    assert metric.measure(CASE) == 0.4
    assert metric.steps_source == "judge"
    data = json.loads(path.read_text())
    assert [e["steps"] for e in data["entries"].values()] == [STEPS["steps"]]


def test_a_bad_entry_in_the_file_is_not_used(
    judge_server: ScriptedJudgeServer, scripted_judge: Any
) -> None:
    script(judge_server, 4)
    politeness(scripted_judge).measure(CASE)
    (key,) = json.loads(steps_cache.path.read_text())["entries"]
    steps_cache.path.write_text(
        json.dumps({"format": 1, "entries": {key: {"steps": [], "created": 1}}})
    )
    steps_cache.clear()
    metric = politeness(scripted_judge)
    metric.measure(CASE)
    assert metric.steps_source == "judge"


def test_a_changed_criteria_field_list_or_template_asks_for_new_steps(
    judge_server: ScriptedJudgeServer, scripted_judge: Any
) -> None:
    class Terser(GEvalTemplate):
        @staticmethod
        def generate_steps(criteria: str, fields: str) -> str:
            return f"Steps for {criteria} over {fields}. JSON:"

    script(judge_server, 5)
    politeness(scripted_judge).measure(CASE)
    GEval(name="p", criteria="Short answers.", model=scripted_judge).measure(CASE)
    politeness(scripted_judge, evaluation_params=["actual_output"]).measure(CASE)
    politeness(scripted_judge, evaluation_template=Terser).measure(CASE)
    assert schema_names(judge_server).count("GEvalSteps") == 4


def test_given_steps_are_used_without_a_steps_call(
    judge_server: ScriptedJudgeServer, scripted_judge: Any
) -> None:
    judge_server.add_rule({"reason": "fine", "score": 10}, schema="GEvalScore")
    metric = GEval(
        name="brevity",
        evaluation_steps=["Count the sentences of the Actual Output."],
        model=scripted_judge,
    )
    assert metric.measure(CASE) == 1.0
    assert metric.steps_source == "given"
    assert schema_names(judge_server) == ["GEvalScore"]
    assert "1. Count the sentences" in prompts_for(judge_server, "GEvalScore")[0]


def test_include_reason_false_keeps_one_call_and_no_reason(
    judge_server: ScriptedJudgeServer, scripted_judge: Any
) -> None:
    script(judge_server, 9)
    metric = politeness(scripted_judge, include_reason=False)
    metric.measure(CASE)
    assert metric.reason is None
    assert metric.judge_calls == 2  # steps + score: the reason comes with the score


def test_steps_cache_is_bounded_on_disk_and_in_memory(tmp_path: Path) -> None:
    cache = StepsCache(tmp_path, maxsize=2)
    for key in ("a", "b", "c"):
        cache.put(key, [f"step {key}"])
    assert len(cache) == 2
    entries = json.loads((tmp_path / FILE_NAME).read_text())["entries"]
    assert sorted(entries) == ["b", "c"]  # the oldest went
    fresh = StepsCache(tmp_path, maxsize=2)
    assert fresh.get("a") is None
    assert fresh.get("c") == (["step c"], "disk")


def test_processes_writing_at_once_lose_no_entry(tmp_path: Path) -> None:
    code = """
import sys
from spanjudge.evaluators._judge.metrics.geval_steps import StepsCache
cache = StepsCache(sys.argv[1])
for i in range(15):
    cache.put(f"{sys.argv[2]}-{i}", [f"step {i}"])
"""
    procs = [
        subprocess.Popen([sys.executable, "-c", code, str(tmp_path), f"p{n}"], cwd=ROOT)
        for n in range(4)
    ]
    assert [p.wait(60) for p in procs] == [0, 0, 0, 0]
    entries = json.loads((tmp_path / FILE_NAME).read_text())["entries"]
    assert len(entries) == 60
    assert not list(tmp_path.glob("*.tmp"))


def test_an_unwritable_cache_directory_is_not_an_error(
    judge_server: ScriptedJudgeServer, scripted_judge: Any, tmp_path: Path
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    steps_cache.directory = blocker / "cache"  # cannot be created: a file is in the way
    script(judge_server, 5)
    assert politeness(scripted_judge).measure(CASE) == 0.5
    assert politeness(scripted_judge).measure(CASE) == 0.5  # from memory
    assert schema_names(judge_server).count("GEvalSteps") == 1


# ---------------------------------------------------------------------------- parameters


def test_evaluation_params_accept_our_names_and_deepevals() -> None:
    from deepeval.test_case import SingleTurnParams

    metric = GEval(
        name="x",
        criteria="c",
        evaluation_params=[
            SingleTurnParams.INPUT,
            "Actual Output",
            "RETRIEVAL_CONTEXT",
            "LLMTestCaseParams.TOOLS_CALLED",
            "input",  # a repeat counts once
        ],
        model="openai/not-called",
    )
    assert metric.evaluation_params == (
        "input",
        "actual_output",
        "retrieval_context",
        "tools_called",
    )


@pytest.mark.parametrize(
    ("kwargs", "key", "words"),
    [
        ({"evaluation_params": ["inptu"]}, "evaluation_params", "unknown field 'inptu' (allowed: "),
        ({"evaluation_params": []}, "evaluation_params", "must not be empty"),
        ({"evaluation_params": "input"}, "evaluation_params", "expected a list"),
        ({"evaluation_params": ["tags"]}, "evaluation_params", "unknown field 'tags'"),
        ({"criteria": None}, "criteria", "give criteria or evaluation_steps"),
        ({"criteria": "  "}, "criteria", "non-empty"),
        ({"evaluation_steps": []}, "evaluation_steps", "non-empty list"),
        ({"evaluation_steps": ["ok", ""]}, "evaluation_steps", "non-empty list"),
        ({"name": ""}, "name", "non-empty string"),
        ({"top_logprobs": 21}, "top_logprobs", "0..20"),
    ],
)
def test_bad_parameters_name_the_key(kwargs: dict[str, Any], key: str, words: str) -> None:
    args: dict[str, Any] = {"name": "x", "criteria": CRITERIA, "model": "openai/not-called"}
    with pytest.raises(ParamError) as info:
        GEval(**{**args, **kwargs})
    assert info.value.key == key
    assert words in str(info.value)
    if key == "evaluation_params" and "allowed" in words:
        assert "actual_output" in str(info.value) and "retrieval_context" in str(info.value)


def test_config_holds_every_constructor_argument_and_clone_keeps_them() -> None:
    metric = GEval(
        name="correctness",
        criteria="Agrees with the expected output.",
        evaluation_params=["input", "expected_output", "actual_output"],
        threshold=0.6,
        model="openai/not-called",
        include_reason=False,
        strict_mode=True,
        async_mode=False,
        verbose_mode=False,
        top_logprobs=5,
    )
    params = set(inspect.signature(GEval).parameters)
    assert set(metric._config()) == params
    copy = metric.clone()
    assert copy._config() == metric._config()
    assert copy.name == "correctness" and copy.evaluation_params == metric.evaluation_params


def test_the_users_name_is_the_metric_name_on_results_and_rules(
    judge_server: ScriptedJudgeServer, scripted_judge: Any
) -> None:
    script(judge_server, 8)
    metric = politeness(scripted_judge)
    assert Rule(metric, target="agent").name == "politeness-agent"
    assert metric.__name__ == "politeness [GEval]"
    metric.measure(CASE)
    assert metric.to_data().name == "politeness"
    assert "politeness [GEval] Verbose Logs" in (metric.verbose_logs or "")
    with pytest.raises(ValueError, match="conversational metric"):
        Rule(metric, target="conversation")


def test_a_case_missing_a_chosen_field_is_not_sent_to_the_judge(
    judge_server: ScriptedJudgeServer, scripted_judge: Any
) -> None:
    metric = politeness(scripted_judge, evaluation_params=["input", "expected_output"])
    with pytest.raises(MissingFieldError) as info:
        metric.measure(CASE)
    assert info.value.fields == ["expected_output"]
    assert judge_server.requests == []


def test_list_and_tool_fields_are_shown_as_json(
    judge_server: ScriptedJudgeServer, scripted_judge: Any
) -> None:
    script(judge_server, 7)
    case = CASE.model_copy(
        update={
            "retrieval_context": ["Parcels ship in 1 day."],
            "tools_called": [ToolCall(name="track", input_parameters={"id": "42"})],
        }
    )
    metric = politeness(
        scripted_judge, evaluation_params=["actual_output", "retrieval_context", "tools_called"]
    )
    metric.measure(case)
    steps_prompt = prompts_for(judge_server, "GEvalSteps")[0]
    assert "Actual Output, Retrieval Context and Tools Called" in steps_prompt
    prompt = prompts_for(judge_server, "GEvalScore")[0]
    assert 'Retrieval Context:\n[\n "Parcels ship in 1 day."\n]' in prompt
    assert '"name": "track"' in prompt and '"id": "42"' in prompt
