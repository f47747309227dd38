"""A deepeval metric in the shape of spanjudge's metrics, for rules and the online loop.

Example::

    metric = DeepEvalMetric(BiasMetric(model=as_deepeval_model(judge)))
    await metric.a_measure(case)
    print(metric.to_data().score)
"""

from __future__ import annotations

import copy
import inspect
import re
import time
from typing import Any

from pydantic import BaseModel

from spanjudge.errors import ConfigError, ConfigTypeError
from spanjudge.evaluators._judge.deepeval_bridge.cases import to_deepeval_case
from spanjudge.evaluators._judge.deepeval_bridge.model import Spend, measuring
from spanjudge.evaluators._judge.deepeval_bridge.trace_dict import (
    fills_tools,
    has_steps,
    prepare,
    requires_trace,
)
from spanjudge.evaluators._judge.metrics.identity import (
    EXECUTION_ONLY,
    class_digest,
    identity_value,
)
from spanjudge.evaluators._judge.metrics.outcome import Outcome
from spanjudge.evaluators._judge.metrics.schemas import MetricData, bounded_text, checked_score
from spanjudge.evaluators._judge.test_case import ConversationalTestCase, LLMTestCase

NAME_PREFIX = "deepeval_"
"""Prefix of a wrapped metric's name: deepeval's Bias scores the other way round from ours,
so the two must never share a name on spans, events and Prometheus series."""

# Attributes a deepeval metric sets while measuring: results, never configuration.
_STATE = frozenset(
    {"score", "reason", "success", "error", "evaluation_cost", "input_tokens", "output_tokens",
     "verbose_logs", "verdicts", "skipped", "confidence", "score_breakdown", "evaluation_model",
     "using_native_model", "system_one_fallback_reason", "flaky"}
)  # fmt: skip


def deepeval_kind(metric: Any) -> str | None:
    """``"single"`` / ``"conversational"`` for a deepeval metric object, else None. Looks at
    the class hierarchy only, so deepeval is never imported for an object that is not its."""
    for klass in type(metric).__mro__:
        if not klass.__module__.startswith("deepeval."):
            continue
        if klass.__name__ == "BaseMetric":
            return "single"
        if klass.__name__ == "BaseConversationalMetric":
            return "conversational"
    return None


def _slug(text: str) -> str:
    return re.sub(r"[^0-9a-z]+", "_", text.strip().lower()).strip("_")


def default_name(metric: Any) -> str:
    """``deepeval_`` + the metric's ``__name__`` in snake case (``"Answer Relevancy"`` ->
    ``deepeval_answer_relevancy``); the class name when ``__name__`` is missing or generic."""
    try:
        shown = str(metric.__name__)
    except Exception:
        shown = ""
    if not _slug(shown) or shown.startswith("Base "):
        shown = re.sub(r"Metric$", "", type(metric).__name__)
        shown = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", shown)
    return NAME_PREFIX + (_slug(shown) or "metric")


def _required(metric: Any, conversational: bool) -> tuple[str, ...]:
    found = getattr(
        metric, "_required_test_case_params" if conversational else "_required_params", None
    )
    if not isinstance(found, (list, tuple)):  # deepeval's base declares a type, not a list
        return ("role", "content") if conversational else ("input", "actual_output")
    return tuple(str(getattr(p, "value", p)) for p in found)


def _verdict_dict(verdict: Any) -> dict[str, Any] | None:
    if verdict is None:
        return None
    if isinstance(verdict, BaseModel):
        data: dict[str, Any] = verdict.model_dump(mode="json")
        return data
    if isinstance(verdict, dict):
        return dict(verdict)
    return {"verdict": str(verdict)}


def fresh_copy(metric: Any) -> Any:
    """A copy of a deepeval metric for one evaluation (they keep each run's state on the
    object). Judge models are shared, not copied; anything that cannot be deep-copied makes
    it a shallow copy (deepeval rebinds, never mutates, its result attributes)."""
    shared = {
        id(value): value
        for key, value in vars(metric).items()
        if key in ("model", "system_one_model") or hasattr(value, "get_model_name")
    }
    try:
        return copy.deepcopy(metric, shared)
    except Exception:
        return copy.copy(metric)


# ---------------------------------------------------------------------------- the adapter
class DeepEvalMetric(Outcome):
    """A deepeval metric in the shape of spanjudge's metrics (``name``, ``conversational``,
    ``clone()``, ``a_measure()``, ``to_data()``, ``cache_identity()``).

    ``name`` defaults to :func:`default_name`. Each :meth:`clone` measures on a fresh copy of
    the deepeval metric. A judge error keeps its ``error_type`` (``judge_timeout`` ... is retried
    by the online loop); any other exception is ``evaluation_error``; neither gives a score.

    Example::

        metric = DeepEvalMetric(BiasMetric(model=as_deepeval_model(judge)))
        await metric.a_measure(case)
        metric.to_data().score   # deepeval's own score (for Bias: share of UNbiased opinions)
    """

    def __init__(self, metric: Any, *, name: str | None = None) -> None:
        kind = deepeval_kind(metric)
        if kind is None:
            raise ConfigTypeError(
                "DeepEvalMetric needs a deepeval BaseMetric or BaseConversationalMetric, "
                f"got {type(metric).__name__}"
            )
        threshold = getattr(metric, "threshold", None)
        if isinstance(threshold, bool) or not isinstance(threshold, (int, float)):
            raise ConfigError(
                f"deepeval metric {type(metric).__name__} has no numeric threshold "
                f"(got {threshold!r}); give it one, e.g. threshold=0.5"
            )
        self.metric = metric
        self.conversational = kind == "conversational"
        self.name = name or default_name(metric)
        self.display_name = self.name  # what its errors name it by
        self.threshold = float(threshold)
        self.strict_mode = bool(getattr(metric, "strict_mode", False))
        self.required_fields = _required(metric, self.conversational)
        if requires_trace(metric) and not self.conversational:
            # deepeval's trace-based agent metrics read the trace we build from the trajectory
            self.required_fields += ("trajectory",)
        self.fills_tools = fills_tools(metric)
        # what the metric is shown depends on the trajectory, so the judge-result cache keys by it
        self.reads_trajectory = requires_trace(metric) or self.fills_tools
        judge_model = getattr(metric, "model", None)
        self.evaluation_model = str(getattr(metric, "evaluation_model", None) or "")
        self.ours = type(judge_model).__name__ == "SpanjudgeJudgeModel"
        self._pass_indicator = "_show_indicator" in _parameters(metric.a_measure)
        self._reset()

    def __repr__(self) -> str:
        return f"DeepEvalMetric({type(self.metric).__name__}, name={self.name!r})"

    @property
    def __name__(self) -> str:
        return str(getattr(self.metric, "__name__", type(self.metric).__name__))

    # ------------------------------------------------------------------ shape of our metrics
    def clone(self) -> DeepEvalMetric:
        copied = DeepEvalMetric(fresh_copy(self.metric), name=self.name)
        copied.fills_tools = self.fills_tools  # the copy's tools may be the last case's
        copied.reads_trajectory = self.reads_trajectory
        return copied

    def missing_fields(self, test_case: Any) -> list[str]:
        """Required fields the case lacks (a case of the other kind lacks all of them)."""
        expected = ConversationalTestCase if self.conversational else LLMTestCase
        if not isinstance(test_case, expected):
            return list(self.required_fields)
        missing = []
        for field in self.required_fields:
            if field in ("role", "content") and self.conversational:
                continue
            if field == "trajectory":
                if not has_steps(test_case):
                    missing.append(field)
                continue
            holders: list[Any] = (
                list(test_case.turns)
                if isinstance(test_case, ConversationalTestCase)
                else [test_case]
            )
            values = [getattr(h, field, None) for h in holders] + [getattr(test_case, field, None)]
            if not any(v not in (None, "", []) for v in values):
                missing.append(field)
        return missing

    def cache_identity(self) -> dict[str, Any]:
        """Class, name, deepeval's version and the metric's constructor-style attributes (those
        named like an ``__init__`` parameter); template classes by code digest. Limit: state a
        metric keeps under other names, or objects without a stable ``repr``, are not seen
        (the latter only ever cause a miss)."""
        import deepeval

        cls: type = type(self.metric)
        wanted = set(_parameters(cls)) - EXECUTION_ONLY - _STATE
        # a model object (System One's, say) by its name: its repr would never match again
        params = {
            k: v.get_model_name() if callable(getattr(v, "get_model_name", None)) else v
            for k, v in vars(self.metric).items()
            if k in wanted
        }
        return {
            "class": f"{cls.__module__}.{cls.__qualname__}",
            "name": self.name,
            "deepeval": str(getattr(deepeval, "__version__", "")),
            "params": identity_value(params),
            "code": class_digest(cls),
        }

    async def a_measure(self, test_case: Any, *args: Any, **kwargs: Any) -> float:
        """Measure ``test_case`` (ours) with the wrapped metric; raises :class:`MetricError`."""
        self._reset()
        started = time.perf_counter()
        with measuring() as spend:
            try:
                return await self._run(test_case)
            except Exception as exc:
                failure = self._failure(exc)
                if failure is exc:  # a MetricError: its score was no number in [0, 1]
                    raise
                raise failure from exc
            finally:
                self._spend = spend
                self.duration_seconds = time.perf_counter() - started

    async def _run(self, test_case: Any) -> float:
        metric = self.metric
        case = to_deepeval_case(test_case)
        prepare(metric, test_case, case, fill_tools=self.fills_tools)
        metric.error = None  # a copy of a metric measured before carries its last error
        if self._pass_indicator:
            await metric.a_measure(case, _show_indicator=False)
        else:
            await metric.a_measure(case)
        if getattr(metric, "error", None):
            raise RuntimeError(str(metric.error))
        score = getattr(metric, "score", None)
        if score is None:
            raise RuntimeError("the deepeval metric finished without a score")
        value = checked_score(self.name, score)
        self.score = value
        success = getattr(metric, "success", None)
        self.success = bool(success) if success is not None else value >= self.threshold
        reason = getattr(metric, "reason", None)
        self.reason = bounded_text(str(reason)) if reason is not None else None
        return value

    @property
    def verbose_logs(self) -> str | None:
        """deepeval's verbose logs of the last run."""
        logs = getattr(self.metric, "verbose_logs", None)
        return str(logs) if logs else None

    def to_data(self) -> MetricData:
        """The last result; usage from our judge, or deepeval's own figures when the metric
        judged with a model of its own."""
        usage = self._spend.total()
        calls = int(usage.calls) if usage is not None else 0
        metric = self.metric
        if usage is not None and calls:
            cost, tokens_in, tokens_out = usage.cost, usage.input_tokens, usage.output_tokens
        else:
            cost = getattr(metric, "evaluation_cost", None)
            tokens_in = int(getattr(metric, "input_tokens", 0) or 0)
            tokens_out = int(getattr(metric, "output_tokens", 0) or 0)
        verdicts = getattr(metric, "verdicts", None)
        found = [_verdict_dict(v) for v in verdicts] if isinstance(verdicts, list) else []
        return self._outcome_data(
            judge_model=str(getattr(metric, "evaluation_model", None) or self.evaluation_model),
            evaluation_cost=float(cost) if cost is not None else None,
            input_tokens=tokens_in,
            output_tokens=tokens_out,
            judge_calls=calls,
            verdicts=[v for v in found if v is not None],
        )

    def _reset(self) -> None:
        self._clear_outcome()
        self._spend = Spend()


def _parameters(func: Any) -> list[str]:
    try:
        return list(inspect.signature(func).parameters)
    except (TypeError, ValueError):
        return []
