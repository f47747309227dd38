"""Judges built from objects with deepeval's custom-model interface.

::

    judge = DeepEvalModelJudge(MyDeepEvalModel())
    metric = FaithfulnessMetric(model=judge)
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import BaseModel

from spanjudge.errors import JudgeError
from spanjudge.evaluators._judge.judges.base import Judge, Messages, Usage


class DeepEvalModelJudge(Judge):
    """Wraps an object with deepeval's custom-model interface (``generate(prompt, schema=None)``,
    ``a_generate``, ``get_model_name``), so existing custom judges carry over.

    Its answers may be a pydantic object, a string (parsed and repaired like any judge), or a
    ``(answer, cost)`` tuple; its transport errors surface as :class:`JudgeError`.
    """

    def __init__(self, model: Any, **options: Any) -> None:
        super().__init__(**options)
        self.model = model
        try:
            self.model_name = str(model.get_model_name())
        except Exception:
            self.model_name = type(model).__name__

    @staticmethod
    def _unpack(answer: Any) -> tuple[Any, float | None]:
        if isinstance(answer, tuple) and len(answer) == 2 and isinstance(answer[1], (int, float)):
            return answer[0], float(answer[1])
        return answer, None

    def _to_text(self, answer: Any, schema: type[BaseModel]) -> tuple[str, Usage]:
        value, cost = self._unpack(answer)
        if isinstance(value, BaseModel):
            text = value.model_dump_json()
        elif isinstance(value, (dict, list)):
            text = json.dumps(value)
        else:
            text = str(value)
        return text, Usage(cost=cost, calls=1)

    def _call(self, fn: Callable[..., Any], prompt: str, schema: type[BaseModel]) -> Any:
        try:
            return fn(prompt, schema=schema)
        except TypeError:
            return fn(prompt)

    def _complete(self, messages: Messages, schema: type[BaseModel]) -> tuple[str, Usage]:
        prompt = "\n\n".join(m["content"] for m in messages)
        try:
            return self._to_text(self._call(self.model.generate, prompt, schema), schema)
        except JudgeError:
            raise
        except Exception as exc:
            raise JudgeError(f"custom judge {self.model_name} raised {type(exc).__name__}") from exc

    async def _a_complete(self, messages: Messages, schema: type[BaseModel]) -> tuple[str, Usage]:
        prompt = "\n\n".join(m["content"] for m in messages)
        a_generate = getattr(self.model, "a_generate", None)
        try:
            if a_generate is None:
                answer = await asyncio.to_thread(self._call, self.model.generate, prompt, schema)
            else:
                result = self._call(a_generate, prompt, schema)
                answer = await result if isinstance(result, Awaitable) else result
        except JudgeError:
            raise
        except Exception as exc:
            raise JudgeError(f"custom judge {self.model_name} raised {type(exc).__name__}") from exc
        return self._to_text(answer, schema)
