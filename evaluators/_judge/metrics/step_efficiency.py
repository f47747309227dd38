"""Step Efficiency: did the agent reach its task without wasted steps?

As deepeval documents it: the score is the alignment between the task and the steps the agent
executed, 1 when every step was needed, lower for redundant calls, detours, loops and retries
that gain nothing. deepeval asks its judge twice (extract the task, then score); here one
structured call returns the task, the score, the reason and the steps that were wasted::

    metric = StepEfficiencyMetric()
    metric.measure(case)
    metric.reason  # "... Steps that lowered the score: step 4 (tool_call search), ..."
"""

from __future__ import annotations

from typing import Any

from spanjudge.evaluators._judge.metrics.agent_metric import AgentMetric
from spanjudge.evaluators._judge.metrics.agent_schemas import StepEfficiencyVerdict
from spanjudge.evaluators._judge.metrics.agent_text import render_steps, render_task, render_tools
from spanjudge.evaluators._judge.quoting import quote
from spanjudge.evaluators._judge.test_case import LLMTestCase

__all__ = ["StepEfficiencyMetric", "StepEfficiencyTemplate"]


class StepEfficiencyTemplate:
    """Prompt of :class:`StepEfficiencyMetric`; subclass and pass as ``evaluation_template``."""

    @staticmethod
    def generate_score(task: str, tools: str, steps: str) -> str:
        return f"""You judge how efficiently an AI agent worked towards its task.

Restate the task in one sentence. Then read the steps and score "score" from 0 to 1: how directly
the steps lead to the task. Whether the task was finally achieved is NOT the question here; the
question is whether each step was needed on the way.
1 = every step was needed, none repeated; about 0.75 = one avoidable step; about 0.5 = several
avoidable steps or a detour; about 0.25 = mostly wasted work (loops, the same call again and
again, calls unrelated to the task); 0 = nothing the agent did moved towards the task.
A step needed because an earlier one failed is not wasted; calling a tool again with the same
arguments after it already answered is.
In "steps" list the indices (the numbers in [step N]) of the wasted steps; leave it empty for a
score of 1. The "reason" explains the score in one or two sentences and names those steps.

Answer with JSON only:
{{"task": "...", "score": 0.0-1.0, "reason": "...", "steps": [N, ...]}}
Example:
{{"task": "Find the opening hours of the Paris store.", "score": 0.5, "reason": "The agent
searched for the same query three times (steps 2, 3 and 4) before reading the first result.",
"steps": [3, 4]}}

{quote("Task", task)}

{quote("Tools available", tools)}

{quote("What the agent did", steps)}

JSON:"""


class StepEfficiencyMetric(AgentMetric):
    """How free of wasted steps the agent's work was, 0 to 1 (higher is better).

    Example::

        StepEfficiencyMetric(threshold=0.7).measure(case)
    """

    name = "step_efficiency"
    display_name = "Step Efficiency"
    default_template = StepEfficiencyTemplate

    def _reset_intermediate(self) -> None:
        super()._reset_intermediate()
        self.task: str | None = None
        self.verdict: StepEfficiencyVerdict | None = None

    def _verdict_dicts(self) -> list[dict[str, Any]]:
        if self.verdict is None:
            return []
        return [{**self.verdict.model_dump(), "blamed_steps": self.blamed_steps}]

    async def _a_compute(self, test_case: LLMTestCase) -> float:
        view = self._view(test_case)
        prompt = self.evaluation_template.generate_score(
            render_task(view), render_tools(view), render_steps(view)
        )
        answer = await self._ask("Verdict", prompt, StepEfficiencyVerdict)
        self.verdict, self.task = answer, answer.task or view.task
        self._explain(answer.score, answer.reason, view, answer.steps)
        return float(answer.score)
