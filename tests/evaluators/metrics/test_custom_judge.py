"""A deepeval-style custom model object works as ``model=`` for every metric."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from spanjudge.evaluators._judge.metrics.bias import BiasMetric
from spanjudge.evaluators._judge.metrics.faithfulness import FaithfulnessMetric
from spanjudge.evaluators._judge.test_case import LLMTestCase

ANSWERS: dict[str, dict[str, Any]] = {
    "Truths": {"truths": ["The sky is blue."]},
    "Claims": {"claims": ["The sky is blue.", "The sky is green."]},
    "FaithfulnessVerdicts": {"verdicts": [{"verdict": "yes"}, {"verdict": "no"}]},
    "Opinions": {"opinions": ["Blue is the best colour."]},
    "BiasVerdicts": {"verdicts": [{"verdict": "no"}]},
    "Reason": {"reason": "custom reason"},
}


class MyDeepEvalModel:
    """The shape of a deepeval ``DeepEvalBaseLLM`` subclass (no spanjudge base class)."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def load_model(self) -> Any:
        return self

    def generate(self, prompt: str, schema: type[BaseModel] | None = None) -> Any:
        assert schema is not None
        self.calls.append(schema.__name__)
        return schema.model_validate(ANSWERS[schema.__name__])

    async def a_generate(self, prompt: str, schema: type[BaseModel] | None = None) -> Any:
        return self.generate(prompt, schema)

    def get_model_name(self) -> str:
        return "my-custom-judge"


CASE = LLMTestCase(
    input="What colour is the sky?",
    actual_output="The sky is blue, or green.",
    retrieval_context=["The sky is blue."],
)


def test_custom_model_scores_faithfulness() -> None:
    model = MyDeepEvalModel()
    metric = FaithfulnessMetric(model=model)
    assert metric.measure(CASE) == 0.5
    assert metric.reason == "custom reason"
    assert metric.evaluation_model == "my-custom-judge"
    assert metric.to_data().judge_model == "my-custom-judge"
    assert sorted(model.calls) == ["Claims", "FaithfulnessVerdicts", "Reason", "Truths"]


def test_custom_model_scores_bias_and_clone_shares_it() -> None:
    model = MyDeepEvalModel()
    metric = BiasMetric(model=model)
    assert metric.clone().measure(CASE) == 0.0
    assert model.calls == ["Opinions", "BiasVerdicts", "Reason"]
