"""Conversational G-Eval: your own criteria judged over a whole conversation.

The judge sees every turn (role and content always, plus each turn's retrieval context and
tool calls where the turn has them and they are among ``evaluation_params``) and the chosen
conversation-level fields (scenario, chatbot role, metadata). Steps, scale, probability
weighting and strict mode are those of :class:`~spanjudge.evaluators._judge.metrics.geval.GEval`::

    metric = ConversationalGEval(
        name="resolution",
        criteria="The assistant resolves the user's problem by the end of the conversation.",
    )
    metric.measure(ConversationalTestCase(turns=[Turn(role="user", content="..."), ...]))
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from spanjudge.evaluators._judge.metrics.geval import GEvalBase
from spanjudge.evaluators._judge.metrics.geval_params import (
    ALWAYS_SHOWN_TURN_FIELDS,
    CONVERSATION_FIELDS,
    MULTI_TURN,
    is_empty,
    render_conversation,
)
from spanjudge.evaluators._judge.test_case import ConversationalTestCase


class ConversationalGEvalTemplate:
    """Prompts of :class:`ConversationalGEval`; subclass and pass as ``evaluation_template``."""

    @staticmethod
    def generate_steps(criteria: str, fields: str) -> str:
        return f"""You write the checklist a careful reviewer follows to judge a conversation
between a user and an assistant against a criterion.

Criterion:
{criteria}

The reviewer sees the whole conversation, turn by turn, with these fields: {fields}.
Write 3 to 5 short steps. Each step is one instruction that checks part of the criterion
across the turns. Do not score anything yet, and do not number the steps.

Answer with JSON only: {{"steps": ["...", "..."]}}.
Example (criterion "The assistant stays patient", fields Role and Content):
{{"steps": ["Find the turns where the user repeats or rephrases a request.", "Check that the
assistant's replies to those turns stay calm and helpful.", "Check that no assistant turn
blames or mocks the user."]}}

JSON:"""

    @staticmethod
    def generate_score(steps: str, case: str, fields: str, strict_mode: bool) -> str:
        if strict_mode:
            scale = (
                'Then give "score": 1 if the conversation meets every step completely, otherwise 0.'
            )
            example = '{"reason": "Turn 4 dismisses the user\'s complaint.", "score": 0}'
        else:
            scale = (
                'Then give "score": an integer from 0 to 10, where 10 means the conversation '
                "meets every step completely and 0 means it meets none of them."
            )
            example = '{"reason": "Patient throughout; turn 6 is terse.", "score": 8}'
        return f"""You judge one conversation by following evaluation steps.

Evaluation steps:
{steps}

The conversation ({fields}); turns are in time order:
{case}

Go through the steps in order, across all turns. Write "reason" first: in one or two
sentences, what the conversation meets and what it misses, naming turns where that helps.
{scale}

Answer with JSON only, "reason" before "score". Example: {example}

JSON:"""


class ConversationalGEval(GEvalBase):
    """Your own criteria over a conversation (:class:`ConversationalTestCase`), for rules with
    ``target="conversation"``.

    ``evaluation_params`` picks among ``role``, ``content``, ``retrieval_context``,
    ``tools_called`` (per turn, shown where present) and ``scenario``, ``chatbot_role``,
    ``metadata`` (of the conversation, required when chosen); role and content are always
    included.

    Example::

        metric = ConversationalGEval(name="patience", criteria="The assistant stays patient.",
                                     evaluation_params=["content", "tools_called"])
    """

    conversational = True
    allowed_params: ClassVar[Mapping[str, str]] = MULTI_TURN
    default_params: ClassVar[tuple[str, ...]] = ALWAYS_SHOWN_TURN_FIELDS
    template_class: ClassVar[type[Any]] = ConversationalGEvalTemplate

    def _fields(self, given: Sequence[Any] | None) -> tuple[str, ...]:
        names = super()._fields(given)
        return (*ALWAYS_SHOWN_TURN_FIELDS, *(n for n in names if n not in ALWAYS_SHOWN_TURN_FIELDS))

    def missing_fields(self, test_case: Any) -> list[str]:
        if not isinstance(test_case, ConversationalTestCase):
            return ["turns"]
        return [
            f
            for f in self.evaluation_params
            if f in CONVERSATION_FIELDS and is_empty(getattr(test_case, f, None))
        ]

    def _render(self, test_case: Any) -> str:
        return render_conversation(test_case, self.evaluation_params)
