"""The one engine every metric shares: judge calls, usage, errors, strict mode, logs, sync/async.

A metric subclass is only its schemas, its prompts (a template class) and its score formula:
it implements :meth:`BaseMetric._a_compute` (fill the intermediate lists and verdicts, return
the raw score) and :meth:`BaseMetric._a_reason`. Everything else lives here once::

    metric = FaithfulnessMetric(threshold=0.7, model="gpt-4o-mini")
    metric.measure(case)          # works in scripts, notebooks and inside a running event loop
    print(metric.score, metric.reason, metric.success, metric.evaluation_cost)
    data = metric.to_data()       # a pydantic MetricData for stores, spans and reports
"""

from __future__ import annotations

import asyncio
import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from pydantic import BaseModel

from spanjudge.errors import ConfigError, MissingFieldError
from spanjudge.evaluators._judge.metrics.outcome import Outcome
from spanjudge.evaluators._judge.metrics.schemas import MetricData, bounded_text, checked_score
from spanjudge.evaluators._judge.quoting import with_data_rule
from spanjudge.evaluators._judge.test_case import ConversationalTestCase, LLMTestCase

if TYPE_CHECKING:
    from spanjudge.evaluators._judge.judges.base import Judge, JudgeAnswer

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)
Self_ = TypeVar("Self_", bound="BaseMetric")


class BaseMetric(Outcome, ABC):
    """Shared shape of every metric (deepeval-compatible attribute names).

    Subclasses set the class attributes and implement :meth:`_a_compute`, :meth:`_a_reason`
    and :meth:`_verdict_dicts`. Instances are stateful (they hold the last result), so run
    concurrent evaluations on :meth:`clone` copies.
    """

    conversational: ClassVar[bool] = False
    required_fields: ClassVar[tuple[str, ...]] = ()
    higher_is_better: ClassVar[bool] = True
    default_template: ClassVar[type[Any] | None] = None
    """The prompts' class (deepeval's ``evaluation_template``; subclass it to change them)."""

    # results of the last run besides the Outcome's (deepeval's attribute names)
    evaluation_cost: float | None
    input_tokens: int
    output_tokens: int
    judge_calls: int

    def __init__(
        self,
        threshold: float = 0.5,
        model: Any = None,
        include_reason: bool = True,
        strict_mode: bool = False,
        async_mode: bool = True,
        verbose_mode: bool = False,
        evaluation_template: type[Any] | None = None,
    ) -> None:
        self.evaluation_template: Any = evaluation_template or self.default_template
        if not 0.0 <= float(threshold) <= 1.0:
            raise ConfigError(f"threshold must be between 0 and 1, got {threshold!r}")
        self._threshold_arg = float(threshold)
        self.strict_mode = strict_mode
        # strict mode is binary: perfection passes, anything else fails
        if strict_mode:
            self.threshold = 1.0 if self.higher_is_better else 0.0
        else:
            self.threshold = float(threshold)
        # imported here so that importing the metrics never loads the judge machinery
        from spanjudge.evaluators._judge.judges import resolve_judge

        self.model: Judge = resolve_judge(model)
        self.evaluation_model: str = self.model.get_model_name()
        self.include_reason = include_reason
        self.async_mode = async_mode
        self.verbose_mode = verbose_mode
        self._reset()

    # ------------------------------------------------------------------ identity / config
    @property
    def __name__(self) -> str:
        return self.display_name

    def _config(self) -> dict[str, Any]:
        """Constructor arguments that reproduce this metric (subclasses add their own)."""
        return {
            "threshold": self._threshold_arg,
            "model": self.model,
            "include_reason": self.include_reason,
            "strict_mode": self.strict_mode,
            "async_mode": self.async_mode,
            "verbose_mode": self.verbose_mode,
            "evaluation_template": self.evaluation_template,
        }

    def cache_identity(self) -> dict[str, Any]:
        """What the judge-result cache keys this metric by: class, name, every ``_config()``
        parameter but the judge and the execution-only flags, and a digest of the metric's
        code and of any template class it was given (so a changed prompt never hits)::

            FaithfulnessMetric(threshold=0.7).cache_identity()["params"]["threshold"]  # 0.7
        """
        from spanjudge.evaluators._judge.metrics.identity import (
            EXECUTION_ONLY,
            class_digest,
            identity_value,
        )

        cls = type(self)
        params = {k: v for k, v in self._config().items() if k not in EXECUTION_ONLY}
        return {
            "class": f"{cls.__module__}.{cls.__qualname__}",
            "name": self.name,
            "params": identity_value(params),
            "code": class_digest(cls, BaseMetric),
        }

    def clone(self: Self_) -> Self_:
        """A fresh instance with the same configuration and the same judge object."""
        return type(self)(**self._config())

    def __repr__(self) -> str:
        return f"{type(self).__name__}(threshold={self.threshold}, model={self.evaluation_model!r})"

    # ------------------------------------------------------------------ required fields
    def missing_fields(self, test_case: Any) -> list[str]:
        """Required fields absent from ``test_case`` (a wrong case type misses all of them)."""
        expected = ConversationalTestCase if self.conversational else LLMTestCase
        if not isinstance(test_case, expected):
            return list(self.required_fields)
        missing = []
        for field in self.required_fields:
            value = getattr(test_case, field, None)
            if value is None or (isinstance(value, list) and not _has_content(value)):
                missing.append(field)
        return missing

    # ------------------------------------------------------------------ running
    async def a_measure(self, test_case: Any, *args: Any, **kwargs: Any) -> float:
        """Async :meth:`measure`: sets score, reason, success, verdicts, usage and logs."""
        self._reset()
        started = time.perf_counter()
        try:
            missing = self.missing_fields(test_case)
            if missing:
                raise MissingFieldError(self.display_name, missing)
            raw = await self._a_compute(test_case)
            score = checked_score(self.display_name, self._apply_strict(raw))
            self.success = (
                score >= self.threshold if self.higher_is_better else score <= self.threshold
            )
            self._log("Score", f"{score:.4g} (threshold {self.threshold}, success {self.success})")
            if self.include_reason:
                self.reason = bounded_text(await self._a_reason(score))
            self.score = score
            return score
        except Exception as exc:
            # a JudgeError carries the stable error_type the online loop writes as error.type
            failure = self._failure(exc)
            self._log("Error", f"{self.error_type}: {self.error}")
            if failure is exc:
                raise
            raise failure from exc
        finally:
            self.duration_seconds = time.perf_counter() - started
            if self.verbose_mode:
                print(self.verbose_logs)

    def to_data(self) -> MetricData:
        """The last result as a :class:`MetricData`."""
        return self._outcome_data(
            judge_model=self.evaluation_model,
            evaluation_cost=self.evaluation_cost,
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
            judge_calls=self.judge_calls,
            verdicts=self._verdict_dicts(),
        )

    # ------------------------------------------------------------------ for subclasses
    @abstractmethod
    async def _a_compute(self, test_case: Any) -> float:
        """Fill intermediate lists and verdicts; return the raw (non-strict) score."""

    @abstractmethod
    async def _a_reason(self, score: float) -> str | None:
        """One judge call summarising the verdicts (only called when include_reason)."""

    @abstractmethod
    def _verdict_dicts(self) -> list[dict[str, Any]]:
        """The verdicts of the last run as plain dicts."""

    def _reset_intermediate(self) -> None:
        """Clear subclass lists before a run."""

    async def _ask(self, step: str, prompt: str, schema: type[M]) -> M:
        """One judge call: usage is counted and the answer logged under ``step``."""
        answer = await self._ask_answer(step, prompt, schema)
        return answer.value

    async def _ask_answer(
        self, step: str, prompt: str, schema: type[M], *, top_logprobs: int = 0
    ) -> JudgeAnswer[M]:
        """:meth:`_ask` returning the whole answer, with the token log-probabilities when
        ``top_logprobs`` > 0 and the judge offers them."""
        # every prompt states that the case text in it, quoted, is data (judges.quoting)
        answer = await self.model.a_generate_answer(
            with_data_rule(prompt), schema, top_logprobs=top_logprobs
        )
        usage = answer.usage
        self.judge_calls += int(getattr(usage, "calls", 1) or 0)
        self.input_tokens += int(getattr(usage, "input_tokens", 0) or 0)
        self.output_tokens += int(getattr(usage, "output_tokens", 0) or 0)
        cost = getattr(usage, "cost", None)
        if cost is not None:
            self.evaluation_cost = (self.evaluation_cost or 0.0) + float(cost)
        self._log(step, answer.value.model_dump_json(indent=2))
        return answer

    async def _gather(self, *aws: Awaitable[T]) -> list[T]:
        """Concurrently with ``async_mode`` (the default), one after another without it."""
        if self.async_mode:
            return list(await asyncio.gather(*aws))
        return [await aw for aw in aws]

    def _log(self, step: str, text: str) -> None:
        self._log_steps.append(f"{step}:\n{text}")

    # ------------------------------------------------------------------ internals
    @property
    def verbose_logs(self) -> str | None:
        """Intermediate steps of the last run (kept whether or not ``verbose_mode`` is on)."""
        if not self._log_steps:
            return None
        bar = "*" * 50
        body = "\n\n".join(self._log_steps)
        return f"{bar}\n{self.display_name} Verbose Logs\n{bar}\n\n{body}\n{'=' * 70}"

    def _apply_strict(self, score: float) -> float:
        if not self.strict_mode:
            return score
        if self.higher_is_better:
            return 0.0 if score < self.threshold else score
        return 1.0 if score > self.threshold else score

    def _reset(self) -> None:
        self._clear_outcome()
        self.evaluation_cost = None
        self.input_tokens = 0
        self.output_tokens = 0
        self.judge_calls = 0
        self._log_steps: list[str] = []
        self._reset_intermediate()


def _has_content(items: list[Any]) -> bool:
    return any((str(item).strip() if item is not None else "") for item in items)
