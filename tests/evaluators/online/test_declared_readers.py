"""Declared readers (issue 38): a made-up instrumentation no dialect reads gives no targets; a
reader declared in the worker's TOML, or passed to ``monitor(readers=...)``, makes every owed
evaluation of the interop scenario right; a bad reader stops the worker at start-up with one
line naming the reader and the key."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import spanjudge
from spanjudge._core.span_record import SpanEvent, SpanRecord
from spanjudge.errors import ConfigError
from spanjudge.evaluators._plan.rules import Rule
from spanjudge.evaluators._rebuild.cases import build_case
from spanjudge.evaluators._rebuild.dialects import declared, read_span
from spanjudge.evaluators._rebuild.targets import Skip, find_targets
from spanjudge.settings import load_settings
from spanjudge.testing import ScriptedJudgeServer
from tests.evaluators.online.acme_instrumentation import (
    READERS,
    READERS_TOML,
    RECORDING,
    write_recording,
)
from tests.evaluators.online.spans import Trace
from tests.interop import conftest as interop
from tests.interop.owed import judge_recording

AGENT_RULES = ["faith-agent", "bias-agent"]
LLM_RULES = ["faith-llm", "bias-llm"]


@pytest.fixture(autouse=True)
def _no_readers_after() -> Iterator[None]:
    yield
    declared.install(None)


@pytest.fixture(scope="module")
def judge() -> Iterator[ScriptedJudgeServer]:
    from spanjudge._demo.judge import start_offline_judge

    server = start_offline_judge()
    yield server
    server.stop()


@pytest.fixture
def acme(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The made-up recording where the interop replay looks for recordings."""
    monkeypatch.setattr(interop, "FIXTURES", tmp_path / "fixtures")
    return write_recording(tmp_path / "fixtures")


def _replay(tmp: Path, judge: ScriptedJudgeServer, **extra: Any) -> interop.Replayed:
    def config(j: ScriptedJudgeServer, store_url: str, downstream: str) -> dict[str, Any]:
        return {**interop.worker_config(j, store_url, downstream), **extra}

    return interop.replay(RECORDING, tmp, judge, config=config)


def test_no_reader_no_targets(acme: Path, tmp_path: Path, judge: ScriptedJudgeServer) -> None:
    done = _replay(tmp_path, judge)
    scored = [r for r in done.results if r.rule != interop.TOPICS]
    assert scored == []
    verdict = judge_recording(done, AGENT_RULES, LLM_RULES, interop.TOPICS)
    assert verdict.owed == 21
    assert verdict.scored_right <= 1  # at most the conversation, found by its key at ingest


def test_reader_in_toml_reads_every_owed_evaluation(
    acme: Path, tmp_path: Path, judge: ScriptedJudgeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    toml = tmp_path / "worker.toml"
    toml.write_text(READERS_TOML, encoding="utf-8")
    real = interop.load_settings

    def from_file(_: Any, **overrides: Any) -> Any:  # the replay's settings beside the file
        return real(toml, **overrides)

    monkeypatch.setattr(interop, "load_settings", from_file)
    done = _replay(tmp_path, judge)
    verdict = judge_recording(done, AGENT_RULES, LLM_RULES, interop.TOPICS)
    assert (verdict.owed, verdict.scored_right, verdict.duplicates) == (21, 21, 0), verdict.wrong
    assert verdict.evaluated_not_owed == 0
    case = next(c for (rule, _), c in done.cases.items() if rule == "faith-llm")
    assert case.metadata["context_source"] == "retrieval"


def test_reader_in_python_via_monitor(
    acme: Path, tmp_path: Path, judge: ScriptedJudgeServer
) -> None:
    """``monitor(readers=...)`` installs them; the same 21 of 21."""
    from spanjudge.evaluators._loop.monitor import monitor

    store = spanjudge.open_store(f"sqlite:///{tmp_path}/m.db")
    rule = Rule(spanjudge.BiasMetric(model="x"), target="llm")
    mon = monitor(
        [rule], store=store, readers=[spanjudge.Reader(**READERS[0]), READERS[1]], start=False
    )
    try:
        assert [r.name for r in declared.installed()] == ["acme-model", "acme-lookup"]
    finally:
        mon.stop()
    declared.install(None)
    # the whole scenario through the worker, readers as Python objects in its settings
    done = _replay(tmp_path, judge, readers=[spanjudge.Reader(**r) for r in READERS])
    verdict = judge_recording(done, AGENT_RULES, LLM_RULES, interop.TOPICS)
    assert (verdict.owed, verdict.scored_right, verdict.duplicates) == (21, 21, 0), verdict.wrong


BAD = [
    ({"inputs": {"attribute": "x"}}, "reader 'bad': inputs: unknown key"),
    ({"input": {"attribute": "x", "path": "$..x"}}, "reader 'bad': input.path: bad JSON path"),
    (
        {"input": {"attribute": "x", "transforms": ["upper"]}},
        "reader 'bad': input.transforms: unknown transform 'upper'",
    ),
    ({"kind": "judge"}, "reader 'bad': kind: Input should be 'llm', 'retriever', 'tool' or"),
    ({"match": {}}, "reader 'bad': match: give at least one of scope"),
    ({"output": {"path": "$.a"}}, "reader 'bad': output: give exactly one of attribute and event"),
    (
        {"input": {"attribute": "x", "transforms": ["regex:(unclosed"]}},
        "reader 'bad': input.transforms: regex '(unclosed' does not compile",
    ),
    ({"match": {"scope": "x", "colour": "red"}}, "reader 'bad': match.colour: unknown key"),
]


def _bad(change: dict[str, Any]) -> dict[str, Any]:
    return {"name": "bad", "kind": "llm", "match": {"scope": "acme"}, **change}


@pytest.mark.parametrize(("change", "line"), BAD)
def test_bad_reader_in_toml_fails_at_start_up(
    tmp_path: Path, change: dict[str, Any], line: str
) -> None:
    toml = tmp_path / "worker.toml"
    toml.write_text(
        'rules = [{metric = "bias"}]\nreaders = [' + _toml_inline(_bad(change)) + "]\n",
        encoding="utf-8",
    )
    with pytest.raises(ConfigError) as raised:
        load_settings(toml)
    message = str(raised.value)
    assert "\n" not in message
    assert f"readers.0: {line}" in message


@pytest.mark.parametrize(("change", "line"), BAD)
def test_bad_reader_in_python_is_a_config_error(change: dict[str, Any], line: str) -> None:
    with pytest.raises(ConfigError) as raised:
        spanjudge.Reader(**_bad(change))
    assert str(raised.value).startswith(line)
    assert "\n" not in str(raised.value)
    with pytest.raises(ConfigError):
        declared.install([_bad(change)])
    assert declared.installed() == ()


def test_two_readers_of_one_name() -> None:
    with pytest.raises(ConfigError, match="'acme-model' is used twice"):
        declared.install([READERS[0], READERS[0]])


def test_worker_with_a_bad_reader_listens_nowhere(tmp_path: Path) -> None:
    """The worker's settings are loaded before anything binds: the error is raised by
    load_settings, so ``spanjudge worker`` exits before its receiver exists."""
    from click.testing import CliRunner

    from spanjudge.cli.app import cli as app

    toml = tmp_path / "worker.toml"
    toml.write_text(
        f'store_url = "sqlite:///{tmp_path}/w.db"\nrules = [{{metric = "bias"}}]\n'
        f'judge_base_url = "http://127.0.0.1:9"\nreceiver_port = 0\n'
        "readers = [" + _toml_inline(_bad({"kind": "judge"})) + "]\n",
        encoding="utf-8",
    )
    result = CliRunner().invoke(app, ["worker", "--config", str(toml)])
    assert result.exit_code != 0
    assert "reader 'bad': kind:" in result.output
    assert not (tmp_path / "w.db").exists()  # nothing opened, nothing listening


def _toml_inline(value: Any) -> str:
    if isinstance(value, dict):
        return (
            "{" + ", ".join(f"{json.dumps(k)} = {_toml_inline(v)}" for k, v in value.items()) + "}"
        )
    if isinstance(value, list):
        return "[" + ", ".join(_toml_inline(v) for v in value) + "]"
    return json.dumps(value)


# ----------------------------------------------------------------- the reading, span by span
def _span(name: str, scope: str, attributes: dict[str, Any], **kw: Any) -> SpanRecord:
    trace = Trace()
    span = trace.span(name, attributes=attributes, **kw)
    span.scope_name = scope
    return span


def test_reader_wins_and_the_dialect_fills_the_rest() -> None:
    """A semconv span the team reads its own way: the reader's input wins, the dialect's
    output (which the reader leaves unset) stays."""
    span = _span(
        "chat",
        "team.llm",
        {
            "gen_ai.operation.name": "chat",
            "gen_ai.input.messages": json.dumps([{"role": "user", "content": "templated"}]),
            "gen_ai.output.messages": json.dumps([{"role": "assistant", "content": "Fine."}]),
            "team.question": "Is it raining?",
        },
    )
    assert read_span(span).input_text == "templated"
    declared.install(
        [
            {
                "name": "team",
                "kind": "llm",
                "match": {"scope": "team.*"},
                "input": {"attribute": "team.question"},
            }
        ]
    )
    view = read_span(span)
    assert view.dialect == "reader:team"
    assert (view.input_text, view.output_text) == ("Is it raining?", "Fine.")
    assert view.found["input"] == "reader 'team': attribute team.question"


def test_transforms_each_do_their_part() -> None:
    messages = [
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "x"},
        {"role": "user", "content": [{"type": "text", "text": "second"}]},
    ]
    span = _span(
        "t.call",
        "t",
        {
            "t.msgs": json.dumps({"m": messages}),
            "t.double": json.dumps({"inner": json.dumps({"text": "unwrapped"})}),
            "t.answer": "Verdict: YES because it fits",
            "t.docs": json.dumps([{"text": "doc one"}, {"text": "doc two"}]),
            "t.tagged": "<answer>Tagged answer</answer>",
        },
        events=[SpanEvent("t.log", 1, {"body": {"said": "from the log body"}})],
    )

    def value(**source: Any) -> Any:
        return declared.FieldSource(**source).value(span)

    assert value(attribute="t.msgs", path="$.m", transforms=["last_message:user"])["role"] == "user"
    assert value(attribute="t.msgs", path="$.m", transforms=["last_message:assistant"]) == {
        "role": "assistant",
        "content": "x",
    }
    assert value(attribute="t.msgs", path="$.m[-1]", transforms=["content_text"]) == "second"
    assert value(attribute="t.double", path="$.inner", transforms=["parse_json"]) == {
        "text": "unwrapped"
    }
    assert value(attribute="t.double", path="$.inner.text") == "unwrapped"  # parsed on the way
    assert value(attribute="t.answer", transforms=["regex:Verdict: (\\w+)"]) == "YES"
    assert value(attribute="t.answer", transforms=["regex:Nope (\\w+)"]) is None
    assert value(attribute="t.docs", transforms=["join_documents"]) == "doc one\ndoc two"
    assert value(attribute="t.docs", path="$[*].text") == ["doc one", "doc two"]
    assert value(attribute="t.tagged", transforms=["strip_markers"]) == "Tagged answer"
    assert value(event="t.log", path="$.said") == "from the log body"
    assert value(attribute="t.missing") is None
    assert value(attribute="t.docs", path="$[5].text") is None


def test_a_tool_reader_gives_the_step_its_name_arguments_result_and_error() -> None:
    from spanjudge.evaluators._rebuild.scope import SpanTree
    from spanjudge.evaluators._rebuild.trajectory import trajectory_of

    trace = Trace()
    turn = trace.span("bot.turn", attributes={"bot.q": "Refund order 7", "bot.a": "Sorry."})
    tool = trace.span(
        "bot.exec",
        turn,
        {"bot.call": json.dumps({"fn": "refund", "args": {"order": 7}, "err": "order locked"})},
    )
    for s in (turn, tool):
        s.scope_name = "bot"
    declared.install(
        [
            {
                "name": "bot-turn",
                "kind": "agent",
                "match": {"scope": "bot", "span_name": "bot.turn"},
                "input": {"attribute": "bot.q"},
                "output": {"attribute": "bot.a"},
            },
            {
                "name": "bot-tool",
                "kind": "tool",
                "match": {"scope": "bot", "span_name": "bot.exec"},
                "tool_name": {"attribute": "bot.call", "path": "$.fn"},
                "arguments": {"attribute": "bot.call", "path": "$.args"},
                "error": {"attribute": "bot.call", "path": "$.err"},
            },
        ]
    )
    found = trajectory_of(SpanTree(trace.spans), turn)
    [step] = [s for s in found.steps if s.kind == "tool_call"]
    assert (step.name, step.error) == ("refund", "order locked")
    assert "7" in str(step.arguments)


def test_a_readers_field_still_passes_the_plausibility_gate() -> None:
    """A reader pointed at a whole result object: the gate refuses it as for any dialect."""
    result = json.dumps({"state": "done", "order": 7, "eta_days": 2})
    span = _span("x.call", "x", {"x.q": "Is my order late?", "x.r": result})
    declared.install(
        [
            {
                "name": "x",
                "kind": "llm",
                "match": {"scope": "x"},
                "input": {"attribute": "x.q"},
                "output": {"attribute": "x.r"},
            }
        ]
    )
    rule = Rule(spanjudge.BiasMetric(model="x"), target="llm")
    [target] = find_targets(rule, [span])
    case = build_case(rule, target, [span])
    assert isinstance(case, Skip), case
    assert "implausible actual_output" in case.reason
    assert "object_dump" in case.reason
    assert "reader 'x': attribute x.r" in case.reason  # where the field came from


def test_a_path_that_never_matches_is_logged_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    span = _span("y.call", "y", {"y.q": json.dumps({"question": "Hi?"})})
    source = declared.FieldSource(attribute="y.q", path="$.prompt")
    reader = declared.Reader(name="y", kind="llm", match={"scope": "y"}, input=source)
    now = [1000.0]
    monkeypatch.setattr(declared.time, "monotonic", lambda: now[0])
    source._last_hit = now[0]
    with caplog.at_level(logging.WARNING, logger="spanjudge.readers"):
        declared.field_values(reader, span)
        assert not caplog.records  # not yet an hour
        now[0] += declared.MISS_WINDOW_SECONDS + 1
        for _ in range(3):
            declared.field_values(reader, span)
    [record] = caplog.records
    assert "reader 'y' input: attribute y.q $.prompt has matched nothing for an hour" in (
        record.getMessage()
    )


# ----------------------------------------------------------------- explain --suggest-reader
def test_suggested_reader_pasted_unchanged_reads_the_model_calls(
    acme: Path, tmp_path: Path, judge: ScriptedJudgeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No reader: explain --suggest-reader on a stored turn prints a block; that block, pasted
    unchanged into the worker's file, reads every model call of the made-up instrumentation
    (the LLM rules' 10 owed evaluations right)."""
    from click.testing import CliRunner

    from spanjudge.cli.app import cli

    before = _replay(tmp_path / "before", judge)
    [trace_id, *_] = before.turn_of_trace
    store_url = f"sqlite:///{tmp_path / 'before'}/{RECORDING}.db"
    result = CliRunner().invoke(
        cli, ["explain", trace_id, "--store", store_url, "--suggest-reader"]
    )
    assert result.exit_code == 0, result.output
    block = result.output
    assert "[[readers]]" in block
    toml = tmp_path / "worker.toml"
    toml.write_text(block, encoding="utf-8")
    real = interop.load_settings
    monkeypatch.setattr(interop, "load_settings", lambda _, **kw: real(toml, **kw))
    after = _replay(tmp_path / "after", judge)
    verdict = judge_recording(after, [], LLM_RULES, interop.TOPICS)
    llm_owed = 2 * len(interop.scenario.TURNS)
    assert verdict.scored_right - 1 == llm_owed, (block, verdict.wrong)  # +1: the conversation


def test_nothing_to_suggest_when_every_span_is_read(
    acme: Path, tmp_path: Path, judge: ScriptedJudgeServer
) -> None:
    from click.testing import CliRunner

    from spanjudge.cli.app import cli

    toml = tmp_path / "readers.toml"
    toml.write_text(f'store_url = "sqlite:///{tmp_path}/x.db"\n' + READERS_TOML, encoding="utf-8")
    done = _replay(tmp_path, judge)
    [trace_id, *_] = done.turn_of_trace
    store_url = f"sqlite:///{tmp_path}/{RECORDING}.db"
    args = ["explain", trace_id, "--config", str(toml), "--store", store_url, "--suggest-reader"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert "no reader to suggest" in result.output


# ----------------------------------------------------------------- shipped readers
def test_openlit_retrieval_is_a_shipped_reader() -> None:
    """OpenLIT's retrieval spans are read by the reader shipped in dialects/shipped.py (no
    dialect module), its chat spans by the semconv dialect."""
    docs = [{"id": "d1", "score": 0.9, "text": "Parcels leave within a day."}]
    trace = Trace()
    retrieval = trace.span(
        "retrieve",
        attributes={
            "gen_ai.operation.name": "retrieval",
            "gen_ai.retrieval.query.text": "When do parcels leave?",
            "gen_ai.output.messages": json.dumps(docs),
        },
    )
    retrieval.scope_name = "openlit"
    view = read_span(retrieval)
    assert (view.dialect, view.kind) == ("openlit", "retriever")
    assert view.document_texts == ["Parcels leave within a day."]
    assert view.input_text == "When do parcels leave?"
    with pytest.raises(ConfigError, match="'openlit' is a shipped reader's"):
        declared.install([{**READERS[0], "name": "openlit"}])
