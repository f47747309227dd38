"""Task Completion: did the agent do what it was asked? Referenceless, read from the trajectory.

deepeval's definition: the score is the alignment between the task and the outcome the agent
reached, from 0 (not achieved) to 1 (fully achieved). The task is the trajectory's (the user's
request) unless ``task=`` gives it. deepeval asks its judge twice (extract the task and the
outcome, then score them); here one structured call returns the task, the outcome, the score,
the reason and the steps that kept the task from being done::

    metric = TaskCompletionMetric(threshold=0.5)
    metric.measure(case)      # case.trajectory, or input / actual_output / tools_called
    metric.score, metric.reason, metric.task, metric.outcome
"""

from __future__ import annotations

from typing import Any

from spanjudge.errors import ConfigError
from spanjudge.evaluators._judge.metrics.agent_metric import AgentMetric
from spanjudge.evaluators._judge.metrics.agent_schemas import TaskCompletionVerdict
from spanjudge.evaluators._judge.metrics.agent_text import (
    AgentView,
    render_steps,
    render_task,
    render_tools,
)
from spanjudge.evaluators._judge.quoting import quote
from spanjudge.evaluators._judge.test_case import LLMTestCase

__all__ = ["TaskCompletionMetric", "TaskCompletionTemplate"]


class TaskCompletionTemplate:
    """Prompt of :class:`TaskCompletionMetric`; subclass and pass as ``evaluation_template``."""

    @staticmethod
    def generate_verdict(task: str, task_given: bool, tools: str, steps: str) -> str:
        source = (
            "The task below was set by the evaluator: judge against it as written."
            if task_given
            else "The task below is the user's request as recorded; restate it as the goal "
            "the agent had to reach (one sentence)."
        )
        return f"""You judge whether an AI agent completed its task.

{source}
Then read what the agent did, step by step, and state the outcome it actually reached (one or two
sentences, facts only: what was done, what was answered, what failed or was left undone). A step
that failed, a tool error ignored, a result not used or a promise not kept counts against the
outcome; a polite final answer does not make up for work not done.

Score "verdict" from 0 to 1: how far the outcome achieves the task.
1 = fully achieved; about 0.75 = mostly achieved, minor parts missing; about 0.5 = partly
achieved; about 0.25 = barely started; 0 = not achieved or the opposite was done.
In "steps" list the indices of the steps (the numbers in [step N]) that kept the task from being
fully achieved; leave it empty for a score of 1. The "reason" explains the score in one or two
sentences and names those steps.

Answer with JSON only:
{{"task": "...", "outcome": "...", "verdict": 0.0-1.0, "reason": "...", "steps": [N, ...]}}
Example:
{{"task": "Cancel order 7 and confirm by email.", "outcome": "Order 7 was cancelled; the email
tool failed and the agent still said an email was sent.", "verdict": 0.5, "reason": "The order
was cancelled but the confirmation email failed at step 4 and was reported as sent.", "steps":
[4]}}

{quote("Task", task)}

{quote("Tools available", tools)}

{quote("What the agent did", steps)}

JSON:"""


class TaskCompletionMetric(AgentMetric):
    """How far the agent's outcome achieves its task, 0 to 1 (higher is better).

    Example::

        metric = TaskCompletionMetric(threshold=0.7)
        metric.measure(case)
        metric.task, metric.outcome   # what the judge read as the task and the outcome
    """

    name = "task_completion"
    display_name = "Task Completion"
    default_template = TaskCompletionTemplate

    def __init__(
        self,
        threshold: float = 0.5,
        task: str | None = None,
        model: Any = None,
        include_reason: bool = True,
        strict_mode: bool = False,
        async_mode: bool = True,
        verbose_mode: bool = False,
        evaluation_template: type[TaskCompletionTemplate] = TaskCompletionTemplate,
    ) -> None:
        if task is not None and not str(task).strip():
            raise ConfigError("task must be a non-empty string or None (None: read from the case)")
        self._given_task = task
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
        return {**super()._config(), "task": self._given_task}

    def _task(self) -> str | None:
        return self._given_task

    def _reset_intermediate(self) -> None:
        super()._reset_intermediate()
        # deepeval's attributes: the task and the outcome of the last run
        self.task: str | None = self._given_task
        self.outcome: str | None = None
        self.verdict: TaskCompletionVerdict | None = None

    def _verdict_dicts(self) -> list[dict[str, Any]]:
        if self.verdict is None:
            return []
        return [{**self.verdict.model_dump(), "blamed_steps": self.blamed_steps}]

    async def _a_compute(self, test_case: LLMTestCase) -> float:
        view = self._view(test_case)
        prompt = self.prompt_for(view)
        answer = await self._ask("Verdict", prompt, TaskCompletionVerdict)
        self.verdict = answer
        self.task = self._given_task or answer.task
        self.outcome = answer.outcome
        self._explain(answer.verdict, answer.reason, view, answer.steps)
        return float(answer.verdict)

    def prompt_for(self, view: AgentView) -> str:
        """The one prompt this metric sends for ``view``."""
        return str(
            self.evaluation_template.generate_verdict(
                render_task(view, self._given_task),
                self._given_task is not None,
                render_tools(view),
                render_steps(view),
            )
        )
