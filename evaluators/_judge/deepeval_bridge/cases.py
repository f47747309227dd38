"""Our test cases as deepeval's: ``LLMTestCase`` / ``ConversationalTestCase``, tool calls as
deepeval ``ToolCall`` objects. deepeval is imported inside the functions.

Example::

    deepeval_case = to_deepeval_case(LLMTestCase(input="Hi?", actual_output="Hello."))
"""

from __future__ import annotations

from typing import Any

from spanjudge.evaluators._judge.test_case import ConversationalTestCase, LLMTestCase, ToolCall


def _tool(call: ToolCall) -> Any:
    from deepeval.test_case import ToolCall as DeepEvalToolCall

    return DeepEvalToolCall(
        name=call.name,
        input_parameters=call.input_parameters,
        output=call.output,
        description=call.description,
        reasoning=call.reasoning,
    )


def _tools(calls: list[ToolCall] | None) -> list[Any] | None:
    return None if calls is None else [_tool(c) for c in calls]


def _texts(values: list[str] | None) -> list[Any] | None:
    return None if values is None else list(values)


def to_deepeval_case(case: LLMTestCase | ConversationalTestCase) -> Any:
    """Our (rebuilt) test case as deepeval's ``LLMTestCase`` / ``ConversationalTestCase``."""
    from deepeval import test_case as de

    if isinstance(case, ConversationalTestCase):
        turns = [
            de.Turn(
                role=t.role,
                content=t.content,
                retrieval_context=_texts(t.retrieval_context),
                tools_called=_tools(t.tools_called),
                metadata=t.metadata,
            )
            for t in case.turns
        ]
        return de.ConversationalTestCase(
            turns=turns,
            scenario=case.scenario,
            chatbot_role=case.chatbot_role,
            name=case.name,
            metadata=case.metadata,
        )
    return de.LLMTestCase(
        input=case.input,
        actual_output=case.actual_output,
        expected_output=case.expected_output,
        context=case.context,
        retrieval_context=_texts(case.retrieval_context),
        tools_called=_tools(case.tools_called),
        expected_tools=_tools(case.expected_tools),
        metadata=case.metadata,
        name=case.name,
    )
