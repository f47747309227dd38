"""The metrics (Faithfulness, Bias, Topic Adherence, G-Eval for criteria of your own), the
engine they share, and deterministic checks of an agent's trajectory (no judge)."""

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
from spanjudge.evaluators.metrics.trajectory_checks import (
    RepeatedCallCheck,
    StepLimitCheck,
    ToolErrorCheck,
    TrajectoryCheck,
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
    "RepeatedCallCheck",
    "StepLimitCheck",
    "ToolErrorCheck",
    "TopicAdherenceMetric",
    "TopicAdherenceTemplate",
    "TrajectoryCheck",
    "steps_cache",
    "truth_cache",
]
