"""spanjudge: LLM-as-a-judge scores for production traces, written back into the traces.

**The public API is what this module and :mod:`spanjudge.testing` export** (their ``__all__``).
Every other module (``spanjudge.tracer.*``, ``spanjudge.exporters.*``,
``spanjudge.evaluators.*``, ``spanjudge.worker.*``, ``spanjudge.cli.*``, ``spanjudge.settings``
...) is internal: it may be renamed or moved in any release, without a deprecation period.
The one exception is the exception tree, also importable as :mod:`spanjudge.errors`.

``import spanjudge`` stays light: the tracer and the exceptions are imported eagerly (they only
need OpenTelemetry and the standard library); evaluation, stores and judges load on first use
of their names. Type checkers see every name with its real type (the ``TYPE_CHECKING`` block
below; the package ships ``py.typed``).

Example::

    import spanjudge

    store = spanjudge.open_store("sqlite:///spanjudge.db")
    processor = spanjudge.store_span_processor(store)
    spanjudge.configure(service_name="support-bot", span_processors=[processor])
    rule = spanjudge.Rule(spanjudge.FaithfulnessMetric(model="gpt-4o-mini"), target="llm")
    spanjudge.monitor([rule], store=store)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

# --- tracer (eager: OpenTelemetry API + stdlib only) ----------------------------------------
# configure() imports the SDK and the OTLP exporter inside its body, so this stays light.
from spanjudge.configure import Tracing, configure

# --- errors (eager: stdlib only, so `except spanjudge.StoreError` loads nothing else) --------
from spanjudge.errors import (
    ConfigError,
    ConfigTypeError,
    FeedbackError,
    JudgeConnectionError,
    JudgeError,
    JudgeRateLimitError,
    JudgeResponseError,
    JudgeServerError,
    JudgeTimeoutError,
    MetricError,
    MissingFieldError,
    ParamError,
    SpanjudgeError,
    StoreError,
)
from spanjudge.tracer import SpanHandle, conversation, current_span, observe
from spanjudge.tracer._version import __version__

# What a type checker sees for the lazy names below: the same objects, imported for real.
# Keep this block and _LAZY in step (tests/test_public_api.py checks that they are).
if TYPE_CHECKING:
    from spanjudge._core.span_record import EvaluationRecord, FeedbackRecord, SpanEvent, SpanRecord
    from spanjudge._core.telemetry import Telemetry
    from spanjudge._store import open_store
    from spanjudge._store.base import SpanLog
    from spanjudge._store.sql import SpanStore
    from spanjudge.evaluators._judge.dataset import load_dataset
    from spanjudge.evaluators._judge.deepeval_bridge.metric import DeepEvalMetric
    from spanjudge.evaluators._judge.deepeval_bridge.model import as_deepeval_model
    from spanjudge.evaluators._judge.evaluate import (
        EvaluationResult,
        MetricResult,
        MetricSummary,
        TestResult,
        a_evaluate,
        evaluate,
    )
    from spanjudge.evaluators._judge.judges.litellm_judge import LiteLLMJudge
    from spanjudge.evaluators._judge.metrics.argument_correctness import ArgumentCorrectnessMetric
    from spanjudge.evaluators._judge.metrics.base import BaseMetric
    from spanjudge.evaluators._judge.metrics.bias import BiasMetric, BiasTemplate
    from spanjudge.evaluators._judge.metrics.faithfulness import (
        FaithfulnessMetric,
        FaithfulnessTemplate,
    )
    from spanjudge.evaluators._judge.metrics.geval import ConversationalGEval, GEval
    from spanjudge.evaluators._judge.metrics.goal_accuracy import (
        GoalAccuracyMetric,
        GoalAccuracyTemplate,
    )
    from spanjudge.evaluators._judge.metrics.plan_metrics import (
        PlanAdherenceMetric,
        PlanQualityMetric,
    )
    from spanjudge.evaluators._judge.metrics.schemas import MetricData
    from spanjudge.evaluators._judge.metrics.step_efficiency import StepEfficiencyMetric
    from spanjudge.evaluators._judge.metrics.task_completion import (
        TaskCompletionMetric,
        TaskCompletionTemplate,
    )
    from spanjudge.evaluators._judge.metrics.tool_correctness import (
        ToolCorrectnessMetric,
        ToolCorrectnessTemplate,
    )
    from spanjudge.evaluators._judge.metrics.topic_adherence import (
        TopicAdherenceMetric,
        TopicAdherenceTemplate,
    )
    from spanjudge.evaluators._judge.metrics.trajectory_checks import (
        RepeatedCallCheck,
        StepLimitCheck,
        ToolErrorCheck,
    )
    from spanjudge.evaluators._judge.test_case import (
        ConversationalTestCase,
        LLMTestCase,
        ToolCall,
        Turn,
    )
    from spanjudge.evaluators._loop.config import MonitorConfig, RegressionBaseline
    from spanjudge.evaluators._loop.monitor import Monitor, monitor
    from spanjudge.evaluators._plan.planner import TickReport
    from spanjudge.evaluators._plan.rules import Rule, SpanFilter
    from spanjudge.evaluators._plan.trajectory_filter import TrajectoryFilter
    from spanjudge.evaluators._rebuild.dialects import read_span
    from spanjudge.evaluators._rebuild.dialects.declared import FieldSource, Reader, ReaderMatch
    from spanjudge.evaluators._rebuild.dialects.view import Document, GenAIView, ToolCallView
    from spanjudge.evaluators._rebuild.trajectory import (
        Step,
        ToolDefinition,
        ToolRequest,
        Trajectory,
    )
    from spanjudge.exporters._emit.emitter import Emitter
    from spanjudge.exporters._store_spans import store_span_processor
    from spanjudge.human_feedback import feedback

__all__ = [
    "ArgumentCorrectnessMetric",
    "BaseMetric",
    "BiasMetric",
    "BiasTemplate",
    "ConfigError",
    "ConfigTypeError",
    "ConversationalGEval",
    "ConversationalTestCase",
    "DeepEvalMetric",
    "Document",
    "Emitter",
    "EvaluationRecord",
    "EvaluationResult",
    "FaithfulnessMetric",
    "FaithfulnessTemplate",
    "FeedbackError",
    "FeedbackRecord",
    "FieldSource",
    "GEval",
    "GenAIView",
    "GoalAccuracyMetric",
    "GoalAccuracyTemplate",
    "JudgeConnectionError",
    "JudgeError",
    "JudgeRateLimitError",
    "JudgeResponseError",
    "JudgeServerError",
    "JudgeTimeoutError",
    "LLMTestCase",
    "LiteLLMJudge",
    "MetricData",
    "MetricError",
    "MetricResult",
    "MetricSummary",
    "MissingFieldError",
    "Monitor",
    "MonitorConfig",
    "ParamError",
    "PlanAdherenceMetric",
    "PlanQualityMetric",
    "Reader",
    "ReaderMatch",
    "RegressionBaseline",
    "RepeatedCallCheck",
    "Rule",
    "SpanEvent",
    "SpanFilter",
    "SpanHandle",
    "SpanLog",
    "SpanRecord",
    "SpanStore",
    "SpanjudgeError",
    "Step",
    "StepEfficiencyMetric",
    "StepLimitCheck",
    "StoreError",
    "TaskCompletionMetric",
    "TaskCompletionTemplate",
    "Telemetry",
    "TestResult",
    "TickReport",
    "ToolCall",
    "ToolCallView",
    "ToolCorrectnessMetric",
    "ToolCorrectnessTemplate",
    "ToolDefinition",
    "ToolErrorCheck",
    "ToolRequest",
    "TopicAdherenceMetric",
    "TopicAdherenceTemplate",
    "Tracing",
    "Trajectory",
    "TrajectoryFilter",
    "Turn",
    "__version__",
    "a_evaluate",
    "as_deepeval_model",
    "configure",
    "conversation",
    "current_span",
    "evaluate",
    "feedback",
    "load_dataset",
    "monitor",
    "observe",
    "open_store",
    "read_span",
    "store_span_processor",
]

# name -> module that defines it; loaded on first attribute access (PEP 562) so that the
# tracer's import path never pulls in pydantic models, SQLite, litellm or APScheduler.
_LAZY: dict[str, str] = {
    # types public functions take and return
    "SpanEvent": "spanjudge._core.span_record",
    "Document": "spanjudge.evaluators._rebuild.dialects.view",
    "ToolCallView": "spanjudge.evaluators._rebuild.dialects.view",
    "EvaluationRecord": "spanjudge._core.span_record",
    "FeedbackRecord": "spanjudge._core.span_record",
    "SpanRecord": "spanjudge._core.span_record",
    "Telemetry": "spanjudge._core.telemetry",
    "SpanLog": "spanjudge._store.base",
    "SpanStore": "spanjudge._store.sql",
    "MetricSummary": "spanjudge.evaluators._judge.evaluate",
    "TestResult": "spanjudge.evaluators._judge.evaluate",
    "MetricResult": "spanjudge.evaluators._judge.evaluate",
    "BiasTemplate": "spanjudge.evaluators._judge.metrics.bias",
    "FaithfulnessTemplate": "spanjudge.evaluators._judge.metrics.faithfulness",
    "GoalAccuracyTemplate": "spanjudge.evaluators._judge.metrics.goal_accuracy",
    "MetricData": "spanjudge.evaluators._judge.metrics.schemas",
    "TaskCompletionTemplate": "spanjudge.evaluators._judge.metrics.task_completion",
    "ToolCorrectnessTemplate": "spanjudge.evaluators._judge.metrics.tool_correctness",
    "TopicAdherenceTemplate": "spanjudge.evaluators._judge.metrics.topic_adherence",
    "RegressionBaseline": "spanjudge.evaluators._loop.config",
    "TickReport": "spanjudge.evaluators._plan.planner",
    "GenAIView": "spanjudge.evaluators._rebuild.dialects.view",
    "ToolDefinition": "spanjudge.evaluators._rebuild.trajectory",
    "ToolRequest": "spanjudge.evaluators._rebuild.trajectory",
    "Emitter": "spanjudge.exporters._emit.emitter",
    "DeepEvalMetric": "spanjudge.evaluators._judge.deepeval_bridge.metric",
    # evaluation (pydantic, judges: loaded on first use)
    "LLMTestCase": "spanjudge.evaluators._judge.test_case",
    "ConversationalTestCase": "spanjudge.evaluators._judge.test_case",
    "Turn": "spanjudge.evaluators._judge.test_case",
    "ToolCall": "spanjudge.evaluators._judge.test_case",
    "BaseMetric": "spanjudge.evaluators._judge.metrics.base",
    "FaithfulnessMetric": "spanjudge.evaluators._judge.metrics.faithfulness",
    "BiasMetric": "spanjudge.evaluators._judge.metrics.bias",
    "TopicAdherenceMetric": "spanjudge.evaluators._judge.metrics.topic_adherence",
    "GEval": "spanjudge.evaluators._judge.metrics.geval",
    "ConversationalGEval": "spanjudge.evaluators._judge.metrics.geval",
    "ToolErrorCheck": "spanjudge.evaluators._judge.metrics.trajectory_checks",
    "RepeatedCallCheck": "spanjudge.evaluators._judge.metrics.trajectory_checks",
    "StepLimitCheck": "spanjudge.evaluators._judge.metrics.trajectory_checks",
    "ArgumentCorrectnessMetric": "spanjudge.evaluators._judge.metrics.argument_correctness",
    "GoalAccuracyMetric": "spanjudge.evaluators._judge.metrics.goal_accuracy",
    "PlanAdherenceMetric": "spanjudge.evaluators._judge.metrics.plan_metrics",
    "PlanQualityMetric": "spanjudge.evaluators._judge.metrics.plan_metrics",
    "StepEfficiencyMetric": "spanjudge.evaluators._judge.metrics.step_efficiency",
    "TaskCompletionMetric": "spanjudge.evaluators._judge.metrics.task_completion",
    "ToolCorrectnessMetric": "spanjudge.evaluators._judge.metrics.tool_correctness",
    "LiteLLMJudge": "spanjudge.evaluators._judge.judges.litellm_judge",
    "evaluate": "spanjudge.evaluators._judge.evaluate",
    "a_evaluate": "spanjudge.evaluators._judge.evaluate",
    "EvaluationResult": "spanjudge.evaluators._judge.evaluate",
    "load_dataset": "spanjudge.evaluators._judge.dataset",
    "as_deepeval_model": "spanjudge.evaluators._judge.deepeval_bridge.model",
    # online evaluation
    "Rule": "spanjudge.evaluators._plan.rules",
    "SpanFilter": "spanjudge.evaluators._plan.rules",
    "MonitorConfig": "spanjudge.evaluators._loop.config",
    "Monitor": "spanjudge.evaluators._loop.monitor",
    "monitor": "spanjudge.evaluators._loop.monitor",
    "read_span": "spanjudge.evaluators._rebuild.dialects",
    "Reader": "spanjudge.evaluators._rebuild.dialects.declared",
    "ReaderMatch": "spanjudge.evaluators._rebuild.dialects.declared",
    "FieldSource": "spanjudge.evaluators._rebuild.dialects.declared",
    "TrajectoryFilter": "spanjudge.evaluators._plan.trajectory_filter",
    "Trajectory": "spanjudge.evaluators._rebuild.trajectory",
    "Step": "spanjudge.evaluators._rebuild.trajectory",
    # stores
    "open_store": "spanjudge._store",
    "store_span_processor": "spanjudge.exporters._store_spans",
    # human labels beside the judge's (a module named apart: a submodule called ``feedback``
    # would shadow the function on the package once imported)
    "feedback": "spanjudge.human_feedback",
}


# Hidden from type checkers: a module-level __getattr__ would make every misspelt name
# (`spanjudge.Rul`) an `Any` for them instead of an error.
if not TYPE_CHECKING:

    def __getattr__(name: str) -> Any:
        module = _LAZY.get(name)
        if module is None:
            raise AttributeError(f"module 'spanjudge' has no attribute {name!r}")
        import importlib

        value = getattr(importlib.import_module(module), name)
        globals()[name] = value
        return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
