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

from spanjudge._version import __version__

# --- tracer (eager: OpenTelemetry API + stdlib only) ----------------------------------------
# configure() imports the SDK and the OTLP exporter inside its body, so this stays light.
from spanjudge.configure import Tracing, configure

# --- errors (eager: stdlib only, so `except spanjudge.StoreError` loads nothing else) --------
from spanjudge.errors import (
    ConfigError,
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

# What a type checker sees for the lazy names below: the same objects, imported for real.
# Keep this block and _LAZY in step (tests/test_public_api.py checks that they are).
if TYPE_CHECKING:
    from spanjudge.evaluators.dataset import load_dataset
    from spanjudge.evaluators.deepeval_bridge import as_deepeval_model
    from spanjudge.evaluators.evaluate import EvaluationResult, a_evaluate, evaluate
    from spanjudge.evaluators.judges import LiteLLMJudge
    from spanjudge.evaluators.metrics import (
        ArgumentCorrectnessMetric,
        BaseMetric,
        BiasMetric,
        ConversationalGEval,
        FaithfulnessMetric,
        GEval,
        GoalAccuracyMetric,
        PlanAdherenceMetric,
        PlanQualityMetric,
        RepeatedCallCheck,
        StepEfficiencyMetric,
        StepLimitCheck,
        TaskCompletionMetric,
        ToolCorrectnessMetric,
        ToolErrorCheck,
        TopicAdherenceMetric,
    )
    from spanjudge.evaluators.online.loop.config import MonitorConfig
    from spanjudge.evaluators.online.loop.monitor import Monitor, monitor
    from spanjudge.evaluators.online.planning.rules import Rule, SpanFilter
    from spanjudge.evaluators.online.planning.trajectory_filter import TrajectoryFilter
    from spanjudge.evaluators.online.rebuild.dialects import read_span
    from spanjudge.evaluators.online.rebuild.trajectory import Step, Trajectory
    from spanjudge.evaluators.test_case import ConversationalTestCase, LLMTestCase, ToolCall, Turn
    from spanjudge.exporters.store import open_store
    from spanjudge.exporters.store.span_exporter import store_span_processor
    from spanjudge.human_feedback import feedback

__all__ = [
    "ArgumentCorrectnessMetric",
    "BaseMetric",
    "BiasMetric",
    "ConfigError",
    "ConversationalGEval",
    "ConversationalTestCase",
    "EvaluationResult",
    "FaithfulnessMetric",
    "FeedbackError",
    "GEval",
    "GoalAccuracyMetric",
    "JudgeConnectionError",
    "JudgeError",
    "JudgeRateLimitError",
    "JudgeResponseError",
    "JudgeServerError",
    "JudgeTimeoutError",
    "LLMTestCase",
    "LiteLLMJudge",
    "MetricError",
    "MissingFieldError",
    "Monitor",
    "MonitorConfig",
    "ParamError",
    "PlanAdherenceMetric",
    "PlanQualityMetric",
    "RepeatedCallCheck",
    "Rule",
    "SpanFilter",
    "SpanHandle",
    "SpanjudgeError",
    "Step",
    "StepEfficiencyMetric",
    "StepLimitCheck",
    "StoreError",
    "TaskCompletionMetric",
    "ToolCall",
    "ToolCorrectnessMetric",
    "ToolErrorCheck",
    "TopicAdherenceMetric",
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
    # evaluation (pydantic, judges: loaded on first use)
    "LLMTestCase": "spanjudge.evaluators.test_case",
    "ConversationalTestCase": "spanjudge.evaluators.test_case",
    "Turn": "spanjudge.evaluators.test_case",
    "ToolCall": "spanjudge.evaluators.test_case",
    "BaseMetric": "spanjudge.evaluators.metrics",
    "FaithfulnessMetric": "spanjudge.evaluators.metrics",
    "BiasMetric": "spanjudge.evaluators.metrics",
    "TopicAdherenceMetric": "spanjudge.evaluators.metrics",
    "GEval": "spanjudge.evaluators.metrics",
    "ConversationalGEval": "spanjudge.evaluators.metrics",
    "ToolErrorCheck": "spanjudge.evaluators.metrics",
    "RepeatedCallCheck": "spanjudge.evaluators.metrics",
    "StepLimitCheck": "spanjudge.evaluators.metrics",
    "ArgumentCorrectnessMetric": "spanjudge.evaluators.metrics",
    "GoalAccuracyMetric": "spanjudge.evaluators.metrics",
    "PlanAdherenceMetric": "spanjudge.evaluators.metrics",
    "PlanQualityMetric": "spanjudge.evaluators.metrics",
    "StepEfficiencyMetric": "spanjudge.evaluators.metrics",
    "TaskCompletionMetric": "spanjudge.evaluators.metrics",
    "ToolCorrectnessMetric": "spanjudge.evaluators.metrics",
    "LiteLLMJudge": "spanjudge.evaluators.judges",
    "evaluate": "spanjudge.evaluators.evaluate",
    "a_evaluate": "spanjudge.evaluators.evaluate",
    "EvaluationResult": "spanjudge.evaluators.evaluate",
    "load_dataset": "spanjudge.evaluators.dataset",
    "as_deepeval_model": "spanjudge.evaluators.deepeval_bridge",
    # online evaluation
    "Rule": "spanjudge.evaluators.online.planning.rules",
    "SpanFilter": "spanjudge.evaluators.online.planning.rules",
    "MonitorConfig": "spanjudge.evaluators.online.loop.config",
    "Monitor": "spanjudge.evaluators.online.loop.monitor",
    "monitor": "spanjudge.evaluators.online.loop.monitor",
    "read_span": "spanjudge.evaluators.online.rebuild.dialects",
    "TrajectoryFilter": "spanjudge.evaluators.online.planning.trajectory_filter",
    "Trajectory": "spanjudge.evaluators.online.rebuild.trajectory",
    "Step": "spanjudge.evaluators.online.rebuild.trajectory",
    # stores
    "open_store": "spanjudge.exporters.store",
    "store_span_processor": "spanjudge.exporters.store.span_exporter",
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
