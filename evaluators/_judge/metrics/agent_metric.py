"""What the judged agent metrics share on top of the metric engine: the constructor every one
takes (deepeval's parameters and defaults), which targets they run on, when a case is missing a
field, and how a reason names the steps that cost points.

A subclass sets ``name``, ``display_name`` and ``default_template``, implements ``_a_compute``
and calls :meth:`AgentMetric._explain` with the judge's reason and the steps it blamed::

    class MyAgentMetric(AgentMetric):
        name = "my_agent_metric"
        ...
        async def _a_compute(self, test_case):
            view = self._view(test_case)
            answer = await self._ask("Verdict", prompt, SomeVerdict)
            self._explain(answer.score, answer.reason, view, answer.steps)
            return answer.score
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, ClassVar

from pydantic import BaseModel

from spanjudge.evaluators._judge.metrics.agent_text import (
    AgentView,
    agent_view,
    judged_calls,
    render_calls,
    render_steps,
    render_task,
    render_tools,
    step_label,
)
from spanjudge.evaluators._judge.metrics.base import BaseMetric
from spanjudge.evaluators._judge.metrics.schemas import expect_count
from spanjudge.evaluators._judge.test_case import LLMTestCase

__all__ = ["AGENT_TARGETS", "AgentMetric", "name_steps"]

AGENT_TARGETS: tuple[str, ...] = ("agent", "trace")
"""The rule targets a trace-level agent metric runs on (an agent turn, a whole trace)."""
_NAMED_STEPS = 8  # steps a reason names; the verdicts keep every one


def name_steps(view: AgentView, indices: Iterable[int]) -> list[str]:
    """Labels (``step 3 (tool_call lookup_order)``) of the steps at ``indices``, in order, each
    once; an index no step has (a judge's slip) is left out."""
    wanted = list(dict.fromkeys(i for i in indices if isinstance(i, int)))
    if not wanted:
        return []
    keep = set(wanted)
    by_index = {s.index: s for s in view.steps if s.index in keep}
    return [step_label(by_index[i]) for i in wanted if i in by_index]


def joined(labels: Sequence[str]) -> str:
    shown = ", ".join(labels[:_NAMED_STEPS])
    more = len(labels) - _NAMED_STEPS
    return shown + (f" and {more} more" if more > 0 else "")


class AgentMetric(BaseMetric):
    """Base of the judged metrics that read an agent's trajectory (``case.trajectory``, or a
    hand-written case's ``input``/``actual_output``/``tools_called``).

    Required: a task (``task=``, the trajectory's task or the case's ``input``: missing, it is
    ``input``, whose online skip reason names the capture setting) and something the agent did
    (steps or a final output: missing, it is ``trajectory``).
    """

    required_fields: ClassVar[tuple[str, ...]] = ("input", "trajectory")
    targets: ClassVar[tuple[str, ...]] = AGENT_TARGETS
    """Rule targets this metric may run on; a settings rule with another target is an error."""
    reads_trajectory: ClassVar[bool] = True
    """The judge-result cache keys these metrics by the trajectory too."""

    # ------------------------------------------------------------------ fields
    def _task(self) -> str | None:
        """A task given to the metric (only Task Completion takes one)."""
        return None

    def missing_fields(self, test_case: Any) -> list[str]:
        if not isinstance(test_case, LLMTestCase):
            return list(self.required_fields)
        view = agent_view(test_case)
        missing = []
        if not (self._task() or view.task):
            missing.append("input")
        if not view.steps and not view.final_output and not view.steps_dropped:
            missing.append("trajectory")
        return missing

    def _view(self, test_case: LLMTestCase) -> AgentView:
        return agent_view(test_case)

    # ------------------------------------------------------------------ reasons
    def _reset_intermediate(self) -> None:
        self._reason_text: str | None = None
        self.blamed_steps: list[str] = []

    def _explain(
        self, score: float, reason: str, view: AgentView, steps: Iterable[int], what: str = ""
    ) -> None:
        """The reason of this run: ``what`` (a fact the metric states itself), the judge's
        reason, then the steps the judge blamed when the score is below 1."""
        self._explain_labels(score, reason, name_steps(view, steps), what)

    def _explain_labels(self, score: float, reason: str, labels: list[str], what: str = "") -> None:
        """:meth:`_explain` with the blamed steps already named."""
        labels = labels if score < 1.0 else []
        self.blamed_steps = labels
        parts = [p.strip() for p in (what, reason) if p and p.strip()]
        text = " ".join(parts) or f"The score is {score:.2f}."
        if labels:
            text += f" Steps that lowered the score: {joined(labels)}."
        self._reason_text = text

    async def _a_call_verdicts(
        self, view: AgentView, schema: type[BaseModel], tools: AgentView, right: str
    ) -> tuple[float, str, str, list[str]] | None:
        """One yes/no verdict per tool call (the calls :func:`judged_calls` picks) from one
        judge call of the template's ``generate_verdicts``, the tools shown from ``tools``.
        Sets ``judged`` and ``verdicts``; returns (share of "yes", the count line, e.g.
        "2 of 3 tool calls {right}", the judge's reason, the labels of the "no" steps), or
        None when the agent called no tool."""
        calls, total = judged_calls(view)
        if not calls:
            return None
        prompt = self.evaluation_template.generate_verdicts(
            render_task(view),
            render_tools(tools),
            render_steps(view),
            render_calls(calls),
            len(calls),
        )
        checked = expect_count(schema, "verdicts", len(calls))
        answer: Any = await self._ask("Verdicts", prompt, checked)
        self.judged, self.verdicts = calls, list(answer.verdicts)
        wrong = [c for c, v in zip(calls, self.verdicts, strict=True) if v.verdict == "no"]
        head = f"{len(calls) - len(wrong)} of {len(calls)} tool calls {right}"
        if total > len(calls):
            head += f" (the first {len(calls)} of {total} calls judged)"
        score = (len(calls) - len(wrong)) / len(calls)
        return score, head, str(answer.reason), [step_label(c) for c in wrong]

    async def _a_reason(self, score: float) -> str | None:
        # the reason came with the verdict in the same judge call: no second call
        return self._reason_text
