"""G-Eval: a judged score for criteria of your own, written in plain words.

The judge first turns the criteria into evaluation steps (once per criteria, fields and judge
model: see :mod:`~spanjudge.evaluators._judge.metrics.geval_steps`), then scores each case against
those steps with an integer from 0 to 10 and a reason. When the judge returns the
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
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from pydantic import BaseModel, Field, field_validator

from spanjudge.errors import ConfigError
from spanjudge.evaluators._judge.metrics.base import BaseMetric
from spanjudge.evaluators._judge.metrics.geval_params import (
    SINGLE_TURN,
    ParamError,
    is_empty,
    join_labels,
    parse_params,
    render_case,
)
from spanjudge.evaluators._judge.metrics.geval_score import (
    SCALE_TOP,
    GEvalBinaryScore,
    GEvalScore,
    normalise,
    weighted_score,
)
from spanjudge.evaluators._judge.metrics.geval_steps import steps_cache, steps_key
from spanjudge.evaluators._judge.test_case import LLMTestCase

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
            raise ConfigError("every step must be a non-empty instruction")
        return cleaned


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
{case}

Go through the steps in order. Write "reason" first: in one or two sentences, what the case
meets and what it misses, quoting it where that helps. {scale}

Answer with JSON only, "reason" before "score". Example: {example}

JSON:"""


# ---------------------------------------------------------------------------- shared engine


class GEvalBase(BaseMetric):
    """What :class:`GEval` and :class:`ConversationalGEval` share: parameters, the user's name,
    steps from the cache, the scoring call and its arithmetic. A variant sets the field
    vocabulary and implements :meth:`_render` and :meth:`missing_fields`."""

    allowed_params: ClassVar[Mapping[str, str]] = SINGLE_TURN
    default_params: ClassVar[tuple[str, ...]] = ("input", "actual_output")
    template_class: ClassVar[type[Any]] = GEvalTemplate

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
        self.evaluation_template = evaluation_template or self.template_class
        super().__init__(threshold, model, include_reason, strict_mode, async_mode, verbose_mode)

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
            "evaluation_template": self.evaluation_template,
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
