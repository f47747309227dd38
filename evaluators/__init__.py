"""Test cases, judges, metrics, ``evaluate()`` and the online loop."""

from spanjudge.evaluators.deepeval_bridge import DeepEvalMetric, as_deepeval_model
from spanjudge.evaluators.evaluate import (
    EvaluationResult,
    MetricResult,
    MetricSummary,
    TestResult,
    a_evaluate,
    evaluate,
)
from spanjudge.evaluators.metrics import (
    BaseMetric,
    BiasMetric,
    BiasTemplate,
    ConversationalGEval,
    FaithfulnessMetric,
    FaithfulnessTemplate,
    GEval,
    MetricData,
    MetricError,
    MissingFieldError,
    TopicAdherenceMetric,
    TopicAdherenceTemplate,
)
from spanjudge.evaluators.online import MonitorConfig, Rule, SpanFilter
from spanjudge.evaluators.online.loop.monitor import Monitor, monitor
from spanjudge.evaluators.test_case import ConversationalTestCase, LLMTestCase, ToolCall, Turn

__all__ = [
    "BaseMetric",
    "BiasMetric",
    "BiasTemplate",
    "ConversationalGEval",
    "ConversationalTestCase",
    "DeepEvalMetric",
    "EvaluationResult",
    "FaithfulnessMetric",
    "FaithfulnessTemplate",
    "GEval",
    "LLMTestCase",
    "MetricData",
    "MetricError",
    "MetricResult",
    "MetricSummary",
    "MissingFieldError",
    "Monitor",
    "MonitorConfig",
    "Rule",
    "SpanFilter",
    "TestResult",
    "ToolCall",
    "TopicAdherenceMetric",
    "TopicAdherenceTemplate",
    "Turn",
    "a_evaluate",
    "as_deepeval_model",
    "evaluate",
    "monitor",
]
