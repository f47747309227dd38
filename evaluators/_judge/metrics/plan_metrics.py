"""Plan Adherence and Plan Quality: judged on the plan an agent recorded.

The plan is the trajectory's ``plan`` steps (spans of the semconv ``plan`` operation, their
output as the plan text). As deepeval documents both metrics:

* **Plan Quality**: the alignment between the task and the plan (complete, ordered, feasible
  with the tools available, no needless steps), 0 to 1;
* **Plan Adherence**: the alignment between the plan and the steps executed (followed in order,
  nothing skipped, nothing unplanned without need), 0 to 1.

A trajectory with no plan step scores 1 with no judge call, which is what deepeval does when it
finds no plan in a trace; the reason says so. deepeval asks its judge three times (the task, the
plan, the score); here one structured call returns the score, the reason and the steps to blame::

    PlanAdherenceMetric().measure(case)
    PlanQualityMetric().measure(case)
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel

from spanjudge.evaluators._judge.metrics.agent_metric import AgentMetric
from spanjudge.evaluators._judge.metrics.agent_schemas import (
    PlanAdherenceVerdict,
    PlanQualityVerdict,
)
from spanjudge.evaluators._judge.metrics.agent_text import (
    AgentView,
    render_steps,
    render_task,
    render_tools,
)
from spanjudge.evaluators._judge.quoting import quote
from spanjudge.evaluators._judge.test_case import LLMTestCase

__all__ = [
    "NO_PLAN_REASON",
    "PlanAdherenceMetric",
    "PlanAdherenceTemplate",
    "PlanQualityMetric",
    "PlanQualityTemplate",
]

NO_PLAN_REASON = (
    "There is no plan to evaluate: the trajectory has no plan step (a span of the 'plan' "
    "operation). As deepeval does when it finds no plan, the score is 1."
)

_SCALE = """1 = {top}; about 0.75 = {good}; about 0.5 = {half}; about 0.25 = {poor}; 0 = {none}.
In "steps" list the indices (the numbers in [step N]) of the steps that cost points; leave it
empty for a score of 1. The "reason" explains the score in one or two sentences and names them.

Answer with JSON only: {{"score": 0.0-1.0, "reason": "...", "steps": [N, ...]}}"""


class PlanAdherenceTemplate:
    """Prompt of :class:`PlanAdherenceMetric`; subclass and pass as ``evaluation_template``."""

    @staticmethod
    def generate_score(task: str, plan: str, steps: str) -> str:
        scale = _SCALE.format(
            top="every planned step was carried out, in order, with nothing unplanned",
            good="one planned step changed or skipped with reason",
            half="about half of the plan followed",
            poor="the plan mostly ignored",
            none="the execution has nothing to do with the plan",
        )
        return f"""You judge whether an AI agent followed its own plan.

Compare the plan with the steps the agent executed after it. Score "score" from 0 to 1: how
closely the execution follows the plan. Whether the plan was good is NOT the question here.
{scale}
Example: {{"score": 0.5, "reason": "The plan said to check stock before ordering; step 3 ordered
without the check.", "steps": [3]}}

{quote("Task", task)}

{quote("Plan", plan)}

{quote("Steps executed", steps)}

JSON:"""


class PlanQualityTemplate:
    """Prompt of :class:`PlanQualityMetric`; subclass and pass as ``evaluation_template``."""

    @staticmethod
    def generate_score(task: str, plan: str, tools: str) -> str:
        scale = _SCALE.format(
            top="an excellent plan: complete, ordered, feasible with the tools, nothing needless",
            good="a good plan with a small gap",
            half="an adequate but flawed plan (a missing or misordered step)",
            poor="a weak plan that would not reach the task",
            none="no usable plan for this task",
        )
        return f"""You judge the quality of a plan an AI agent made for its task.

Score "score" from 0 to 1: how well the plan, if carried out, would achieve the task with the
tools available. Whether the agent then followed it is NOT the question here.
{scale}
Example: {{"score": 0.5, "reason": "The plan in step 0 never confirms the order id before
cancelling it.", "steps": [0]}}

{quote("Task", task)}

{quote("Tools available", tools)}

{quote("Plan", plan)}

JSON:"""


class _PlanMetric(AgentMetric):
    verdict_schema: ClassVar[type[BaseModel]]

    def _reset_intermediate(self) -> None:
        super()._reset_intermediate()
        self.plan: list[str] = []
        self.verdict: Any = None

    def _verdict_dicts(self) -> list[dict[str, Any]]:
        if self.verdict is None:
            return []
        return [{**self.verdict.model_dump(), "plan": self.plan, "blamed_steps": self.blamed_steps}]

    async def _a_compute(self, test_case: LLMTestCase) -> float:
        view = self._view(test_case)
        plans = view.plan_steps
        if not plans:
            self._log("Plan", "no plan step: nothing to judge")
            self._explain_labels(1.0, "", [], NO_PLAN_REASON)
            return 1.0
        self.plan = [str(p.result) for p in plans if p.result is not None]
        prompt = self._prompt(view, render_steps(view, plans, final_output=False))
        answer: Any = await self._ask("Verdict", prompt, self.verdict_schema)
        self.verdict = answer
        self._explain(answer.score, answer.reason, view, answer.steps)
        return float(answer.score)

    def _prompt(self, view: AgentView, plan: str) -> str:
        raise NotImplementedError


class PlanAdherenceMetric(_PlanMetric):
    """How closely the executed steps follow the agent's plan, 0 to 1 (higher is better); 1
    when there is no plan.

    Example::

        PlanAdherenceMetric(threshold=0.7).measure(case)
    """

    name = "plan_adherence"
    display_name = "Plan Adherence"
    default_template = PlanAdherenceTemplate
    verdict_schema = PlanAdherenceVerdict

    def _prompt(self, view: AgentView, plan: str) -> str:
        executed = [s for s in view.steps if s.kind != "plan"]
        return str(
            self.evaluation_template.generate_score(
                render_task(view), plan, render_steps(view, executed)
            )
        )


class PlanQualityMetric(_PlanMetric):
    """How good the agent's plan is for its task, 0 to 1 (higher is better); 1 when there is
    no plan.

    Example::

        PlanQualityMetric().measure(case)
    """

    name = "plan_quality"
    display_name = "Plan Quality"
    default_template = PlanQualityTemplate
    verdict_schema = PlanQualityVerdict

    def _prompt(self, view: AgentView, plan: str) -> str:
        return str(
            self.evaluation_template.generate_score(render_task(view), plan, render_tools(view))
        )
