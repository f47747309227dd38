"""Tool Correctness: were the agent's tool calls the right ones?

Two modes, as deepeval documents the metric:

* **referenceless** (no ``expected_tools`` on the case; runs online): one judge call gives each
  tool call a verdict: was it the right choice, among the tools available (``available_tools=``,
  else the ones the trajectory recorded as offered), for the task at that point? Score = right
  calls / calls judged. No tool call at all scores 1 with no judge call (nothing was chosen
  wrongly; deepeval's score with nothing expected and nothing called).
* **with expected tools** (``case.expected_tools``): deepeval's deterministic formula (see
  :mod:`.tool_matching`), no judge call; with ``available_tools=`` also the judged selection
  above, and the score is the lower of the two, as deepeval takes the minimum.

::

    metric = ToolCorrectnessMetric()
    metric.measure(case)          # case.trajectory: each tool call judged
    metric.verdicts               # [ToolSelectionVerdict(step=1, verdict="yes", ...), ...]
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from spanjudge.errors import ConfigError
from spanjudge.evaluators._judge.metrics.agent_metric import AgentMetric
from spanjudge.evaluators._judge.metrics.agent_schemas import (
    ToolSelectionVerdict,
    ToolSelectionVerdicts,
)
from spanjudge.evaluators._judge.metrics.agent_text import (
    AgentView,
    judged_calls,
    step_label,
)
from spanjudge.evaluators._judge.metrics.tool_matching import (
    describe_expected,
    score_expected,
)
from spanjudge.evaluators._judge.metrics.tool_matching import (
    evaluation_params as checked_params,
)
from spanjudge.evaluators._judge.quoting import quote
from spanjudge.evaluators._judge.test_case import LLMTestCase, ToolCall

__all__ = ["ToolCorrectnessMetric", "ToolCorrectnessTemplate"]


class ToolCorrectnessTemplate:
    """Prompt of :class:`ToolCorrectnessMetric`; subclass and pass as ``evaluation_template``."""

    @staticmethod
    def generate_verdicts(task: str, tools: str, steps: str, calls: str, count: int) -> str:
        return f"""You judge an AI agent's choice of tools.

For each tool call listed under "Tool calls to judge", decide whether calling THAT tool was the
right choice at that point of the work, given the task, the tools that were available and what
the agent knew from the earlier steps:
- "yes": the tool serves the task there and no available tool would clearly have served better;
- "no": the tool was not needed, does not serve the task, repeats a call whose result the agent
  already had, or another available tool was clearly the right one (name it in the reason).
Judge the choice of tool only, not its arguments and not whether the tool then failed.

Answer with JSON only: {{"verdicts": [{{"step": N, "verdict": "yes" | "no", "reason": "..."}}],
"reason": "..."}} with exactly one verdict per listed call, in the listed order ({count} in
total), "step" copied from the call. The top-level "reason" sums the verdicts up in one or two
sentences, naming the steps of the wrong choices.
Example:
{{"verdicts": [{{"step": 1, "verdict": "yes", "reason": "lookup_order finds the order to cancel."}},
{{"step": 2, "verdict": "no", "reason": "refund_order was called, but the task asked to cancel:
cancel_order was available."}}], "reason": "Step 2 refunded instead of cancelling."}}

{quote("Task", task)}

{quote("Tools available", tools)}

{quote("What the agent did", steps)}

Tool calls to judge ({count}):
{quote("Tool calls to judge", calls)}

JSON:"""


class ToolCorrectnessMetric(AgentMetric):
    """Share of tool calls that were the right choice (referenceless), or deepeval's match
    against ``case.expected_tools``; higher is better.

    Example::

        ToolCorrectnessMetric(available_tools=[ToolCall(name="search"), ToolCall(name="calc")])
    """

    name = "tool_correctness"
    display_name = "Tool Correctness"
    default_template = ToolCorrectnessTemplate

    def __init__(
        self,
        available_tools: list[ToolCall] | None = None,
        threshold: float = 0.5,
        evaluation_params: Sequence[Any] = (),
        model: Any = None,
        include_reason: bool = True,
        strict_mode: bool = False,
        async_mode: bool = True,
        verbose_mode: bool = False,
        should_exact_match: bool = False,
        should_consider_ordering: bool = False,
        evaluation_template: type[ToolCorrectnessTemplate] = ToolCorrectnessTemplate,
    ) -> None:
        self.available_tools = [_tool(t, "available_tools") for t in available_tools or []]
        self.evaluation_params = checked_params(evaluation_params)
        self.should_exact_match = bool(should_exact_match)
        self.should_consider_ordering = bool(should_consider_ordering)
        super().__init__(
            threshold,
            model,
            include_reason,
            strict_mode,
            async_mode,
            verbose_mode,
            evaluation_template,
        )

    def _config(self) -> dict[str, Any]:
        return {
            **super()._config(),
            "available_tools": self.available_tools or None,
            "evaluation_params": list(self.evaluation_params),
            "should_exact_match": self.should_exact_match,
            "should_consider_ordering": self.should_consider_ordering,
        }

    def _reset_intermediate(self) -> None:
        super()._reset_intermediate()
        self.verdicts: list[ToolSelectionVerdict] = []
        self.judged: list[Any] = []
        self.expected_score: float | None = None
        self.selection_score: float | None = None

    def _verdict_dicts(self) -> list[dict[str, Any]]:
        out = [
            {"tool": call.name, "step_label": step_label(call), **verdict.model_dump()}
            for call, verdict in zip(self.judged, self.verdicts, strict=False)
        ]
        if self.expected_score is not None:
            out.append({"expected_tools_score": self.expected_score})
        return out

    async def _a_compute(self, test_case: LLMTestCase) -> float:
        view = self._view(test_case)
        expected = test_case.expected_tools
        if expected is None:
            score, reason, labels = await self._a_selection(view, self._offered(view))
            self._explain_labels(score, reason, labels)
            return score
        called = _called(test_case, view)
        self.expected_score = score_expected(
            called,
            expected,
            self.evaluation_params,
            exact=self.should_exact_match,
            ordered=self.should_consider_ordering,
        )
        what = describe_expected(
            called, expected, self.expected_score, self.should_consider_ordering
        )
        if not self.available_tools:  # deepeval judges the selection only when given the tools
            self._explain_labels(self.expected_score, "", [], what)
            return self.expected_score
        selection, reason, labels = await self._a_selection(view, self.available_tools)
        score = min(self.expected_score, selection)
        self._explain_labels(score, reason, labels, what)
        return score

    async def _a_selection(
        self, view: AgentView, offered: Sequence[Any]
    ) -> tuple[float, str, list[str]]:
        shown = AgentView(view.task, view.final_output, view.steps, offered, view.steps_dropped)
        judged = await self._a_call_verdicts(
            view, ToolSelectionVerdicts, shown, "were the right choice"
        )
        if judged is None:
            self.selection_score = 1.0
            return 1.0, "No tool was called, so no tool choice was wrong.", []
        score, head, reason, labels = judged
        self.selection_score = score
        return score, f"{head}. {reason}".strip(), labels

    def _offered(self, view: AgentView) -> list[Any]:
        return list(self.available_tools) or list(view.tools_available)


def _tool(value: Any, key: str) -> ToolCall:
    if isinstance(value, ToolCall):
        return value
    if isinstance(value, str) and value.strip():
        return ToolCall(name=value.strip())
    if isinstance(value, dict):
        try:
            return ToolCall(**value)
        except Exception as exc:
            raise ConfigError(f"{key}: {value!r} is not a tool: {exc}") from None
    name = getattr(value, "name", None)  # a deepeval ToolCall
    if isinstance(name, str) and name.strip():
        return ToolCall(name=name, description=getattr(value, "description", None))
    raise ConfigError(f"{key}: expected ToolCall objects, names or tables, got {value!r}")


def _called(case: LLMTestCase, view: AgentView) -> list[ToolCall]:
    if case.trajectory is None:
        return list(case.tools_called or [])
    calls, _ = judged_calls(view)
    return [
        ToolCall(
            name=c.name,
            input_parameters=c.arguments if isinstance(c.arguments, dict) else None,
            output=_plain(c.result),
        )
        for c in view.tool_calls or calls
    ]


def _plain(value: Any) -> Any:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return str(value)
    return value
