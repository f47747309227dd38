"""Evaluation rules: which metric runs on which targets, how often, within which budget."""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationInfo, field_validator

from spanjudge._core.checked_model import CheckedModel
from spanjudge._core.kinds import TargetType
from spanjudge._core.span_record import SpanRecord
from spanjudge.errors import ConfigError
from spanjudge.evaluators._plan.sampler import SampleBy
from spanjudge.evaluators._plan.trajectory_filter import TrajectoryFilter, trajectory_in
from spanjudge.evaluators._rebuild.scope import SpanTree
from spanjudge.evaluators._rebuild.targets import TARGET_TYPES, Target
from spanjudge.tracer import _attributes as attrs

SpanPredicate = Callable[[SpanRecord], bool]

logger = logging.getLogger("spanjudge.rules")
_UNSET: Any = object()  # an argument not given: pydantic's default (or "missing" error)


def _glob(pattern: str | None, value: str | None) -> bool:
    if pattern is None:
        return True
    return value is not None and fnmatchcase(value, pattern)


def _attr_equals(actual: Any, expected: Any) -> bool:
    if actual == expected:
        return True
    # config files give strings; spans may hold ints or bools for the same thing
    if isinstance(expected, str) and isinstance(actual, (int, float, bool)):
        return (
            str(actual).lower() == expected.lower()
            if isinstance(actual, bool)
            else str(actual) == expected
        )
    return False


@dataclass(slots=True)
class SpanFilter:
    """Conditions a target span must meet; every condition given must hold.

    ``span_name``, ``service``, ``agent`` (``gen_ai.agent.name``) and ``model``
    (``gen_ai.request.model`` or ``gen_ai.response.model``) are case-sensitive globs
    (``fnmatch``: ``*``, ``?``, ``[abc]``); a plain string matches itself exactly.
    ``attributes`` maps keys to the value they must equal; ``attributes_exist`` lists keys that
    must be present. ``trajectory``: a :class:`TrajectoryFilter` (or a dict of its keys) on what
    the target's agent did, read from the span tree.

    Example::

        SpanFilter(span_name="chat *", service="shop", attributes={"env": "prod"})
        SpanFilter.from_dict({"agent": "support-*", "attributes_exist": ["gen_ai.conversation.id"]})
    """

    span_name: str | None = None
    service: str | None = None
    agent: str | None = None
    model: str | None = None
    attributes: dict[str, Any] = field(default_factory=dict)
    attributes_exist: list[str] = field(default_factory=list)
    trajectory: TrajectoryFilter | None = None

    def __post_init__(self) -> None:
        for name in ("span_name", "service", "agent", "model"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise ConfigError(f"filter.{name} must be a string (glob), got {value!r}")
        if not isinstance(self.attributes, Mapping):
            raise ConfigError(
                f"filter.attributes must be a mapping of key -> value, got {self.attributes!r}"
            )
        self.attributes = dict(self.attributes)
        if isinstance(self.attributes_exist, str) or not all(
            isinstance(k, str) for k in self.attributes_exist
        ):
            raise ConfigError(
                "filter.attributes_exist must be a list of attribute keys, "
                f"got {self.attributes_exist!r}"
            )
        self.attributes_exist = list(self.attributes_exist)
        if isinstance(self.trajectory, Mapping):
            self.trajectory = TrajectoryFilter.from_dict(self.trajectory)
        elif self.trajectory is not None and not isinstance(self.trajectory, TrajectoryFilter):
            raise ConfigError(
                f"filter.trajectory must be a mapping of conditions, got {self.trajectory!r}"
            )

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SpanFilter:
        """Build from a config mapping with the same keys; unknown keys are an error."""
        if not isinstance(data, Mapping):
            raise ConfigError(f"filter must be a mapping, got {type(data).__name__}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(
                f"unknown filter key(s) {', '.join(map(repr, unknown))}; "
                f"known: {', '.join(sorted(known))}"
            )
        kwargs = {k: v for k, v in data.items() if v is not None}
        return cls(**kwargs)

    def matches(self, span: SpanRecord) -> bool:
        """Whether ``span`` meets every condition on the span itself (``trajectory`` is
        checked by :meth:`Rule.matches_span`, which has the tree)."""
        a = span.attributes
        if not _glob(self.span_name, span.name):
            return False
        if not _glob(self.service, span.service_name):
            return False
        if self.agent is not None:
            agent = a.get(attrs.GEN_AI_AGENT_NAME)
            if not _glob(self.agent, agent if isinstance(agent, str) else None):
                return False
        if self.model is not None:
            models = [a.get(attrs.GEN_AI_REQUEST_MODEL), a.get(attrs.GEN_AI_RESPONSE_MODEL)]
            if not any(isinstance(m, str) and fnmatchcase(m, self.model) for m in models):
                return False
        for key, expected in self.attributes.items():
            if key not in a or not _attr_equals(a[key], expected):
                return False
        return all(key in a for key in self.attributes_exist)


def _encodable(text: str) -> bool:
    """False for text with lone surrogates (UTF-8 cannot encode them)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _accepts_two_args(func: Callable[..., Any]) -> bool:
    """Whether a custom build_case takes (spans, target) rather than (spans)."""
    try:
        params = inspect.signature(func).parameters.values()
    except (TypeError, ValueError):
        return False
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= 2 or any(p.kind == p.VAR_POSITIONAL for p in params)


def _adapt(metric: Any) -> Any:
    """A deepeval metric wrapped in our metric shape (checked without importing deepeval)."""
    from spanjudge.evaluators._judge.deepeval_bridge.metric import DeepEvalMetric, deepeval_kind

    if deepeval_kind(metric) is None:
        return metric
    wrapped = DeepEvalMetric(metric)
    if not wrapped.ours:
        logger.warning(
            "deepeval metric %s judges with its own model %r, not a spanjudge judge: its calls "
            "bypass spanjudge's retries and concurrency limit (use model=as_deepeval_model(judge))",
            wrapped.name,
            wrapped.evaluation_model,
        )
    return wrapped


Positive = Annotated[float, Field(gt=0, allow_inf_nan=False, strict=True)]
Share = Annotated[float, Field(ge=0.0, le=1.0, strict=True)]
AttributeKey = Annotated[str, Field(min_length=1, strict=True)]


class RuleOptions(BaseModel):
    """What a rule says besides the metric it runs: declared once, for :class:`Rule` (Python)
    and for the worker file's ``[[rules]]`` tables
    (:class:`~spanjudge.rule_settings.RuleConfig`), with the same defaults and bounds. A bad
    value fails validation naming the field (``Rule(...)``: a
    :class:`~spanjudge.errors.ConfigError`; the worker's file: its key, ``rules.0.target``)."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    # what is scored: a metric object (Rule) or a metric's name (RuleConfig); declared here,
    # first, so the checks of the fields after it see it; kw_only=False: type checkers see
    # Rule(metric, target, sample_rate=..., ...) as the constructor, as the dataclass was
    metric: Any = Field(kw_only=False)
    target: TargetType = Field(
        default="llm",
        kw_only=False,
        description="What is evaluated: each llm or agent span, a whole trace, or the turns of "
        "a conversation.",
    )
    sample_rate: Share = Field(
        default=1.0, description="Share of targets evaluated (stable per target)."
    )
    # typed str: after validation it always is one (None picks <metric>-<target>)
    name: str = Field(  # type: ignore[assignment]
        default=None, description="The rule's stable id; unset: <metric>-<target>."
    )
    max_per_minute: int | None = Field(
        default=None, gt=0, strict=True,
        description="Budget: evaluations per minute; the rest is skipped.",
    )  # fmt: skip
    max_cost_per_day: Positive | None = Field(
        default=None, description="Budget: judge cost (USD) per day; the rest is skipped."
    )
    segment_keys: tuple[AttributeKey, ...] = Field(
        default=(), description="Span attributes its results are also grouped by."
    )
    budget_per_day: Positive | None = Field(
        default=None, description="Target: evaluations per day, spread over segments."
    )
    budget_cost_per_day: Positive | None = Field(
        default=None, description="Target: judge cost (USD) per day, spread over segments."
    )
    target_half_width: Positive | None = Field(
        default=None, lt=0.5, description="Target: pass-rate interval half-width per segment."
    )
    allocate_by: AttributeKey = Field(
        default="service", description="The segment key targets spread over."
    )
    risk_sample_rate: Share = Field(
        default=1.0, description="Under a target: least rate of a risky target."
    )
    risk_budget_share: Share = Field(
        default=0.2,
        description="Under a budget: the share of each day's budget that risk boosts (new "
        "versions, errors, fail labels) may spend; the rest is spread over segments. Past it a "
        "risky target is sampled at its segment's rate, and no day goes past the budget.",
    )
    sample_by: SampleBy = Field(
        default="target",
        description="What the sample decision is keyed on: target (a hash per rule), trace "
        "(OpenTelemetry consistent sampling, as a Collector or SDK sampler decides) or "
        "conversation (whole conversations).",
    )
    inferred_fields: bool = Field(
        default=True,
        strict=True,
        description="false: score only cases whose required fields a dialect read; skip those "
        "an inference rule filled (an inferred turn or retrieval, a generic model call).",
    )

    @field_validator("target", mode="before")
    @classmethod
    def _check_target(cls, value: Any) -> Any:
        if value not in TARGET_TYPES:  # named with the value: a mistyped target is no secret
            raise ValueError(f"must be one of {', '.join(TARGET_TYPES)}, got {value!r}")
        return value

    @field_validator("name", mode="plain")
    @classmethod
    def _check_name(cls, value: Any) -> str | None:
        if value is None:
            return None
        if not isinstance(value, str) or not value.strip():
            raise ValueError(f"must be a non-empty string, got {value!r}")
        if "\x00" in value or not _encodable(value):
            # the name is stored in job rows: a database could not keep it as written
            raise ValueError(f"must be valid text without NUL, got {value!r}")
        return value

    @field_validator("sample_by")
    @classmethod
    def _check_sample_by(cls, value: SampleBy, info: ValidationInfo) -> SampleBy:
        if value == "trace" and info.data.get("target") == "conversation":
            raise ValueError(
                "a conversation spans several traces, so target='conversation' cannot sample "
                "by trace; use sample_by='conversation' (or 'target')"
            )
        return value

    def options(self) -> dict[str, Any]:
        """The fields declared here, as keyword arguments of :class:`Rule`."""
        return {name: getattr(self, name) for name in RuleOptions.model_fields if name != "metric"}


RuleFilter = SpanFilter | TrajectoryFilter | Mapping[str, Any] | SpanPredicate | None


class Rule(CheckedModel, RuleOptions):
    """A metric, the targets it evaluates, a filter, a sample rate and optional budgets.

    * ``target``: ``"llm"`` or ``"agent"`` (each such span), ``"trace"`` (the root span, with
      the whole trace as context) or ``"conversation"`` (agent turns sharing
      ``gen_ai.conversation.id``). Conversational metrics take ``"conversation"`` only.
    * ``metric`` (the first argument): one of ours, or any deepeval ``BaseMetric`` /
      ``BaseConversationalMetric`` (wrapped in
      :class:`~spanjudge.evaluators._judge.deepeval_bridge.DeepEvalMetric`, named
      ``deepeval_<its name>``; give it ``model=as_deepeval_model(judge)``).
    * ``sample_rate``: share of targets evaluated, decided by a stable hash of (name, target id).
    * ``sample_by``: ``"target"`` (that hash), ``"trace"`` (OpenTelemetry's consistent sampling
      on the trace id: the traces a Collector or SDK sampler at the same rate keeps) or
      ``"conversation"`` (a hash of the conversation id: whole conversations kept). With a
      budget or precision target the allocated probability is compared the same way.
    * ``filter``: a :class:`SpanFilter`, a dict with its keys, a
      :class:`~spanjudge.evaluators._plan.trajectory_filter.TrajectoryFilter`, or
      ``callable(span) -> bool``; applied to the target span (trace: root span; conversation:
      any agent turn span), a trajectory filter to what the target's agent did.
    * ``max_per_minute`` / ``max_cost_per_day``: budgets; what they refuse is counted as skipped.
    * ``name``: stable id used for sampling, job rows and results;
      default ``"{metric.name}-{target}"``.
    * ``build_case``: ``callable(spans)`` or ``callable(spans, target)`` returning a test case,
      replacing the built-in rebuild.
    * ``context_fallback``: when the target's turn has no retrieved text, use the results of its
      tool calls, then the model's system instructions, as the retrieval context (the result
      records which: ``spanjudge.evaluation.context_source``); ``False`` skips instead.
    * ``inferred_fields``: ``True`` (the default) lets the reader's inference rules fill the
      case (a turn inferred from the tree, a retrieval recognised by what it returns, an agent's
      text taken from its model calls, a model call recognised by its messages); ``False``
      scores only cases whose required fields a dialect read, and skips the others naming the
      inferred field and the rule that found it.
    * ``segment_keys``: span (else resource) attributes its results are also grouped by.
    * ``budget_per_day`` (evaluations), ``budget_cost_per_day`` (judge USD) and
      ``target_half_width`` (of the 95% pass-rate interval over a day, per segment): a target
      instead of a rate. The sampler then gives each segment of ``allocate_by`` its own
      probability (:mod:`~spanjudge.evaluators._plan.allocation`); ``sample_rate`` is
      the probability of a segment it has not seen yet. A target showing a risk signal
      (:mod:`~spanjudge.evaluators._plan.risk`) is sampled with at least
      ``risk_sample_rate``, from ``risk_budget_share`` of the day's budget when there is one
      (never past the budget: ``budget_per_day`` is also a hard daily cap). The probability
      used is recorded on the result.

    The fields besides ``metric``, ``filter``, ``build_case`` and ``context_fallback`` are
    :class:`RuleOptions`', shared with the worker file's rules. A bad argument raises
    :class:`~spanjudge.errors.ConfigError` naming it (``Rule.sample_rate: Input should be
    less than or equal to 1 (got 2)``).

    Example::

        from spanjudge import FaithfulnessMetric, TopicAdherenceMetric

        rules = [
            Rule(FaithfulnessMetric(threshold=0.7), target="llm", sample_rate=0.1,
                 filter={"service": "shop", "span_name": "chat *"}, max_cost_per_day=5.0),
            Rule(TopicAdherenceMetric(relevant_topics=["orders"]), target="conversation"),
            Rule(FaithfulnessMetric(), target="llm", sample_rate=0.05, budget_per_day=2000,
                 target_half_width=0.05, allocate_by="service"),
        ]
    """

    filter: RuleFilter = None
    build_case: Callable[..., Any] | None = None
    context_fallback: bool = Field(default=True, strict=True)
    _build_case_takes_target: bool = PrivateAttr(default=False)

    if not TYPE_CHECKING:  # type checkers keep the signature pydantic derives

        def __init__(self, metric: Any = _UNSET, target: Any = _UNSET, **data: Any) -> None:
            for name, value in (("metric", metric), ("target", target)):
                if value is not _UNSET:
                    data[name] = value
            super().__init__(**data)

    @field_validator("metric")
    @classmethod
    def _check_metric(cls, value: Any) -> Any:
        metric = _adapt(value)
        metric_name = getattr(metric, "name", None)
        if not isinstance(metric_name, str) or not metric_name:
            raise ValueError(f"must be a metric with a non-empty .name, got {metric!r}")
        return metric

    @field_validator("target")
    @classmethod
    def _check_target_suits_metric(cls, target: TargetType, info: ValidationInfo) -> TargetType:
        metric = info.data.get("metric")
        if metric is None:  # the metric itself is wrong: its own error says so
            return target
        name = metric.name
        conversational = bool(getattr(metric, "conversational", False))
        if conversational and target != "conversation":
            raise ValueError(
                f"metric {name!r} is conversational and needs target='conversation', got {target!r}"
            )
        if not conversational and target == "conversation":
            raise ValueError(
                f"metric {name!r} scores single turns; target='conversation' needs a "
                "conversational metric (e.g. TopicAdherenceMetric)"
            )
        targets = getattr(metric, "targets", None)  # e.g. the judged agent metrics
        if targets and target not in targets:
            raise ValueError(
                f"metric {name!r} runs on target {' or '.join(repr(t) for t in targets)}, "
                f"got {target!r}"
            )
        return target

    @field_validator("filter", mode="plain")
    @classmethod
    def _check_filter(cls, value: Any) -> Any:
        if isinstance(value, Mapping):
            return SpanFilter.from_dict(value)  # its ConfigError is a ValueError
        if value is None or isinstance(value, SpanFilter | TrajectoryFilter) or callable(value):
            return value
        raise ValueError(
            "must be a SpanFilter, a TrajectoryFilter, a dict or a callable(span) -> bool, "
            f"got {value!r}"
        )

    def model_post_init(self, context: Any, /) -> None:
        if self.name is None:
            self.name = f"{self.metric.name}-{self.target}"
        if self.build_case is not None:
            self._build_case_takes_target = _accepts_two_args(self.build_case)

    @property
    def has_target(self) -> bool:
        """Whether the rule states a budget or a precision instead of a fixed rate."""
        return (
            self.budget_per_day is not None
            or self.budget_cost_per_day is not None
            or self.target_half_width is not None
        )

    # -------------------------------------------------------------- filtering
    def matches_span(self, span: SpanRecord, tree: SpanTree | None = None) -> bool:
        """Whether ``span`` passes the filter. A raising callable filter counts as no match:
        one odd span must not stop planning. ``tree``: the span tree of its trace, which a
        trajectory filter reads (without it, the trajectory is the span alone)."""
        flt = self.filter
        if flt is None:
            return True
        if isinstance(flt, TrajectoryFilter):
            return flt.matches(trajectory_in(tree, span))
        if isinstance(flt, SpanFilter):
            if not flt.matches(span):
                return False
            return flt.trajectory is None or flt.trajectory.matches(trajectory_in(tree, span))
        try:
            return bool(flt(span))  # type: ignore[operator]
        except Exception:
            return False

    def matches(self, target: Target, tree: SpanTree | None = None) -> bool:
        """Whether ``target`` passes the filter (conversation: any of its agent turn spans);
        ``tree`` as in :meth:`matches_span`."""
        if self.filter is None:
            return True
        spans = target.turn_spans or ((target.span,) if target.span is not None else ())
        return any(self.matches_span(span, tree) for span in spans)

    def call_build_case(self, spans: list[SpanRecord], target: Target) -> Any:
        """Call the custom ``build_case`` with the arguments it takes."""
        assert self.build_case is not None
        if self._build_case_takes_target:
            return self.build_case(spans, target)
        return self.build_case(spans)
