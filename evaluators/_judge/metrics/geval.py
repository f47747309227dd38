"""G-Eval: a judged score for criteria of your own, written in plain words, on single-turn cases
(:class:`GEval`) or whole conversations (:class:`ConversationalGEval`).

The judge first turns the criteria into evaluation steps (once per criteria, fields and judge
model, kept by :mod:`~spanjudge.evaluators._judge.metrics.geval_steps`), then scores each case
against those steps with an integer from 0 to 10 and a reason. When the judge returns the
log-probabilities of the score token, the score is the probability-weighted mean of the
integers it weighed (alternatives under 1% and non-integers left out), else the integer it
wrote. The metric's score is that number divided by 10. ``strict_mode`` asks for 0 or 1
instead (pass only when every step is met). An answer outside the scale is invalid, so it goes
through the judge's repair-or-retry and fails as an error: it is never clipped::

    politeness = GEval(
        name="politeness",
        criteria="The answer is courteous and never blames the customer.",
        evaluation_params=["input", "actual_output"],
        threshold=0.7,
    )
    politeness.measure(LLMTestCase(input="Where is my order?", actual_output="On its way!"))
    politeness.score, politeness.reason, politeness.evaluation_steps

The fields the judge sees are named by ours (the test-case field names) or by deepeval's
``SingleTurnParams`` / ``LLMTestCaseParams`` / ``MultiTurnParams`` members or their values, in
any case and with spaces for underscores (``"actual_output"``, ``"Actual Output"``,
``LLMTestCaseParams.ACTUAL_OUTPUT``)::

    parse_params(["input", "Actual Output"], SINGLE_TURN)   # ("input", "actual_output")
    parse_params(["inptu"], SINGLE_TURN)                     # ParamError naming 'inptu'

The conversational variant shows every turn (role and content always, plus each turn's
retrieval context and tool calls where the turn has them and they are among
``evaluation_params``) and the chosen conversation-level fields (scenario, chatbot role,
metadata); steps, scale, weighting and strict mode are the single-turn ones::

    weighted_score(8, answer.logprobs)   # 7.8 when the judge weighed 8 at p=0.8 and 7 at p=0.2
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel, Field, create_model, field_validator

from spanjudge.errors import ParamError
from spanjudge.evaluators._judge.metrics.base import BaseMetric
from spanjudge.evaluators._judge.metrics.geval_steps import steps_cache, steps_key
from spanjudge.evaluators._judge.quoting import quote
from spanjudge.evaluators._judge.test_case import (
    ConversationalTestCase,
    LLMTestCase,
    ToolCall,
    Turn,
)

if TYPE_CHECKING:
    from spanjudge.evaluators._judge.judges.base import TokenLogprob

# ---------------------------------------------------------------------------- fields the judge sees


SINGLE_TURN: Mapping[str, str] = {
    "input": "Input",
    "actual_output": "Actual Output",
    "expected_output": "Expected Output",
    "context": "Context",
    "retrieval_context": "Retrieval Context",
    "tools_called": "Tools Called",
    "expected_tools": "Expected Tools",
    "metadata": "Metadata",
}
"""Single-turn fields G-Eval can show the judge, with their labels in the prompt."""

TURN_FIELDS: Mapping[str, str] = {
    "role": "Role",
    "content": "Content",
    "retrieval_context": "Retrieval Context",
    "tools_called": "Tools Called",
}
"""Fields of each turn (retrieval context and tool calls are shown on the turns that have them)."""

CONVERSATION_FIELDS: Mapping[str, str] = {
    "scenario": "Scenario",
    "chatbot_role": "Chatbot Role",
    "metadata": "Metadata",
}
"""Fields of the conversation as a whole."""

MULTI_TURN: Mapping[str, str] = {**TURN_FIELDS, **CONVERSATION_FIELDS}
"""Every field :class:`ConversationalGEval` can show the judge."""

ALWAYS_SHOWN_TURN_FIELDS: tuple[str, ...] = ("role", "content")
"""A conversation is unreadable without who said what, so these are always included."""


def _normalise(item: Any) -> str | None:
    """Our field name for one user-given item, or None if it is not text or an enum member."""
    value = getattr(item, "value", item)  # an Enum member (deepeval's params) gives its value
    if not isinstance(value, str):
        return None
    text = value.strip()
    if "." in text:  # "LLMTestCaseParams.ACTUAL_OUTPUT", as str() of a deepeval member reads
        text = text.rsplit(".", 1)[1]
    return "_".join(text.replace("-", " ").lower().split())


def parse_params(given: Any, allowed: Mapping[str, str]) -> tuple[str, ...]:
    """``given`` as our field names, in order, without repeats; ParamError on anything unknown."""
    if isinstance(given, (str, bytes)) or not isinstance(given, Sequence):
        raise ParamError(
            "evaluation_params",
            f"expected a list of field names, got {given!r} (allowed: {', '.join(allowed)})",
        )
    if not given:
        raise ParamError("evaluation_params", f"must not be empty (allowed: {', '.join(allowed)})")
    names: list[str] = []
    for item in given:
        name = _normalise(item)
        if name is None or name not in allowed:
            shown = getattr(item, "value", item)
            raise ParamError(
                "evaluation_params",
                f"unknown field {shown!r} (allowed: {', '.join(allowed)})",
            )
        if name not in names:
            names.append(name)
    return tuple(names)


def join_labels(names: Sequence[str], labels: Mapping[str, str]) -> str:
    """``"Input, Actual Output and Context"``: the fields named in prose."""
    shown = [labels[name] for name in names]
    if len(shown) <= 1:
        return "".join(shown)
    return f"{', '.join(shown[:-1])} and {shown[-1]}"


def is_empty(value: Any) -> bool:
    """Whether a case field holds nothing the judge could read."""
    if value is None:
        return True
    if isinstance(value, str):
        return not value.strip()
    if isinstance(value, (list, tuple, dict)):
        return not value
    return False


def _plain(value: Any) -> Any:
    if isinstance(value, ToolCall):
        return value.model_dump(exclude_none=True)
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def render_value(value: Any) -> str:
    """A field's value as prompt text: strings as they are, everything else as JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(_plain(value), ensure_ascii=False, indent=1, default=str)


def render_case(case: LLMTestCase, names: Sequence[str]) -> str:
    """The chosen fields of a single-turn case, each under its label."""
    return "\n\n".join(
        f"{SINGLE_TURN[name]}:\n{render_value(getattr(case, name))}" for name in names
    )


def render_turn(turn: Turn, names: Sequence[str]) -> dict[str, Any]:
    """One turn as a JSON-ready dict of the chosen turn fields it has."""
    out: dict[str, Any] = {}
    for name in names:
        if name in TURN_FIELDS:
            value = getattr(turn, name)
            if not is_empty(value):
                out[name] = _plain(value)
    return out


def render_conversation(case: ConversationalTestCase, names: Sequence[str]) -> str:
    """The chosen conversation-level fields, then the turns in order as a JSON list."""
    parts = [
        f"{CONVERSATION_FIELDS[name]}:\n{render_value(getattr(case, name))}"
        for name in names
        if name in CONVERSATION_FIELDS
    ]
    turns = [render_turn(turn, names) for turn in case.turns]
    parts.append("Turns:\n" + json.dumps(turns, ensure_ascii=False, indent=1, default=str))
    return "\n\n".join(parts)


# ---------------------------------------------------------------------------- schemas


_ENUMERATION = re.compile(r"^\s*(?:\d+[.)]|[-*\u2022])\s+")


class GEvalSteps(BaseModel):
    """Judge answer of the step-generation call."""

    steps: list[str] = Field(min_length=1)

    @field_validator("steps")
    @classmethod
    def _clean_steps(cls, steps: list[str]) -> list[str]:
        # the prompt numbers the steps itself: "1. Read..." from the judge would read "1. 1. Read"
        cleaned = [_ENUMERATION.sub("", step).strip() for step in steps]
        if any(not step for step in cleaned):
            raise ValueError("every step must be a non-empty instruction")
        return cleaned


SCALE_TOP = 10
"""The top of G-Eval's scale (0..10); the metric reports score / SCALE_TOP."""

MIN_PROBABILITY = 0.01
"""Alternatives of the score token below this probability are left out of the weighted mean."""

DECIMALS = 6
"""The weighted score is rounded to this many decimals (on the 0..10 scale)."""


class GEvalScore(BaseModel):
    """The judge's scoring answer: "reason" first, then "score", an integer from 0 to 10 (0 or 1
    in strict mode)."""

    # Anything else (11, -1, 7.5, "high", true) is invalid. The range is a validator, not schema
    # bounds, so strict mode's variant (GEvalBinaryScore) sends the same JSON schema.
    scale_top: ClassVar[int] = SCALE_TOP

    reason: str
    score: int

    @field_validator("score", mode="before")
    @classmethod
    def _no_booleans(cls, value: Any) -> Any:
        if isinstance(value, bool):
            raise ValueError("the score must be an integer, not true/false")
        return value

    @field_validator("score")
    @classmethod
    def _on_the_scale(cls, value: int) -> int:
        if not 0 <= value <= cls.scale_top:
            raise ValueError(f"the score must be an integer from 0 to {cls.scale_top}, got {value}")
        return value


GEvalBinaryScore: type[GEvalScore] = create_model(
    "GEvalScore",  # same name: scripted judges and the JSON schema sent see one schema
    __base__=GEvalScore,
    __module__=__name__,
    __doc__=GEvalScore.__doc__,
)
""":class:`GEvalScore` of strict mode: 0 or 1."""
GEvalBinaryScore.scale_top = 1


# ---------------------------------------------------------------------------- score arithmetic

_SCORE_VALUE = re.compile(r'"score"\s*:\s*(\d+)')


def _score_position(raw: int, logprobs: Sequence[TokenLogprob]) -> TokenLogprob | None:
    """The token that wrote the score's value (found by its offset in the answer text)."""
    starts: list[int] = []
    text = ""
    for item in logprobs:
        starts.append(len(text))
        text += item.token
    matches = list(_SCORE_VALUE.finditer(text))
    if not matches:
        return None
    offset = matches[-1].start(1)
    for index in range(len(logprobs) - 1, -1, -1):
        if starts[index] <= offset:
            token = logprobs[index]
            return token if token.token.strip() == str(raw) else None
    return None


def weighted_score(
    raw: int, logprobs: Sequence[TokenLogprob] | None, top: int = SCALE_TOP
) -> float:
    """The probability-weighted score on 0..``top``, or ``raw`` when it cannot be weighted.

    At the position of the score token, each alternative that is an integer in 0..``top`` with
    probability >= :data:`MIN_PROBABILITY` counts with its probability; the result is the
    weighted mean over those (probabilities renormalised to sum to 1), rounded to
    :data:`DECIMALS` decimals. No log-probabilities, no score token among them, or no usable
    alternative: ``raw``. Example: alternatives 8 (p=0.8) and 7 (p=0.2) give
    0.8*8 + 0.2*7 = 7.8.
    """
    if not logprobs:
        return float(raw)
    position = _score_position(raw, logprobs)
    if position is None:
        return float(raw)
    total = weighted = 0.0
    for token, logprob in position.top:
        text = token.strip()
        if not (text.isascii() and text.isdecimal()) or int(text) > top:
            continue
        probability = math.exp(logprob)
        if probability < MIN_PROBABILITY:
            continue
        total += probability
        weighted += probability * int(text)
    if total <= 0:
        return float(raw)
    # rounded: float noise from exp(log p) must not put a score a hair under its threshold
    return round(weighted / total, DECIMALS)


def normalise(score: float, top: int = SCALE_TOP) -> float:
    """``score`` on 0..``top`` as 0..1, at the weighted score's precision (9.4 / 10 is
    0.9400000000000001 in floating point, which would fail a 0.94 threshold)."""
    return round(score / top, DECIMALS + 1)


# ---------------------------------------------------------------------------- prompts


def numbered(steps: Sequence[str]) -> str:
    return "\n".join(f"{i}. {step}" for i, step in enumerate(steps, start=1))


class GEvalTemplate:
    """Prompts of :class:`GEval`; subclass and pass as ``evaluation_template``."""

    @staticmethod
    def generate_steps(criteria: str, fields: str) -> str:
        return f"""You write the checklist a careful reviewer follows to judge a criterion.

Criterion:
{criteria}

For each case the reviewer sees: {fields}.
Write 3 to 5 short steps. Each step is one instruction that checks part of the criterion
against those fields. Do not score anything yet, and do not number the steps.

Answer with JSON only: {{"steps": ["...", "..."]}}.
Example (criterion "The answer is polite", fields Input and Actual Output):
{{"steps": ["Read the Input to see what the user asked for.", "Look in the Actual Output
for rude, curt or dismissive wording.", "Check whether the Actual Output blames the user."]}}

JSON:"""

    @staticmethod
    def generate_score(steps: str, case: str, fields: str, strict_mode: bool) -> str:
        if strict_mode:
            scale = 'Then give "score": 1 if the case meets every step completely, otherwise 0.'
            example = '{"reason": "The answer calls the customer careless (step 3).", "score": 0}'
        else:
            scale = (
                'Then give "score": an integer from 0 to 10, where 10 means the case meets '
                "every step completely and 0 means it meets none of them."
            )
            example = (
                '{"reason": "Courteous and clear, but the last sentence is curt.", "score": 8}'
            )
        return f"""You judge one case by following evaluation steps.

Evaluation steps:
{steps}

The case ({fields}):
{quote("Case", case)}

Go through the steps in order. Write "reason" first: in one or two sentences, what the case
meets and what it misses, quoting it where that helps. {scale}

Answer with JSON only, "reason" before "score". Example: {example}

JSON:"""


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
{quote("Conversation", case)}

Go through the steps in order, across all turns. Write "reason" first: in one or two
sentences, what the conversation meets and what it misses, naming turns where that helps.
{scale}

Answer with JSON only, "reason" before "score". Example: {example}

JSON:"""


# ---------------------------------------------------------------------------- shared engine


class GEvalBase(BaseMetric):
    """What :class:`GEval` and :class:`ConversationalGEval` share: parameters, the user's name,
    steps from the cache, the scoring call and its arithmetic. A variant sets the field
    vocabulary and implements :meth:`_render` and :meth:`missing_fields`."""

    allowed_params: ClassVar[Mapping[str, str]] = SINGLE_TURN
    default_params: ClassVar[tuple[str, ...]] = ("input", "actual_output")
    default_template: ClassVar[type[Any] | None] = GEvalTemplate

    def __init__(
        self,
        name: str,
        criteria: str | None = None,
        evaluation_steps: Sequence[str] | None = None,
        evaluation_params: Sequence[Any] | None = None,
        threshold: float = 0.5,
        model: Any = None,
        include_reason: bool = True,
        strict_mode: bool = False,
        async_mode: bool = True,
        verbose_mode: bool = False,
        top_logprobs: int = 20,
        evaluation_template: type[Any] | None = None,
    ) -> None:
        if not isinstance(name, str) or not name.strip() or "\x00" in name:
            raise ParamError("name", f"must be a non-empty string, got {name!r}")
        self._name = name
        if criteria is not None and (not isinstance(criteria, str) or not criteria.strip()):
            raise ParamError("criteria", f"must be non-empty text, got {criteria!r}")
        if evaluation_steps is not None and (
            isinstance(evaluation_steps, str)
            or not isinstance(evaluation_steps, Sequence)
            or not evaluation_steps
            or not all(isinstance(s, str) and s.strip() for s in evaluation_steps)
        ):
            raise ParamError(
                "evaluation_steps", f"must be a non-empty list of steps, got {evaluation_steps!r}"
            )
        if criteria is None and evaluation_steps is None:
            raise ParamError(
                "criteria",
                "give criteria or evaluation_steps (or both: the steps are then used as given)",
            )
        if isinstance(top_logprobs, bool) or not isinstance(top_logprobs, int):
            raise ParamError("top_logprobs", f"must be an integer 0..20, got {top_logprobs!r}")
        if not 0 <= top_logprobs <= 20:
            raise ParamError("top_logprobs", f"must be an integer 0..20, got {top_logprobs!r}")
        self.criteria = criteria
        self._steps_arg = None if evaluation_steps is None else list(evaluation_steps)
        self.evaluation_steps: list[str] | None = self._steps_arg
        self.evaluation_params = self._fields(evaluation_params)
        self.top_logprobs = top_logprobs
        super().__init__(
            threshold,
            model,
            include_reason,
            strict_mode,
            async_mode,
            verbose_mode,
            evaluation_template,
        )

    # ------------------------------------------------------------------ identity
    @property
    def name(self) -> str:
        """The user's name for this criterion (``gen_ai.evaluation.name`` on results)."""
        return self._name

    @name.setter
    def name(self, value: str) -> None:
        self._name = value

    @property
    def display_name(self) -> str:
        return f"{self._name} [GEval]"

    @display_name.setter
    def display_name(self, value: str) -> None:
        self._name = value.removesuffix(" [GEval]")

    def _fields(self, given: Sequence[Any] | None) -> tuple[str, ...]:
        return parse_params(self.default_params if given is None else given, self.allowed_params)

    def _config(self) -> dict[str, Any]:
        return {
            **super()._config(),
            "name": self._name,
            "criteria": self.criteria,
            "evaluation_steps": self._steps_arg,
            "evaluation_params": list(self.evaluation_params),
            "top_logprobs": self.top_logprobs,
        }

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(name={self._name!r}, threshold={self.threshold}, "
            f"model={self.evaluation_model!r})"
        )

    # ------------------------------------------------------------------ for variants
    def _render(self, test_case: Any) -> str:
        raise NotImplementedError

    def _fields_text(self) -> str:
        return join_labels(self.evaluation_params, self.allowed_params)

    # ------------------------------------------------------------------ engine
    def _reset_intermediate(self) -> None:
        self.raw_score: int | None = None
        self.weighted_score: float | None = None
        self.steps_source: str | None = None
        self._judge_reason: str | None = None

    def _verdict_dicts(self) -> list[dict[str, Any]]:
        return []

    async def _a_steps(self) -> list[str]:
        if self._steps_arg is not None:
            self.steps_source = "given"
            return self._steps_arg
        assert self.criteria is not None
        prompt = self.evaluation_template.generate_steps(self.criteria, self._fields_text())

        async def generate() -> list[str]:
            return list((await self._ask("Evaluation steps", prompt, GEvalSteps)).steps)

        key = steps_key(self.evaluation_model, prompt)
        steps, source = await steps_cache.get_or_create(key, generate, model=self.evaluation_model)
        self.steps_source = source
        if source != "judge":
            self._log(f"Evaluation steps (cached, {source})", numbered(steps))
        return steps

    async def _a_compute(self, test_case: Any) -> float:
        if self.criteria is not None:
            self._log("Criteria", self.criteria)
        steps = await self._a_steps()
        self.evaluation_steps = steps
        prompt = self.evaluation_template.generate_score(
            numbered(steps), self._render(test_case), self._fields_text(), self.strict_mode
        )
        schema = GEvalBinaryScore if self.strict_mode else GEvalScore
        # strict mode is binary: a weighted mean of 0 and 1 would be neither
        top = 0 if self.strict_mode else self.top_logprobs
        answer = await self._ask_answer("Judge score", prompt, schema, top_logprobs=top)
        self.raw_score = answer.value.score
        self._judge_reason = answer.value.reason
        if self.strict_mode:
            return float(self.raw_score)
        self.weighted_score = weighted_score(self.raw_score, answer.logprobs)
        how = "probability-weighted" if answer.logprobs else "no log-probabilities: as written"
        self._log("Weighted score", f"{self.weighted_score:.4g} / {SCALE_TOP} ({how})")
        return normalise(self.weighted_score)

    async def _a_reason(self, score: float) -> str | None:
        return self._judge_reason


# ---------------------------------------------------------------------------- single turn


class GEval(GEvalBase):
    """Your own criteria on single-turn cases (:class:`LLMTestCase`), judged G-Eval style.

    ``evaluation_params`` names the case fields the judge sees (default: input and
    actual_output); a case missing one of them is skipped as a missing field, not scored.
    Give ``criteria`` (steps are generated once and cached) or ``evaluation_steps`` (used as
    given), or both.

    Example::

        metric = GEval(name="correctness", criteria="The answer agrees with the expected one.",
                       evaluation_params=["input", "actual_output", "expected_output"])
        metric.measure(LLMTestCase(input="2+2?", actual_output="4", expected_output="4"))
    """

    def missing_fields(self, test_case: Any) -> list[str]:
        if not isinstance(test_case, LLMTestCase):
            return list(self.evaluation_params)
        return [f for f in self.evaluation_params if is_empty(getattr(test_case, f, None))]

    def _render(self, test_case: Any) -> str:
        return render_case(test_case, self.evaluation_params)


# ---------------------------------------------------------------------------- conversation


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
    default_template: ClassVar[type[Any] | None] = ConversationalGEvalTemplate

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
