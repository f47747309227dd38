"""The TraceQL and Jaeger queries in docs/seeing-scores.md (and the dashboard's Tempo panels)
name attributes and span names that spanjudge really writes.

Evaluation spans are emitted for real (ScoreEmitter -> OTLP/HTTP -> a loopback receiver) and
the enrich-mode keys come from the function the worker uses, so a renamed attribute or span
fails here, not in a user's empty search result.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

from spanjudge._core.kinds import NAMED_METRICS as METRIC_NAMES
from spanjudge._core.span_record import EvaluationRecord
from spanjudge.exporters._emit.emitter import ScoreEmitter
from spanjudge.exporters._emit.evaluation_result import score_attributes
from spanjudge.tracer import _attributes as attrs
from tests.deploy.promql import DASHBOARDS, ROOT
from tests.support.otlp_sink import OtlpSink

DOC = ROOT / "docs" / "seeing-scores.md"
STATUS_ERROR = 2  # OTLP Status.STATUS_CODE_ERROR; Jaeger shows it as the tag error=true
ATTRIBUTE = re.compile(
    r"(?<![\w./-])(?:span\.|resource\.)?((?:gen_ai|spanjudge)\.[a-z0-9_]+(?:\.[a-z0-9_]+)*"
    r"|error\.type)"
)
EVALUATION_KEYS = re.compile(r"^(gen_ai\.evaluation\.|spanjudge\.evaluation\.|error\.type$)")


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)


def dashboard_traceql() -> list[str]:
    out = []
    for path in DASHBOARDS:
        for panel in json.loads(path.read_text(encoding="utf-8"))["panels"]:
            out += [
                t["query"] for t in panel.get("targets", []) if t["datasource"]["type"] == "tempo"
            ]
    return out


@dataclass
class Emitted:
    """What reaches a backend: evaluation spans (child-span) and enrich-mode keys."""

    span_names: set[str] = field(default_factory=set)
    span_keys: set[str] = field(default_factory=set)
    event_names: set[str] = field(default_factory=set)
    labels: set[str] = field(default_factory=set)
    error_statuses: int = 0
    enrich_keys: set[str] = field(default_factory=set)


def records() -> list[EvaluationRecord]:
    out = []
    for i, metric in enumerate(METRIC_NAMES):
        for j, (status, score) in enumerate((("scored", 0.9), ("scored", 0.2), ("error", None))):
            n = i * 10 + j + 1
            scored = status == "scored"
            out.append(
                EvaluationRecord(
                    rule=f"{metric}-llm",
                    metric=metric,
                    target_type="llm",
                    target_id=f"{n:016x}",
                    trace_id=f"{n:032x}",
                    span_id=f"{n:016x}",
                    status=status,
                    score=score,
                    label=("pass" if score and score >= 0.5 else "fail") if scored else None,
                    success=(score is not None and score >= 0.5) if scored else None,
                    threshold=0.5,
                    reason="the answer cites the context" if scored else None,
                    error_type=None if scored else "judge_error",
                    judge_model="gpt-4o-mini",
                    input_tokens=500,
                    output_tokens=80,
                    cost=0.0003,
                    judge_calls=1,
                    service_name="support-bot",
                    finished_at=1_700_000_000.0,
                )
            )
    return out


@pytest.fixture(scope="module")
def emitted() -> Emitted:
    recs = records()
    with OtlpSink() as sink:
        emitter = ScoreEmitter(span_exporter=OTLPSpanExporter(endpoint=sink.traces_url))
        for record in recs:
            emitter.emit(record)
        emitter.force_flush()
        spans = sink.wait_for(lambda s: len(s) >= len(recs))
        emitter.shutdown()
    out = Emitted()
    for span in spans:
        out.span_names.add(span.name)
        out.span_keys |= set(span.attributes)
        out.event_names |= {name for name, _ in span.events}
        label = span.attributes.get(attrs.GEN_AI_EVALUATION_SCORE_LABEL)
        if label:
            out.labels.add(label)
        out.error_statuses += span.status_code == STATUS_ERROR
    for record in recs:
        out.enrich_keys |= set(score_attributes([record]))
    return out


def tracer_constants() -> set[str]:
    return {v for k, v in vars(attrs).items() if k.isupper() and isinstance(v, str)}


def unknown_attributes(text: str, emitted: Emitted) -> set[str]:
    """Attribute names in ``text`` that nothing spanjudge emits or records writes."""
    bad = set()
    for name in ATTRIBUTE.findall(text):
        if name.startswith("spanjudge.score."):
            ok = name in emitted.enrich_keys
        elif EVALUATION_KEYS.match(name):
            ok = name in emitted.span_keys or name in emitted.event_names
        else:  # attributes of the user's own spans, written by the tracer
            ok = name in tracer_constants()
        if not ok:
            bad.add(name)
    return bad


def test_the_docs_have_queries_for_both_backends() -> None:
    assert len(blocks("traceql")) >= 5
    assert len(blocks("jaeger")) >= 4


def test_every_attribute_in_the_docs_is_emitted(emitted: Emitted) -> None:
    text = DOC.read_text(encoding="utf-8")
    found = set(ATTRIBUTE.findall(text))
    assert attrs.GEN_AI_EVALUATION_SCORE_VALUE in found  # the extraction works
    assert any(n.startswith("spanjudge.score.") for n in found)
    assert unknown_attributes(text, emitted) == set()


def test_every_attribute_in_the_dashboard_traceql_is_emitted(emitted: Emitted) -> None:
    queries = dashboard_traceql()
    assert queries
    assert unknown_attributes("\n".join(queries), emitted) == set()


def test_checker_flags_a_misspelled_attribute(emitted: Emitted) -> None:
    assert unknown_attributes("{ span.gen_ai.evaluation.scores.value < 0.5 }", emitted) == {
        "gen_ai.evaluation.scores.value"
    }
    assert unknown_attributes("tags: spanjudge.score.faithfulnes.label=fail", emitted) == {
        "spanjudge.score.faithfulnes.label"
    }


@pytest.mark.parametrize(
    "query", blocks("traceql") + dashboard_traceql(), ids=lambda q: re.sub(r"\W+", "_", q)[:60]
)
def test_traceql_scopes_attributes_and_names_real_spans(query: str, emitted: Emitted) -> None:
    # TraceQL needs a scope (span./resource.) in front of an attribute; a bare one is a
    # different intrinsic or a syntax error
    for match in ATTRIBUTE.finditer(query):
        assert match.group(0).startswith(("span.", "resource.")), match.group(0)
    assert query.count("{") == query.count("}")
    for name in re.findall(r'(?<![\w.])name = "([^"]+)"', query):
        assert name in emitted.span_names
    for metric in re.findall(rf'{re.escape(attrs.GEN_AI_EVALUATION_NAME)} = "([^"]+)"', query):
        assert metric in METRIC_NAMES
    for label in re.findall(r'score\.label = "([^"]+)"', query):
        assert label in emitted.labels


@pytest.mark.parametrize("block", blocks("jaeger"), ids=lambda b: re.sub(r"\W+", "_", b)[:60])
def test_jaeger_searches_use_real_operations_and_tags(block: str, emitted: Emitted) -> None:
    for operation in re.findall(r"^operation: (.+)$", block, re.M):
        assert operation.strip() in emitted.span_names
    tags: dict[str, Any] = dict(
        pair.split("=", 1)
        for line in re.findall(r"^tags: (.+)$", block, re.M)
        for pair in line.split()
    )
    assert tags
    for key, value in tags.items():
        if key == "error":
            assert value == "true" and emitted.error_statuses > 0
        elif key == attrs.GEN_AI_EVALUATION_NAME:
            assert value in METRIC_NAMES
        elif key.endswith(".label"):
            assert value in emitted.labels
        elif key.endswith(".success"):
            assert value in ("true", "false")
