"""deepeval's custom-model interface over a spanjudge judge, and the usage it counts.

deepeval calls ``generate(prompt, schema=...)`` / ``a_generate``; the judge's engine answers
(retries, JSON repair, its concurrency slots). Each call's tokens and cost go to the evaluation
in progress in the calling task (:func:`measuring`), which :class:`DeepEvalMetric` reports.

Example::

    from spanjudge import as_deepeval_model
    from spanjudge.evaluators._judge.deepeval_bridge.model import measuring

    model = as_deepeval_model("gpt-4o-mini")   # a Judge, a litellm model string, or None
    with measuring() as spend:
        ...   # deepeval metrics measured here count their judge calls in spend
    print(spend.total())   # Usage(input_tokens=..., output_tokens=..., cost=..., calls=...)
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel


class TextAnswer(BaseModel):
    """What the judge is asked for when deepeval wants free text (it passed no schema)."""

    text: str


# ---------------------------------------------------------------------------- judge usage
@dataclass
class Spend:
    """The judge usage of one measurement: every call's ``Usage``, summed on demand (``Usage``
    adds up tokens, calls and cost, a cost staying None while no call was priced)."""

    usages: list[Any] = field(default_factory=list)

    def add(self, usage: Any) -> None:
        self.usages.append(usage)

    def total(self) -> Any:
        """The sum of the usages, or None when no call was made."""
        return functools.reduce(operator.add, self.usages) if self.usages else None


# The evaluation in progress in this task; deepeval's own sub-tasks inherit it (they copy the
# context), so the concurrent judge calls of one measurement all count towards it.
_SPEND: ContextVar[Spend | None] = ContextVar("spanjudge_deepeval_spend", default=None)


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
    from spanjudge.evaluators._judge.judges import resolve_judge

    return _model_class()(resolve_judge(judge))


@contextmanager
def measuring() -> Iterator[Spend]:
    """Count the judge calls made in this task (and the tasks it starts) until the block ends."""
    spend = Spend()
    token = _SPEND.set(spend)
    try:
        yield spend
    finally:
        _SPEND.reset(token)
