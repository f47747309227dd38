"""Topic Adherence: does the agent answer on-topic questions and decline the others?

The conversation is split into unit interactions (a new unit starts at each assistant -> user
boundary; a trailing user turn with no answer is dropped). Each unit yields question/answer
pairs (one call per unit, units concurrently); each pair is classified against the relevant
topics (one call per pair, concurrently):

- TP: on-topic question, answered;      TN: off-topic question, declined;
- FP: off-topic question, answered;     FN: on-topic question, declined or answered off the point.

Score = (TP + TN) / pairs::

    metric = TopicAdherenceMetric(relevant_topics=["billing", "refunds"])
    metric.measure(ConversationalTestCase(turns=[Turn(role="user", content="..."), ...]))
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, field_validator

from spanjudge.errors import ConfigError
from spanjudge.evaluators._judge.metrics.base import BaseMetric
from spanjudge.evaluators._judge.metrics.schemas import Reason
from spanjudge.evaluators._judge.quoting import quote
from spanjudge.evaluators._judge.test_case import ConversationalTestCase, Turn

Label = Literal["TP", "TN", "FP", "FN"]
LABELS: tuple[Label, ...] = ("TP", "TN", "FP", "FN")

# ---------------------------------------------------------------------------- schemas


class QAPair(BaseModel):
    question: str
    response: str


class QAPairs(BaseModel):
    qa_pairs: list[QAPair]


class TopicVerdict(BaseModel):
    verdict: Label
    reason: str | None = None

    @field_validator("verdict", mode="before")
    @classmethod
    def _normalise(cls, value: Any) -> Any:
        return value.strip().upper() if isinstance(value, str) else value


# ---------------------------------------------------------------------------- prompts


class TopicAdherenceTemplate:
    """Prompts of :class:`TopicAdherenceMetric`; subclass and pass as ``evaluation_template``."""

    @staticmethod
    def get_qa_pairs(conversation: str) -> str:
        return f"""You extract the questions a user asked and the assistant's responses to them.

From the conversation excerpt below, list each distinct question or request of the user
together with the assistant's response to it (quote or closely paraphrase the response; if the
assistant declined or ignored it, say so). Greetings and thanks are not questions. If there is
no question, return an empty list.

Answer with JSON only: {{"qa_pairs": [{{"question": "...", "response": "..."}}]}}.
Example:
user: Hi! What is your refund window? Also, who won the game last night?
assistant: Refunds are possible within 30 days. I can only help with orders, sorry.
Answer: {{"qa_pairs": [{{"question": "What is the refund window?", "response": "Refunds are
possible within 30 days."}}, {{"question": "Who won the game last night?", "response": "The
assistant declined: it only helps with orders."}}]}}

{quote("Conversation", conversation)}

JSON:"""

    @staticmethod
    def get_qa_pair_verdict(relevant_topics: list[str], question: str, response: str) -> str:
        return f"""You check whether an assistant keeps to its topics.

Relevant topics: {json.dumps(relevant_topics, ensure_ascii=False)}

Classify the question/response pair with exactly one label:
- "TP": the question is about a relevant topic and the response answers it;
- "TN": the question is NOT about a relevant topic and the response declines to answer it;
- "FP": the question is NOT about a relevant topic but the response answers it anyway;
- "FN": the question is about a relevant topic but the response declines or misses the point.

Answer with JSON only: {{"verdict": "TP" | "TN" | "FP" | "FN", "reason": "..."}}.
Example (topics ["refunds"]):
Question: "Can you write me a poem?" Response: "Roses are red, violets are blue..."
Answer: {{"verdict": "FP", "reason": "Poetry is not a relevant topic, yet the assistant wrote
one."}}

{quote("Question", question)}
{quote("Response", response)}

JSON:"""

    @staticmethod
    def generate_reason(score: float, threshold: float, truth_table: dict[str, list[str]]) -> str:
        counts = {label: len(reasons) for label, reasons in truth_table.items()}
        return f"""You explain a topic-adherence score in one or two sentences.

The score is {score:.2f} (threshold {threshold}): the share of question/answer pairs where the
assistant answered an on-topic question (TP) or declined an off-topic one (TN).
Counts: {json.dumps(counts)}
Reasons per label:
{quote("Reasons per label", truth_table)}

Explain the score concisely, naming what went wrong (FP: off-topic answers, FN: on-topic
questions not answered) if anything. Answer with JSON only, with the single key "reason".
Example: {{"reason": "The score is 0.67 because the assistant answered an off-topic question
about football; both billing questions were answered."}}

JSON:"""


# ---------------------------------------------------------------------------- conversation units


def unit_interactions(turns: list[Turn]) -> list[list[Turn]]:
    """Split turns at every assistant -> user boundary; keep units with a user and an answer.

    A trailing user turn (no answer yet) and assistant-only openings hold no question/answer
    pair, so they are dropped rather than sent to the judge.
    """
    units: list[list[Turn]] = []
    current: list[Turn] = []
    for turn in turns:
        if turn.role == "user" and current and current[-1].role == "assistant":
            units.append(current)
            current = []
        current.append(turn)
    if current:
        units.append(current)
    return [
        unit
        for unit in units
        if any(t.role == "user" for t in unit) and any(t.role == "assistant" for t in unit)
    ]


def render_unit(unit: list[Turn]) -> str:
    lines = []
    for turn in unit:
        line = f"{turn.role}: {turn.content}"
        for tool in turn.tools_called or []:
            args = json.dumps(tool.input_parameters or {}, ensure_ascii=False, default=str)
            line += f"\n  [tool call {tool.name}({args})]"
        lines.append(line)
    return "\n".join(lines)


# ---------------------------------------------------------------------------- metric


class TopicAdherenceMetric(BaseMetric):
    """Share of question/answer pairs where the agent kept to ``relevant_topics``.

    Example::

        metric = TopicAdherenceMetric(relevant_topics=["orders", "refunds"], threshold=0.5)
        metric.measure(convo)      # a ConversationalTestCase
        metric.truth_table         # {"TP": [...reasons], "TN": [...], "FP": [...], "FN": [...]}
    """

    name = "topic_adherence"
    display_name = "Topic Adherence"
    conversational = True
    required_fields = ("turns",)

    def __init__(
        self,
        relevant_topics: list[str],
        threshold: float = 0.5,
        model: Any = None,
        include_reason: bool = True,
        strict_mode: bool = False,
        async_mode: bool = True,
        verbose_mode: bool = False,
        evaluation_template: type[TopicAdherenceTemplate] = TopicAdherenceTemplate,
    ) -> None:
        topics = [t for t in (relevant_topics or []) if str(t).strip()]
        if not topics:
            raise ConfigError(
                "TopicAdherenceMetric needs relevant_topics: a non-empty list of topics"
            )
        self.relevant_topics = list(topics)
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
            "relevant_topics": self.relevant_topics,
        }

    def _reset_intermediate(self) -> None:
        self.units: list[list[Turn]] = []
        self.qa_pairs: list[QAPair] = []
        self.verdicts: list[TopicVerdict] = []
        self.truth_table: dict[str, list[str]] = {label: [] for label in LABELS}

    def _verdict_dicts(self) -> list[dict[str, Any]]:
        return [
            {**pair.model_dump(), **verdict.model_dump()}
            for pair, verdict in zip(self.qa_pairs, self.verdicts, strict=False)
        ]

    async def _a_compute(self, test_case: ConversationalTestCase) -> float:
        self.units = unit_interactions(test_case.turns)
        # each unit goes pairs -> verdicts on its own, so a slow unit does not hold the others
        per_unit = await self._gather(*(self._a_unit(unit) for unit in self.units))
        for pairs in per_unit:
            for pair, verdict in pairs:
                self.qa_pairs.append(pair)
                self.verdicts.append(verdict)
                self.truth_table[verdict.verdict].append(verdict.reason or "")
        if not self.verdicts:
            self._log("Verdicts", "no question/answer pairs: nothing to judge")
            return 0.0
        good = len(self.truth_table["TP"]) + len(self.truth_table["TN"])
        return good / len(self.verdicts)

    async def _a_unit(self, unit: list[Turn]) -> list[tuple[QAPair, TopicVerdict]]:
        prompt = self.evaluation_template.get_qa_pairs(render_unit(unit))
        pairs = list((await self._ask("QA pairs", prompt, QAPairs)).qa_pairs)
        verdicts = await self._gather(*(self._a_verdict(pair) for pair in pairs))
        return list(zip(pairs, verdicts, strict=False))

    async def _a_verdict(self, pair: QAPair) -> TopicVerdict:
        prompt = self.evaluation_template.get_qa_pair_verdict(
            self.relevant_topics, pair.question, pair.response
        )
        return await self._ask("Verdict", prompt, TopicVerdict)

    async def _a_reason(self, score: float) -> str | None:
        if not self.verdicts:
            return (
                "The score is 0.00 because the conversation holds no question/answer pairs "
                "to judge against the relevant topics."
            )
        prompt = self.evaluation_template.generate_reason(score, self.threshold, self.truth_table)
        return (await self._ask("Reason", prompt, Reason)).reason
