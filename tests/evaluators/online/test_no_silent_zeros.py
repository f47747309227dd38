"""No silent zeros: spans no dialect reads and rules that find no target are counted on
/metrics and logged once, with what was seen instead (issue 12, item 4)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from prometheus_client import CollectorRegistry, generate_latest

from spanjudge._core import metric_names as names
from spanjudge._core.span_record import SpanRecord
from spanjudge._core.telemetry import Telemetry, prometheus_meter_provider
from spanjudge._receive.decode import PROTOBUF, decode_traces
from spanjudge._store.sqlite import SQLiteStore
from spanjudge.evaluators._judge.metrics.faithfulness import FaithfulnessMetric
from spanjudge.evaluators._judge.metrics.topic_adherence import TopicAdherenceMetric
from spanjudge.evaluators._plan.coverage import Coverage, LogOnce, no_target_reason
from spanjudge.evaluators._plan.planner import Planner, TickReport
from spanjudge.evaluators._plan.rules import Rule
from tests.evaluators.online.spans import Trace
from tests.support.metrics import data_points

OPENINFERENCE = Path(__file__).parents[2] / "interop" / "fixtures" / "openinference"
ARRIVED = 1_000.0
LATER = 2_000.0  # every trace written at ARRIVED has settled by then
LOGGER = "spanjudge.planner"


def _http_trace(service: str = "shop", path: str = "/health") -> Trace:
    trace = Trace(service)
    root = trace.span(f"GET {path}", attributes={"http.method": "GET"})
    trace.span("SELECT orders", root, attributes={"db.system": "sqlite", "db.statement": "x"})
    return trace


def _openinference_agent_only(service: str = "shop") -> Trace:
    trace = Trace(service)
    trace.span(
        "support-agent",
        attributes={
            "openinference.span.kind": "AGENT",
            "input.value": "How long do I have to return a blender?",
            "output.value": "30 days.",
        },
    )
    return trace


def _recorded_openinference() -> list[SpanRecord]:
    return [s for p in sorted(OPENINFERENCE.glob("*-traces.pb")) for s in _decode(p)]


def _decode(path: Path) -> list[SpanRecord]:
    return decode_traces(path.read_bytes(), PROTOBUF)


class Setup:
    def __init__(self, tmp_path: Path, rules: list[Rule]) -> None:
        self.store = SQLiteStore(str(tmp_path / "spans.db"))
        self.reader = InMemoryMetricReader()
        self.telemetry = Telemetry(MeterProvider(metric_readers=[self.reader]))
        self.planner = Planner(
            {r.name: r for r in rules}, self.store, clock=lambda: LATER, telemetry=self.telemetry
        )

    def tick(self, *traces: list[SpanRecord]) -> TickReport:
        for spans in traces:
            self.store.write_spans(spans, now=ARRIVED)
        report = TickReport()
        self.planner.plan(report, now=LATER, settle_seconds=10, idle_seconds=10)
        return report

    def count(self, metric: str, **labels: str) -> float:
        matching = (
            point.value
            for name, point in data_points(self.reader)
            if name == metric and all(point.attributes.get(k) == v for k, v in labels.items())
        )
        return sum(matching, 0.0)


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER and r.levelno >= 30]


def _llm_rule(**kwargs: Any) -> Rule:
    return Rule(FaithfulnessMetric(model="gpt-4o-mini"), target="llm", **kwargs)


def test_unrecognised_spans_are_counted_and_their_shape_logged_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER)
    setup = Setup(tmp_path, [_llm_rule()])
    first, second = _http_trace(), _http_trace()
    setup.tick(first.spans)
    setup.tick(second.spans)

    counted = setup.count(names.PLANNER_UNRECOGNISED_SPANS, service="shop")
    assert counted == 4  # two spans in each of two traces
    shapes = [m for m in _warnings(caplog) if "read by no GenAI dialect" in m]
    # one line per shape (the HTTP root, the database child), not per span or per trace
    assert len(shapes) == 2, shapes
    http = next(m for m in shapes if "'GET /health'" in m)
    assert "attributes: http.method" in http
    assert f"spanjudge explain {first.trace_id}" in http
    assert "service shop" in http


def test_the_logged_attribute_keys_are_bounded(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER)
    trace = Trace("shop")
    trace.span("wide", attributes={f"k{i:03d}": i for i in range(50)})
    Coverage().trace(trace.spans, [])
    (line,) = _warnings(caplog)
    assert "k029" in line and "k030" not in line
    assert "(50 keys)" in line


def test_the_memory_of_logged_shapes_is_bounded(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER)
    coverage = Coverage(memory=3)
    for n in range(5):
        trace = Trace(f"svc-{n}")
        trace.span("GET /", attributes={"http.method": "GET"})
        coverage.trace(trace.spans, [])
    assert len(coverage.logged) == 3
    assert len(_warnings(caplog)) == 5
    once = LogOnce(2)
    assert [once.first(k) for k in ("a", "a", "b", "c", "a")] == [True, False, True, True, True]


def test_a_rule_without_its_span_kind_is_counted_and_says_what_it_saw(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER)
    rule = _llm_rule()
    setup = Setup(tmp_path, [rule])
    traces = [_openinference_agent_only() for _ in range(3)]
    setup.tick(*(t.spans for t in traces))
    setup.tick(_openinference_agent_only().spans)

    assert setup.count(names.RULES_NO_TARGET, rule=rule.name, reason="no_span_of_kind") == 4
    lines = [m for m in _warnings(caplog) if m.startswith(f"rule {rule.name}")]
    assert lines == [
        f"rule {rule.name} found no llm span in 3 trace(s) of service shop; spans seen: "
        f"agent (openinference). See how they were read: spanjudge explain {traces[0].trace_id}"
    ]


def test_a_filter_that_refuses_a_recorded_openinference_trace_is_a_counted_miss(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER)
    rule = _llm_rule(filter={"service": "checkout"})
    setup = Setup(tmp_path, [rule])
    spans = _recorded_openinference()
    trace_ids = {s.trace_id for s in spans}
    report = setup.tick(spans)

    assert report.jobs_enqueued == 0
    assert report.skipped == {"filtered": len(trace_ids)}
    filtered = setup.count(names.RULES_NO_TARGET, rule=rule.name, reason="filtered")
    assert filtered == len(trace_ids) == 5
    assert setup.count(names.RULES_NO_TARGET, reason="no_span_of_kind") == 0
    assert setup.count(names.PLANNER_UNRECOGNISED_SPANS) == 0  # every span is read
    (line,) = [m for m in _warnings(caplog) if m.startswith(f"rule {rule.name}")]
    assert "refused every llm target by its filter in 5 trace(s)" in line
    assert "service interop-openinference" in line
    assert "agent (openinference), llm (openinference), retriever (openinference)" in line


def test_the_same_recorded_trace_without_the_filter_has_no_miss(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER)
    rule = _llm_rule()
    setup = Setup(tmp_path, [rule])
    report = setup.tick(_recorded_openinference())
    assert report.jobs_enqueued == 5
    assert setup.count(names.RULES_NO_TARGET) == 0
    assert _warnings(caplog) == []


def test_traces_without_genai_spans_count_only_when_the_tick_found_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER)
    rule = _llm_rule()
    setup = Setup(tmp_path, [rule])
    beside_traffic = Trace("shop")
    beside_traffic.llm()
    setup.tick(_http_trace().spans, beside_traffic.spans)  # a health check beside real traffic
    assert setup.count(names.RULES_NO_TARGET, rule=rule.name) == 0

    setup.tick(_http_trace().spans, _http_trace().spans)  # nothing this rule can read
    assert setup.count(names.RULES_NO_TARGET, rule=rule.name, reason="no_genai_span") == 2
    (line,) = [m for m in _warnings(caplog) if m.startswith(f"rule {rule.name}")]
    assert "found no span any GenAI dialect reads in 2 trace(s) of service shop" in line
    assert "spans seen: 4 unrecognised" in line


def test_conversation_rules_count_turns_without_a_conversation_id(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER)
    rule = Rule(
        TopicAdherenceMetric(relevant_topics=["orders"], model="gpt-4o-mini"),
        target="conversation",
    )
    setup = Setup(tmp_path, [rule])
    trace = Trace("shop")
    trace.agent()  # a turn, but no conversation id under any known key
    setup.tick(trace.spans)
    assert setup.count(names.RULES_NO_TARGET, rule=rule.name, reason="no_conversation") == 1
    assert no_target_reason(rule, trace.spans) == "no_conversation"
    (line,) = [m for m in _warnings(caplog) if m.startswith(f"rule {rule.name}")]
    assert "agent/LLM turns without a conversation id in 1 trace(s)" in line


def test_no_target_reasons_per_rule_kind() -> None:
    agent_only = _openinference_agent_only().spans
    assert no_target_reason(_llm_rule(), agent_only) == "no_span_of_kind"
    assert no_target_reason(Rule(FaithfulnessMetric(model="m"), target="agent"), agent_only) is None
    assert no_target_reason(_llm_rule(), _http_trace().spans) == "no_genai_span"
    refused = Rule(FaithfulnessMetric(model="m"), target="trace", filter={"service": "x"})
    assert no_target_reason(refused, agent_only) == "filtered"
    trace = Trace("shop")
    child = trace.llm(parent=trace.agent())
    trace_rule = Rule(FaithfulnessMetric(model="m"), target="trace")
    assert no_target_reason(trace_rule, [child]) == "no_root_span"  # the root never arrived


def _scraped(registry: CollectorRegistry, name: str, **labels: str) -> float:
    for line in generate_latest(registry).decode().splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no series {name} {labels}")


def test_prime_starts_the_new_counters_at_zero() -> None:
    registry = CollectorRegistry()
    telemetry = Telemetry(prometheus_meter_provider(registry))
    telemetry.prime(["faithfulness-llm"], services=["shop"])
    no_target = "spanjudge_rules_no_target_total"
    for reason in names.NO_TARGET_REASONS:
        assert _scraped(registry, no_target, rule="faithfulness-llm", reason=reason) == 0.0
    assert _scraped(registry, "spanjudge_planner_unrecognised_spans_total", service="shop") == 0.0
    telemetry.record_no_target("faithfulness-llm", "filtered", 2)
    telemetry.record_unrecognised_spans("shop", 3)
    assert _scraped(registry, no_target, rule="faithfulness-llm", reason="filtered") == 2.0
    assert _scraped(registry, "spanjudge_planner_unrecognised_spans_total", service="shop") == 3.0
