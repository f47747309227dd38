"""The three metrics (Faithfulness, Bias, Topic Adherence) and the engine they share."""

from spanjudge.evaluators.metrics.base import (
    BaseMetric,
    MetricData,
    MetricError,
    MissingFieldError,
)
from spanjudge.evaluators.metrics.bias import BiasMetric, BiasTemplate
from spanjudge.evaluators.metrics.faithfulness import (
    FaithfulnessMetric,
    FaithfulnessTemplate,
    truth_cache,
)
from spanjudge.evaluators.metrics.topic_adherence import (
    TopicAdherenceMetric,
    TopicAdherenceTemplate,
)

__all__ = [
    "BaseMetric",
    "BiasMetric",
    "BiasTemplate",
    "FaithfulnessMetric",
    "FaithfulnessTemplate",
    "MetricData",
    "MetricError",
    "MissingFieldError",
    "TopicAdherenceMetric",
    "TopicAdherenceTemplate",
    "truth_cache",
]
