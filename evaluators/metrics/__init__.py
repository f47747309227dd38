"""The metrics (Faithfulness, Bias, Topic Adherence, G-Eval for criteria of your own), the
engine they share, judged metrics of an agent's trajectory (Task Completion, Tool and Argument
Correctness, Step Efficiency, Plan Adherence and Quality, Goal Accuracy) and deterministic
checks of it (no judge)."""

from spanjudge.evaluators.metrics.argument_correctness import (
    ArgumentCorrectnessMetric,
    ArgumentCorrectnessTemplate,
)
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
from spanjudge.evaluators.metrics.goal_accuracy import GoalAccuracyMetric, GoalAccuracyTemplate
from spanjudge.evaluators.metrics.plan_metrics import (
    PlanAdherenceMetric,
    PlanAdherenceTemplate,
    PlanQualityMetric,
    PlanQualityTemplate,
)
from spanjudge.evaluators.metrics.schemas import MetricData
from spanjudge.evaluators.metrics.step_efficiency import (
    StepEfficiencyMetric,
    StepEfficiencyTemplate,
)
from spanjudge.evaluators.metrics.task_completion import (
    TaskCompletionMetric,
    TaskCompletionTemplate,
)
from spanjudge.evaluators.metrics.tool_correctness import (
    ToolCorrectnessMetric,
    ToolCorrectnessTemplate,
)
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
    "ArgumentCorrectnessMetric",
    "ArgumentCorrectnessTemplate",
    "BaseMetric",
    "BiasMetric",
    "BiasTemplate",
    "ConversationalGEval",
    "ConversationalGEvalTemplate",
    "FaithfulnessMetric",
    "FaithfulnessTemplate",
    "GEval",
    "GEvalTemplate",
    "GoalAccuracyMetric",
    "GoalAccuracyTemplate",
    "MetricData",
    "MetricError",
    "MissingFieldError",
    "PlanAdherenceMetric",
    "PlanAdherenceTemplate",
    "PlanQualityMetric",
    "PlanQualityTemplate",
    "RepeatedCallCheck",
    "StepEfficiencyMetric",
    "StepEfficiencyTemplate",
    "StepLimitCheck",
    "TaskCompletionMetric",
    "TaskCompletionTemplate",
    "ToolCorrectnessMetric",
    "ToolCorrectnessTemplate",
    "ToolErrorCheck",
    "TopicAdherenceMetric",
    "TopicAdherenceTemplate",
    "TrajectoryCheck",
    "steps_cache",
    "truth_cache",
]
