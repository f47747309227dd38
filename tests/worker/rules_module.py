"""Entry points the config tests name as ``tests.worker.rules_module:...``."""

from __future__ import annotations

from typing import Any

from spanjudge.evaluators._judge.test_case import LLMTestCase

# a litellm model string never called: these rules are only built, not run
NO_JUDGE = "openai/never-called"


def custom_case(span: Any) -> LLMTestCase:
    """A custom build_case: the whole span name as input, a fixed output."""
    return LLMTestCase(input=str(getattr(span, "name", span)), actual_output="fixed")


def make_rules() -> list[Any]:
    from spanjudge.evaluators._judge.metrics.bias import BiasMetric
    from spanjudge.evaluators._plan.rules import Rule

    return [Rule(BiasMetric(model=NO_JUDGE), target="llm", name="custom", build_case=custom_case)]


def broken() -> list[Any]:
    raise RuntimeError("cannot build rules")
