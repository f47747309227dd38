"""Test cases, judges, metrics, ``evaluate()`` and the online loop."""

from spanjudge.evaluators.test_case import ConversationalTestCase, LLMTestCase, ToolCall, Turn

__all__ = ["ConversationalTestCase", "LLMTestCase", "ToolCall", "Turn"]
