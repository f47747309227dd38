"""Argument Correctness: did the agent call its tools with the right arguments?

As deepeval documents it: each tool call gets a verdict (were its arguments right for the task,
given what the agent knew at that point?) and the score is correct calls / calls judged. No tool
call scores 1 with no judge call. deepeval asks its judge twice (verdicts, then a reason); here
one structured call returns both, and the reason names the steps of the wrong calls::

    metric = ArgumentCorrectnessMetric()
    metric.measure(case)
    metric.verdicts   # [ArgumentVerdict(step=1, verdict="no", reason="id 7, the user said 8"), ...]
"""

from __future__ import annotations

from typing import Any

from spanjudge.evaluators._judge.metrics.agent_metric import AgentMetric
from spanjudge.evaluators._judge.metrics.agent_schemas import ArgumentVerdict, ArgumentVerdicts
from spanjudge.evaluators._judge.metrics.agent_text import step_label
from spanjudge.evaluators._judge.quoting import quote
from spanjudge.evaluators._judge.test_case import LLMTestCase

__all__ = ["ArgumentCorrectnessMetric", "ArgumentCorrectnessTemplate"]


class ArgumentCorrectnessTemplate:
    """Prompt of :class:`ArgumentCorrectnessMetric`; subclass, pass as ``evaluation_template``."""

    @staticmethod
    def generate_verdicts(task: str, tools: str, steps: str, calls: str, count: int) -> str:
        return f"""You judge the arguments an AI agent passed to its tools.

For each tool call listed under "Tool calls to judge", decide whether its arguments were right:
- "yes": they carry what the task and the earlier steps call for (the right ids, names, dates,
  amounts, queries), in the form the tool's parameters ask for;
- "no": a value is wrong, made up, missing or contradicts what the user said or an earlier result
  showed; say which value and what it should have been.
Judge the arguments only: not whether this tool was the best choice, and not its result.

Answer with JSON only: {{"verdicts": [{{"step": N, "verdict": "yes" | "no", "reason": "..."}}],
"reason": "..."}} with exactly one verdict per listed call, in the listed order ({count} in
total), "step" copied from the call. The top-level "reason" sums the verdicts up in one or two
sentences, naming the steps with wrong arguments.
Example:
{{"verdicts": [{{"step": 1, "verdict": "no", "reason": "id 7 was passed; the user asked about
order 8."}}], "reason": "Step 1 looked up the wrong order."}}

{quote("Task", task)}

{quote("Tools available", tools)}

{quote("What the agent did", steps)}

Tool calls to judge ({count}):
{quote("Tool calls to judge", calls)}

JSON:"""


class ArgumentCorrectnessMetric(AgentMetric):
    """Share of tool calls whose arguments were right; higher is better.

    Example::

        metric = ArgumentCorrectnessMetric(threshold=0.8)
        metric.measure(case)
        metric.reason  # "1 of 2 tool calls had the right arguments; wrong: step 3 (...) ..."
    """

    name = "argument_correctness"
    display_name = "Argument Correctness"
    default_template = ArgumentCorrectnessTemplate

    def _reset_intermediate(self) -> None:
        super()._reset_intermediate()
        self.verdicts: list[ArgumentVerdict] = []
        self.judged: list[Any] = []

    def _verdict_dicts(self) -> list[dict[str, Any]]:
        return [
            {"tool": call.name, "step_label": step_label(call), **verdict.model_dump()}
            for call, verdict in zip(self.judged, self.verdicts, strict=False)
        ]

    async def _a_compute(self, test_case: LLMTestCase) -> float:
        view = self._view(test_case)
        judged = await self._a_call_verdicts(
            view, ArgumentVerdicts, view, "had the right arguments"
        )
        if judged is None:
            self._explain_labels(1.0, "No tool was called, so no argument was wrong.", [])
            return 1.0
        score, head, reason, labels = judged
        self._explain_labels(score, reason, labels, head + ".")
        return score
