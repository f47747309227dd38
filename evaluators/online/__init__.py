"""Online evaluation: rules, deterministic sampling, budgets, the reading of spans from any
instrumentation (:func:`read_span`), targets and case rebuild.

Example::

    from spanjudge.evaluators.online import Rule, SpanFilter, find_targets, build_case

    rule = Rule(FaithfulnessMetric(), target="llm", sample_rate=0.2,
                filter=SpanFilter(service="shop"))
    for target in find_targets(rule, trace_spans):
        case = build_case(rule, target, trace_spans)  # a test case, or a Skip with a reason
"""

from spanjudge.evaluators.online.loop.config import MonitorConfig
from spanjudge.evaluators.online.planning.rules import Rule, SpanFilter
from spanjudge.evaluators.online.planning.sampler import Budget, is_sampled, sample_point
from spanjudge.evaluators.online.rebuild.cases import (
    MAX_FIELD_CHARS,
    MAX_RAW_CHARS,
    build_case,
    default_case,
)
from spanjudge.evaluators.online.rebuild.dialects import GenAIView, read_span
from spanjudge.evaluators.online.rebuild.targets import (
    TARGET_TYPES,
    Skip,
    Target,
    conversation_target,
    find_targets,
    span_kind,
)

__all__ = [
    "MAX_FIELD_CHARS",
    "MAX_RAW_CHARS",
    "TARGET_TYPES",
    "Budget",
    "GenAIView",
    "MonitorConfig",
    "Rule",
    "Skip",
    "SpanFilter",
    "Target",
    "build_case",
    "conversation_target",
    "default_case",
    "find_targets",
    "is_sampled",
    "read_span",
    "sample_point",
    "span_kind",
]
