"""spanjudge: LLM-as-a-judge scores for production traces, written back into the traces.

``import spanjudge`` stays light: the tracer is imported eagerly (it only needs OpenTelemetry);
evaluation, stores and judges load on first use of their names.
"""

from __future__ import annotations

from typing import Any

from spanjudge._version import __version__

# --- tracer (eager: OpenTelemetry API + stdlib only) ----------------------------------------
# configure() imports the SDK and the OTLP exporter inside its body, so this stays light.
from spanjudge.configure import Tracing, configure
from spanjudge.tracer import SpanHandle, conversation, current_span, observe

__all__ = [
    "SpanHandle",
    "Tracing",
    "__version__",
    "configure",
    "conversation",
    "current_span",
    "observe",
]
# --- end tracer ---------------------------------------------------------------------------


# name -> module that defines it; loaded on first attribute access (PEP 562) so that the
# tracer's import path never pulls in pydantic models, SQLite, litellm or APScheduler.
_LAZY: dict[str, str] = {
    # evaluation (pydantic, judges: loaded on first use)
    "LLMTestCase": "spanjudge.evaluators.test_case",
    "ConversationalTestCase": "spanjudge.evaluators.test_case",
    "Turn": "spanjudge.evaluators.test_case",
    "ToolCall": "spanjudge.evaluators.test_case",
    "FaithfulnessMetric": "spanjudge.evaluators.metrics",
    "BiasMetric": "spanjudge.evaluators.metrics",
    "TopicAdherenceMetric": "spanjudge.evaluators.metrics",
    "LiteLLMJudge": "spanjudge.evaluators.judges",
    "evaluate": "spanjudge.evaluators.evaluate",
    # online evaluation
    "Rule": "spanjudge.evaluators.online.planning.rules",
    "MonitorConfig": "spanjudge.evaluators.online.loop.config",
    "read_span": "spanjudge.evaluators.online.rebuild.dialects",
    "SpanFilter": "spanjudge.evaluators.online.planning.rules",
    "Monitor": "spanjudge.evaluators.online.loop.monitor",
    "monitor": "spanjudge.evaluators.online.loop.monitor",
    "open_store": "spanjudge.exporters.store",
    # human labels beside the judge's (a module named apart: a submodule called ``feedback``
    # would shadow the function on the package once imported)
    "feedback": "spanjudge.human_feedback",
}


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
