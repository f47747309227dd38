"""The metrics (Faithfulness, Bias, Topic Adherence, G-Eval for criteria of your own) and the
engine they share."""

from spanjudge.evaluators.metrics.base import (
    BaseMetric,
    MetricError,
    MissingFieldError,
)
from spanjudge.evaluators.metrics.bias import BiasMetric, BiasTemplate
from spanjudge.evaluators.metrics.faithfulness import (
    FaithfulnessMetric,
    FaithfulnessTemplate,
    truth_cache,
)
from spanjudge.evaluators.metrics.geval import GEval, GEvalTemplate
from spanjudge.evaluators.metrics.geval_conversation import (
    ConversationalGEval,
    ConversationalGEvalTemplate,
)
from spanjudge.evaluators.metrics.geval_steps import steps_cache
from spanjudge.evaluators.metrics.schemas import MetricData
from spanjudge.evaluators.metrics.topic_adherence import (
    TopicAdherenceMetric,
    TopicAdherenceTemplate,
)

__all__ = [
    "BaseMetric",
    "BiasMetric",
    "BiasTemplate",
    "ConversationalGEval",
    "ConversationalGEvalTemplate",
    "FaithfulnessMetric",
    "FaithfulnessTemplate",
    "GEval",
    "GEvalTemplate",
    "MetricData",
    "MetricError",
    "MissingFieldError",
    "TopicAdherenceMetric",
    "TopicAdherenceTemplate",
    "steps_cache",
    "truth_cache",
]
