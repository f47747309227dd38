"""Rule validation and span filters."""

from __future__ import annotations

from typing import Any

import pytest

from spanjudge._core.span_record import SpanRecord
from spanjudge.evaluators._judge.metrics.bias import BiasMetric
from spanjudge.evaluators._judge.metrics.faithfulness import FaithfulnessMetric
from spanjudge.evaluators._judge.metrics.topic_adherence import TopicAdherenceMetric
from spanjudge.evaluators._plan.rules import Rule, SpanFilter
from spanjudge.evaluators._rebuild.targets import conversation_target, find_targets
from spanjudge.tracer import _attributes as attrs
from tests.evaluators.online.spans import Trace


def _llm_span(**overrides: Any) -> SpanRecord:
    trace = Trace(service=overrides.pop("service", "shop"))
    return trace.llm(**overrides)


# ----------------------------------------------------------------------------- validation
def test_defaults_and_stable_name() -> None:
    rule = Rule(FaithfulnessMetric())
    assert (rule.target, rule.sample_rate, rule.filter) == ("llm", 1.0, None)
    assert rule.name == "faithfulness-llm"
    assert Rule(BiasMetric(), target="agent").name == "bias-agent"
    assert (
        Rule(TopicAdherenceMetric(relevant_topics=["orders"]), target="conversation").name
        == "topic_adherence-conversation"
    )
    assert Rule(BiasMetric(), name="bias-prod").name == "bias-prod"


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"target": "span"}, "target"),
        ({"sample_rate": 1.5}, "sample_rate"),
        ({"sample_rate": -0.1}, "sample_rate"),
        ({"sample_rate": float("nan")}, "sample_rate"),
        ({"sample_rate": True}, "sample_rate"),
        ({"sample_rate": "0.5"}, "sample_rate"),
        ({"max_per_minute": 0}, "max_per_minute"),
        ({"max_per_minute": 2.5}, "max_per_minute"),
        ({"max_cost_per_day": 0.0}, "max_cost_per_day"),
        ({"max_cost_per_day": -2}, "max_cost_per_day"),
        ({"filter": 42}, "filter"),
        ({"filter": {"span": "chat*"}}, "filter"),
        ({"filter": {"service": 3}}, "filter.service"),
        ({"filter": {"attributes_exist": "gen_ai.agent.name"}}, "attributes_exist"),
        ({"name": ""}, "name"),
        ({"build_case": "not callable"}, "build_case"),
    ],
)
def test_invalid_rules_name_the_field(kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        Rule(BiasMetric(), **kwargs)


def test_conversational_metrics_and_conversation_targets_go_together() -> None:
    with pytest.raises(ValueError, match=r"target.*conversational"):
        Rule(TopicAdherenceMetric(relevant_topics=["orders"]), target="llm")
    with pytest.raises(ValueError, match="target='conversation' needs a conversational metric"):
        Rule(FaithfulnessMetric(), target="conversation")


def test_metric_without_a_name_is_rejected() -> None:
    with pytest.raises(ValueError, match=r"Rule\.metric"):
        Rule(object())


def test_rates_at_the_bounds_are_valid() -> None:
    assert Rule(BiasMetric(), sample_rate=0).sample_rate == 0.0
    assert Rule(BiasMetric(), sample_rate=1).sample_rate == 1.0


# ----------------------------------------------------------------------------- filters
@pytest.mark.parametrize(
    ("flt", "expected"),
    [
        (SpanFilter(span_name="chat *"), True),
        (SpanFilter(span_name="chat gpt-4o*"), True),
        (SpanFilter(span_name="invoke_agent *"), False),
        (SpanFilter(span_name="Chat *"), False),  # globs are case-sensitive
        (SpanFilter(service="shop"), True),
        (SpanFilter(service="sh?p"), True),
        (SpanFilter(service="billing"), False),
        (SpanFilter(model="gpt-4o-mini"), True),
        (SpanFilter(model="gpt-4o-2024-*"), True),  # the response model counts too
        (SpanFilter(model="claude*"), False),
        (SpanFilter(agent="support"), False),  # an llm span has no agent name
        (SpanFilter(attributes={"deployment.environment": "prod"}), True),
        (SpanFilter(attributes={"deployment.environment": "dev"}), False),
        (SpanFilter(attributes={"tenant.tier": "3"}), True),  # config strings match ints
        (SpanFilter(attributes={"tenant.tier": 3}), True),
        (SpanFilter(attributes={"beta": "true"}), True),
        (SpanFilter(attributes={"missing.key": None}), False),
        (SpanFilter(attributes_exist=["gen_ai.request.model", "tenant.tier"]), True),
        (SpanFilter(attributes_exist=["gen_ai.conversation.id"]), False),
        (SpanFilter(), True),
    ],
)
def test_each_filter_condition(flt: SpanFilter, expected: bool) -> None:
    span = _llm_span(
        **{
            "deployment.environment": "prod",
            "tenant.tier": 3,
            "beta": True,
            attrs.GEN_AI_RESPONSE_MODEL: "gpt-4o-2024-08-06",
        }
    )
    assert flt.matches(span) is expected


def test_all_given_conditions_must_hold() -> None:
    span = _llm_span()
    assert SpanFilter(span_name="chat *", service="shop", model="gpt-*").matches(span)
    assert not SpanFilter(span_name="chat *", service="shop", model="claude-*").matches(span)


def test_agent_filter_reads_the_agent_name() -> None:
    trace = Trace()
    span = trace.agent(name="support-bot")
    assert SpanFilter(agent="support-*").matches(span)
    assert not SpanFilter(agent="sales-*").matches(span)


def test_dict_form_equals_the_dataclass() -> None:
    data = {"span_name": "chat *", "service": "shop", "attributes": {"beta": True}}
    assert SpanFilter.from_dict(data) == SpanFilter(
        span_name="chat *", service="shop", attributes={"beta": True}
    )
    rule = Rule(BiasMetric(), filter=data)
    assert isinstance(rule.filter, SpanFilter)
    assert rule.matches_span(_llm_span(beta=True))
    assert not rule.matches_span(_llm_span(beta=False))
    with pytest.raises(ValueError, match=r"unknown filter key.*'services'"):
        SpanFilter.from_dict({"services": "shop"})


def test_callable_filter_and_a_raising_one() -> None:
    rule = Rule(BiasMetric(), filter=lambda span: span.attributes.get("tenant") == "acme")
    assert rule.matches_span(_llm_span(tenant="acme"))
    assert not rule.matches_span(_llm_span(tenant="other"))

    def broken(span: SpanRecord) -> bool:
        raise KeyError("boom")

    # one odd filter must not stop planning: it just does not match
    assert not Rule(BiasMetric(), filter=broken).matches_span(_llm_span())


def test_find_targets_applies_the_filter() -> None:
    trace = Trace()
    agent = trace.agent()
    trace.llm(parent=agent, model="gpt-4o-mini")
    big = trace.llm(parent=agent, model="gpt-4o")
    rule = Rule(BiasMetric(), target="llm", filter={"model": "gpt-4o"})
    assert [t.span_id for t in find_targets(rule, trace.spans)] == [big.span_id]


def test_trace_filter_is_applied_to_the_root_span() -> None:
    trace = Trace(service="shop")
    root = trace.agent(name="support")
    trace.llm(parent=root)
    assert find_targets(
        Rule(BiasMetric(), target="trace", filter={"agent": "support"}), trace.spans
    )
    assert not find_targets(
        Rule(BiasMetric(), target="trace", filter={"span_name": "chat *"}), trace.spans
    )


def test_conversation_filter_matches_any_turn() -> None:
    first, second = Trace(), Trace()
    first.agent(name="triage", conversation_id="c1")
    second.agent(name="billing", conversation_id="c1")
    spans = first.spans + second.spans
    target = conversation_target("c1", spans)
    assert target is not None
    assert Rule(
        TopicAdherenceMetric(relevant_topics=["orders"]),
        target="conversation",
        filter={"agent": "triage"},
    ).matches(target)
    assert Rule(
        TopicAdherenceMetric(relevant_topics=["orders"]),
        target="conversation",
        filter={"agent": "billing"},
    ).matches(target)
    assert not Rule(
        TopicAdherenceMetric(relevant_topics=["orders"]),
        target="conversation",
        filter={"agent": "sales"},
    ).matches(target)
    assert Rule(TopicAdherenceMetric(relevant_topics=["orders"]), target="conversation").matches(
        target
    )


# ------------------------------------------------------------------ one model (issue 36)
def test_the_file_and_python_share_every_option_declaration() -> None:
    from spanjudge.evaluators._plan.rules import RuleOptions
    from spanjudge.rule_settings import RuleConfig

    shared = set(RuleOptions.model_fields) - {"metric"}
    assert shared <= set(Rule.model_fields) and shared <= set(RuleConfig.model_fields)
    for name in shared:
        declared = RuleOptions.model_fields[name]
        for model in (Rule, RuleConfig):
            field = model.model_fields[name]
            assert (field.annotation, field.default, field.metadata) == (
                declared.annotation,
                declared.default,
                declared.metadata,
            ), (model.__name__, name)


@pytest.mark.parametrize(
    ("kwargs", "key"),
    [
        ({"sample_rate": 2}, "sample_rate"),
        ({"target_half_width": 0.5}, "target_half_width"),
        ({"max_per_minute": 1.5}, "max_per_minute"),
        ({"budget_per_day": -1}, "budget_per_day"),
        ({"segment_keys": [""]}, "segment_keys"),
    ],
)
def test_the_same_bad_value_fails_in_python_and_in_the_file(
    kwargs: dict[str, Any], key: str
) -> None:
    from spanjudge.errors import ConfigError
    from spanjudge.rule_settings import RuleConfig

    with pytest.raises(ConfigError, match=rf"^Rule\.{key}"):
        Rule(BiasMetric(), **kwargs)
    with pytest.raises(ValueError, match=key):
        RuleConfig.model_validate({"metric": "bias", **kwargs})


def test_metric_and_target_may_be_given_by_position_or_by_keyword() -> None:
    by_position = Rule(BiasMetric(), "agent", sample_rate=0.5)
    by_keyword = Rule(metric=BiasMetric(), target="agent", sample_rate=0.5)
    assert (
        (by_position.name, by_position.target)
        == (by_keyword.name, "agent")
        == (
            "bias-agent",
            "agent",
        )
    )
