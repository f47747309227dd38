"""deepeval metrics as spanjudge rules, judged through spanjudge's own engine.

Two pieces, both needing the optional extra ``spanjudge[deepeval]`` (deepeval is imported inside
them, never when ``spanjudge.evaluators`` is imported):

* :func:`as_deepeval_model` turns a spanjudge judge into deepeval's custom-model interface
  (``DeepEvalBaseLLM``), so a deepeval metric's judge calls go through our retries, JSON
  repair, concurrency slots and usage accounting;
* :class:`DeepEvalMetric` gives any deepeval ``BaseMetric`` / ``BaseConversationalMetric`` the
  shape of our metrics. :class:`~spanjudge.evaluators.online.Rule` wraps one automatically, so
  it runs in the online loop like ours: sampling, budgets, leases, exactly-once delivery.

Example::

    from deepeval.metrics import AnswerRelevancyMetric
    from spanjudge.evaluators import Rule, as_deepeval_model
    from spanjudge.evaluators.judges import LiteLLMJudge

    judge = LiteLLMJudge("gpt-4o-mini")
    rule = Rule(AnswerRelevancyMetric(threshold=0.7, model=as_deepeval_model(judge)),
                target="agent", sample_rate=0.1)
"""

from __future__ import annotations

import copy
import functools
import inspect
import logging
import re
import time
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from spanjudge.evaluators.metrics.base import (
    EVALUATION_ERROR,
    MISSING_FIELD,
    MetricData,
    MetricError,
    _judge_error_type,
)
from spanjudge.evaluators.metrics.identity import EXECUTION_ONLY, class_digest, identity_value
from spanjudge.evaluators.test_case import ConversationalTestCase, LLMTestCase, ToolCall

logger = logging.getLogger("spanjudge.deepeval")

NAME_PREFIX = "deepeval_"
"""Prefix of a wrapped metric's name: deepeval's Bias scores the other way round from ours,
so the two must never share a name on spans, events and Prometheus series."""

# Attributes a deepeval metric sets while measuring: results, never configuration.
_STATE = frozenset(
    {"score", "reason", "success", "error", "evaluation_cost", "input_tokens", "output_tokens",
     "verbose_logs", "verdicts", "skipped", "confidence", "score_breakdown", "evaluation_model",
     "using_native_model", "system_one_fallback_reason", "flaky"}
)  # fmt: skip


class TextAnswer(BaseModel):
    """What the judge is asked for when deepeval wants free text (it passed no schema)."""

    text: str


# ---------------------------------------------------------------------------- judge usage
@dataclass
class _Spend:
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float | None = None
    calls: int = 0

    def add(self, usage: Any) -> None:
        self.calls += int(getattr(usage, "calls", 1) or 0)
        self.input_tokens += int(getattr(usage, "input_tokens", 0) or 0)
        self.output_tokens += int(getattr(usage, "output_tokens", 0) or 0)
        cost = getattr(usage, "cost", None)
        if cost is not None:
            self.cost = (self.cost or 0.0) + float(cost)


# The evaluation in progress in this task; deepeval's own sub-tasks inherit it (they copy the
# context), so the concurrent judge calls of one measurement all count towards it.
_SPEND: ContextVar[_Spend | None] = ContextVar("spanjudge_deepeval_spend", default=None)


def _count(usage: Any) -> None:
    spend = _SPEND.get()
    if spend is not None:
        spend.add(usage)


@functools.cache
def _model_class() -> type[Any]:
    from deepeval.models import DeepEvalBaseLLM

    class SpanjudgeJudgeModel(DeepEvalBaseLLM):  # type: ignore[no-untyped-call]
        """deepeval's custom-model interface over a spanjudge judge."""

        def __init__(self, judge: Any) -> None:
            # deepeval's __init__ parses a model string and loads a client; we hold a judge
            self.judge = judge
            self.judge_name = str(judge.get_model_name())
            self.name = self.judge_name
            self.model = judge

        def load_model(self, *args: Any, **kwargs: Any) -> Any:
            return self.judge

        def get_model_name(self, *args: Any, **kwargs: Any) -> str:
            return self.judge_name

        def generate(self, prompt: Any, schema: type[BaseModel] | None = None, **_: Any) -> Any:
            obj, usage = self.judge.generate(str(prompt), schema or TextAnswer)
            _count(usage)
            return obj if schema is not None else obj.text

        async def a_generate(
            self, prompt: Any, schema: type[BaseModel] | None = None, **_: Any
        ) -> Any:
            obj, usage = await self.judge.a_generate(str(prompt), schema or TextAnswer)
            _count(usage)
            return obj if schema is not None else obj.text

        def __repr__(self) -> str:
            return f"as_deepeval_model({self.judge!r})"

    return SpanjudgeJudgeModel


def as_deepeval_model(judge: Any = None) -> Any:
    """A deepeval ``DeepEvalBaseLLM`` whose calls go through ``judge`` (a :class:`Judge`, a
    litellm model string, or None for the default judge).

    With a schema the judge's validated object is returned; without one (deepeval wants free
    text) the judge is asked for ``{"text": ...}`` (schema ``TextAnswer``) and the text is
    returned. Tokens, cost and calls count towards the :class:`DeepEvalMetric` being measured::

        metric = BiasMetric(model=as_deepeval_model("gpt-4o-mini"))
    """
    from spanjudge.evaluators.judges import resolve_judge

    return _model_class()(resolve_judge(judge))


# ---------------------------------------------------------------------------- recognising
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


# ---------------------------------------------------------------------------- test cases
def _tool(call: ToolCall) -> Any:
    from deepeval.test_case import ToolCall as DeepEvalToolCall

    return DeepEvalToolCall(
        name=call.name,
        input_parameters=call.input_parameters,
        output=call.output,
        description=call.description,
        reasoning=call.reasoning,
    )


def _tools(calls: list[ToolCall] | None) -> list[Any] | None:
    return None if calls is None else [_tool(c) for c in calls]


def to_deepeval_case(case: LLMTestCase | ConversationalTestCase) -> Any:
    """Our (rebuilt) test case as deepeval's ``LLMTestCase`` / ``ConversationalTestCase``."""
    from deepeval import test_case as de

    if isinstance(case, ConversationalTestCase):
        turns = [
            de.Turn(
                role=t.role,
                content=t.content,
                retrieval_context=t.retrieval_context,
                tools_called=_tools(t.tools_called),
                metadata=t.metadata,
            )
            for t in case.turns
        ]
        return de.ConversationalTestCase(
            turns=turns,
            scenario=case.scenario,
            chatbot_role=case.chatbot_role,
            name=case.name,
            metadata=case.metadata,
        )
    return de.LLMTestCase(
        input=case.input,
        actual_output=case.actual_output,
        expected_output=case.expected_output,
        context=case.context,
        retrieval_context=case.retrieval_context,
        tools_called=_tools(case.tools_called),
        expected_tools=_tools(case.expected_tools),
        metadata=case.metadata,
        name=case.name,
    )


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
class DeepEvalMetric:
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

    # results of the last run (deepeval's and our metrics' attribute names)
    score: float | None
    success: bool | None
    reason: str | None
    error: str | None
    error_type: str | None
    duration_seconds: float | None

    def __init__(self, metric: Any, *, name: str | None = None) -> None:
        kind = deepeval_kind(metric)
        if kind is None:
            raise TypeError(
                "DeepEvalMetric needs a deepeval BaseMetric or BaseConversationalMetric, "
                f"got {type(metric).__name__}"
            )
        threshold = getattr(metric, "threshold", None)
        if isinstance(threshold, bool) or not isinstance(threshold, (int, float)):
            raise ValueError(
                f"deepeval metric {type(metric).__name__} has no numeric threshold "
                f"(got {threshold!r}); give it one, e.g. threshold=0.5"
            )
        self.metric = metric
        self.conversational = kind == "conversational"
        self.name = name or default_name(metric)
        self.threshold = float(threshold)
        self.strict_mode = bool(getattr(metric, "strict_mode", False))
        self.required_fields = _required(metric, self.conversational)
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
        return DeepEvalMetric(fresh_copy(self.metric), name=self.name)

    def missing_fields(self, test_case: Any) -> list[str]:
        """Required fields the case lacks (a case of the other kind lacks all of them)."""
        expected = ConversationalTestCase if self.conversational else LLMTestCase
        if not isinstance(test_case, expected):
            return list(self.required_fields)
        missing = []
        for field in self.required_fields:
            if field in ("role", "content") and self.conversational:
                continue
            holders = test_case.turns if self.conversational else [test_case]
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

        cls = type(self.metric)
        wanted = set(_parameters(cls.__init__)) - EXECUTION_ONLY - _STATE
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
        spend = _Spend()
        token = _SPEND.set(spend)
        started = time.perf_counter()
        metric = self.metric
        try:
            case = to_deepeval_case(test_case)
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
            value = float(score)
            self.score = value
            success = getattr(metric, "success", None)
            self.success = bool(success) if success is not None else self.score >= self.threshold
            reason = getattr(metric, "reason", None)
            self.reason = str(reason) if reason is not None else None
            return value
        except Exception as exc:
            self.score, self.success, self.reason = None, False, None
            missing = type(exc).__name__ == "MissingTestCaseParamsError"
            self.error_type = (
                MISSING_FIELD if missing else _judge_error_type(exc) or EVALUATION_ERROR
            )
            self.error = f"{type(exc).__name__}: {exc}"
            raise MetricError(self.name, self.error_type, self.error) from exc
        finally:
            _SPEND.reset(token)
            self._spend = spend
            self.duration_seconds = time.perf_counter() - started

    def measure(self, test_case: Any, *args: Any, **kwargs: Any) -> float:
        """Sync :meth:`a_measure` (safe inside a running event loop)."""
        from spanjudge.evaluators.metrics.base import run_sync

        return run_sync(self.a_measure(test_case))

    @property
    def verbose_logs(self) -> str | None:
        """deepeval's verbose logs of the last run."""
        logs = getattr(self.metric, "verbose_logs", None)
        return str(logs) if logs else None

    def to_data(self) -> MetricData:
        """The last result; usage from our judge, or deepeval's own figures when the metric
        judged with a model of its own."""
        spend = self._spend
        metric = self.metric
        if spend.calls:
            cost, tokens_in, tokens_out = spend.cost, spend.input_tokens, spend.output_tokens
        else:
            cost = getattr(metric, "evaluation_cost", None)
            tokens_in = int(getattr(metric, "input_tokens", 0) or 0)
            tokens_out = int(getattr(metric, "output_tokens", 0) or 0)
        verdicts = getattr(metric, "verdicts", None)
        found = [_verdict_dict(v) for v in verdicts] if isinstance(verdicts, list) else []
        return MetricData(
            name=self.name,
            score=self.score,
            threshold=self.threshold,
            success=self.success,
            reason=self.reason,
            error=self.error,
            error_type=self.error_type,
            strict_mode=self.strict_mode,
            judge_model=str(getattr(metric, "evaluation_model", None) or self.evaluation_model),
            evaluation_cost=float(cost) if cost is not None else None,
            input_tokens=tokens_in,
            output_tokens=tokens_out,
            judge_calls=spend.calls,
            verdicts=[v for v in found if v is not None],
            duration_seconds=self.duration_seconds,
        )

    def _reset(self) -> None:
        self.score = None
        self.success = None
        self.reason = None
        self.error = None
        self.error_type = None
        self.duration_seconds = None
        self._spend = _Spend()


def _parameters(func: Any) -> list[str]:
    try:
        return list(inspect.signature(func).parameters)
    except (TypeError, ValueError):
        return []
