"""Judges: a prompt and a pydantic schema in, a validated object and token usage out.

``resolve_judge(model)`` turns what users pass as ``model=`` into a :class:`Judge`: ``None`` ->
``LiteLLMJudge("gpt-4o")``, a string -> ``LiteLLMJudge(string)``, a judge -> itself, an object
with deepeval's custom-model interface -> :class:`DeepEvalModelJudge` around it.
"""

from __future__ import annotations

from typing import Any

from spanjudge.errors import ConfigTypeError
from spanjudge.evaluators._judge.judges.base import Judge
from spanjudge.evaluators._judge.judges.custom import DeepEvalModelJudge
from spanjudge.evaluators._judge.judges.litellm_judge import DEFAULT_MODEL, LiteLLMJudge


def resolve_judge(model: Any = None) -> Judge:
    if model is None:
        return LiteLLMJudge(DEFAULT_MODEL)
    if isinstance(model, Judge):
        return model
    if isinstance(model, str):
        return LiteLLMJudge(model)
    if callable(getattr(model, "generate", None)) and callable(
        getattr(model, "get_model_name", None)
    ):
        return DeepEvalModelJudge(model)
    raise ConfigTypeError(
        "model must be a litellm model string, a Judge, or an object with deepeval's "
        f"custom-model interface (generate, a_generate, get_model_name); got {type(model).__name__}"
    )
