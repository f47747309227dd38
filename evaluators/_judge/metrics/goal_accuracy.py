"""Goal Accuracy: across a conversation, did the agent reach each goal the user set, and by a
sound way?

As deepeval documents it: the conversation is split into unit interactions (a user's messages
and the assistant's answers up to the next user message); each gets a goal score (was the
user's goal reached?) and a plan score (was the assistant's way there sound?); the score is
(mean goal score + mean plan score) / 2. The assistant's way is what its turns said and did:
each assistant turn's trajectory (``Turn.trajectory``: tool calls, results, errors), or its
``tools_called``. deepeval asks its judge twice per unit and once more for the reason; here one
structured call per unit returns both scores and their reasons, and the reason is put together
from them, naming the turns and steps that cost points::

    metric = GoalAccuracyMetric()
    metric.measure(ConversationalTestCase(turns=[...]))
    metric.verdicts   # one GoalAccuracyVerdict per unit interaction
"""

from __future__ import annotations

from typing import Any, ClassVar

from spanjudge.evaluators._judge.metrics.agent_metric import joined
from spanjudge.evaluators._judge.metrics.agent_schemas import GoalAccuracyVerdict
from spanjudge.evaluators._judge.metrics.agent_text import (
    MAX_TEXT_CHARS,
    cut,
    render_steps,
    step_label,
    turn_view,
)
from spanjudge.evaluators._judge.metrics.base import BaseMetric
from spanjudge.evaluators._judge.metrics.topic_adherence import unit_interactions
from spanjudge.evaluators._judge.quoting import quote
from spanjudge.evaluators._judge.test_case import ConversationalTestCase, Turn

__all__ = ["GoalAccuracyMetric", "GoalAccuracyTemplate"]

_NAMED_UNITS = 5  # unit interactions a reason describes; the verdicts keep every one


class GoalAccuracyTemplate:
    """Prompt of :class:`GoalAccuracyMetric`; subclass and pass as ``evaluation_template``."""

    @staticmethod
    def generate_scores(interaction: str) -> str:
        return f"""You judge one exchange between a user and an AI agent.

State the user's goal in this exchange in one sentence. Then give two scores from 0 to 1:
- "goal_score": how far the agent's answers and actions reached that goal (1 = fully reached;
  about 0.5 = partly; 0 = not at all, or the agent claimed success it did not have);
- "plan_score": how sound the agent's way there was: the right steps in a sensible order, tool
  results used, errors noticed and handled (1 = sound; about 0.5 = detours or an ignored problem;
  0 = no coherent approach).
Give "goal_reason" and "plan_reason" (one sentence each). In "steps" list the indices (the
numbers in [step N]) of the agent's steps that cost points; leave it empty when none did.

Answer with JSON only:
{{"goal": "...", "goal_score": 0.0-1.0, "goal_reason": "...", "plan_score": 0.0-1.0,
"plan_reason": "...", "steps": [N, ...]}}
Example:
{{"goal": "Change the delivery address of order 7.", "goal_score": 0.0, "goal_reason": "The
address was not changed, yet the agent said it was.", "plan_score": 0.5, "plan_reason": "It
looked the order up, but ignored the error of update_address at step 2.", "steps": [2]}}

{quote("Exchange", interaction)}

JSON:"""


class GoalAccuracyMetric(BaseMetric):
    """(mean goal score + mean plan score) / 2 over the conversation's unit interactions;
    higher is better.

    Example::

        GoalAccuracyMetric(threshold=0.7).measure(convo)
    """

    name = "goal_accuracy"
    display_name = "Goal Accuracy"
    conversational = True
    required_fields = ("turns",)
    targets: ClassVar[tuple[str, ...]] = ("conversation",)
    reads_trajectory: ClassVar[bool] = True  # the judge-result cache keys turns' trajectories
    default_template = GoalAccuracyTemplate

    def missing_fields(self, test_case: Any) -> list[str]:
        """``turns`` unless the conversation holds a user message answered by the assistant."""
        if not isinstance(test_case, ConversationalTestCase):
            return ["turns"]
        return [] if unit_interactions(test_case.turns) else ["turns"]

    def _reset_intermediate(self) -> None:
        self.units: list[list[Turn]] = []
        self.verdicts: list[GoalAccuracyVerdict] = []
        self.unit_turns: list[int] = []
        self._reason_text: str | None = None

    def _verdict_dicts(self) -> list[dict[str, Any]]:
        return [
            {"turn": turn, **verdict.model_dump()}
            for turn, verdict in zip(self.unit_turns, self.verdicts, strict=False)
        ]

    async def _a_compute(self, test_case: ConversationalTestCase) -> float:
        position = {id(turn): i for i, turn in enumerate(test_case.turns)}
        self.units = unit_interactions(test_case.turns)
        self.unit_turns = [position[id(unit[0])] for unit in self.units]
        prompts = [self._prompt(unit, position) for unit in self.units]
        self.verdicts = await self._gather(
            *(self._ask("Verdict", prompt, GoalAccuracyVerdict) for prompt in prompts)
        )
        goal = sum(v.goal_score for v in self.verdicts) / len(self.verdicts)
        plan = sum(v.plan_score for v in self.verdicts) / len(self.verdicts)
        score = (goal + plan) / 2
        self._reason_text = self._compose(score, goal, plan, position)
        return score

    async def _a_reason(self, score: float) -> str | None:
        return self._reason_text  # put together from the per-unit reasons: no judge call

    def _prompt(self, unit: list[Turn], position: dict[int, int]) -> str:
        blocks = []
        for turn in unit:
            where = position[id(turn)]
            text = cut(turn.content or "(no text)", MAX_TEXT_CHARS)
            if turn.role == "user":
                blocks.append(f"User (turn {where}): {text}")
                continue
            blocks.append(f"Assistant (turn {where}): {text}")
            view = turn_view(turn)
            if view is not None and view.steps:
                done = render_steps(view, final_output=False)
                blocks.append(
                    "  What the assistant did in this turn:\n  " + done.replace("\n", "\n  ")
                )
        return str(self.evaluation_template.generate_scores("\n".join(blocks)))

    def _compose(self, score: float, goal: float, plan: float, position: dict[int, int]) -> str:
        head = (
            f"The score is {score:.2f}: goal {goal:.2f} and plan {plan:.2f}, averaged over "
            f"{len(self.verdicts)} exchange(s)."
        )
        parts = [head]
        shown = 0
        for unit, verdict in zip(self.units, self.verdicts, strict=True):
            if verdict.goal_score >= 1.0 and verdict.plan_score >= 1.0:
                continue
            if shown == _NAMED_UNITS:
                parts.append("More exchanges lost points (see the verdicts).")
                break
            shown += 1
            where = position[id(unit[0])]
            line = f"Turn {where}"
            if verdict.goal:
                line += f" ({cut(verdict.goal, 120)})"
            line += f": goal {verdict.goal_score:.2f}, {verdict.goal_reason or 'no reason given'}"
            line += f"; plan {verdict.plan_score:.2f}, {verdict.plan_reason or 'no reason given'}"
            labels = _step_labels(unit, verdict.steps, position)
            if labels:
                line += f"; steps that lowered the score: {joined(labels)}"
            parts.append(line.rstrip(".") + ".")
        return " ".join(parts)


def _step_labels(unit: list[Turn], indices: list[int], position: dict[int, int]) -> list[str]:
    """``turn 3 step 2 (tool_call lookup_order)``: a step index is looked up in the unit's
    assistant turns, the last first (where the outcome is)."""
    labels = []
    for index in dict.fromkeys(indices):
        for turn in reversed(unit):
            view = turn_view(turn) if turn.role == "assistant" else None
            step = next((s for s in view.steps if s.index == index), None) if view else None
            if step is not None:
                labels.append(f"turn {position[id(turn)]} {step_label(step)}")
                break
    return labels
