"""How the online loop runs: each setting declared once, with its default, bounds and meaning.

:class:`LoopSettings` holds the declarations. :class:`MonitorConfig` (the settings object of
:class:`~spanjudge.Monitor` and ``spanjudge.monitor()``) is exactly those
fields, frozen; the worker's :class:`~spanjudge.settings.WorkerSettings` inherits the same
fields and adds its own, so a file, ``SPANJUDGE_*`` variables and keyword arguments all meet
the same defaults and the same checks (``docs/reference/settings.md`` is generated from them).

Example::

    config = MonitorConfig(interval_seconds=10, settle_seconds=5, concurrency=4)
    mon = Monitor(rules, store="sqlite:///spanjudge.db", config=config)

A bad value raises :class:`~spanjudge.errors.ConfigError` (a ``ValueError``) in one line that
names the setting: ``MonitorConfig.concurrency: Input should be greater than or equal to 1
(got 0)``.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationInfo, field_validator

from spanjudge._core.checked_model import CheckedModel
from spanjudge.errors import ConfigError

__all__ = [
    "Count",
    "Flag",
    "LoopSettings",
    "MonitorConfig",
    "Number",
    "RegressionBaseline",
]


def _not_bool(value: Any) -> Any:
    # pydantic reads True as 1: a flag given where a number belongs is a mistake, not a 1
    if isinstance(value, bool):
        raise ConfigError("expected a number, not true/false")
    return value


def _bool_or_text(value: Any) -> Any:
    # true/false, or their text from the environment; 0 and 1 are not read as a flag
    if not isinstance(value, (bool, str)):
        raise ConfigError("expected true or false")
    return value


Number = Annotated[float, BeforeValidator(_not_bool), Field(allow_inf_nan=False)]
Count = Annotated[int, BeforeValidator(_not_bool)]
Flag = Annotated[bool, BeforeValidator(_bool_or_text)]

# Upper bounds of the times and counts below: far past any sensible value, and short of where
# the loop stops working unnoticed (settle_seconds = 1e308 never settles a trace, a 1e308 s
# interval overflows the scheduler's timedelta, a batch_size past 2**63 the SQL LIMIT).
HOUR = 3600.0
DAY = 86400.0
# max_settle_delay_seconds when unset, in settle_seconds: a busy trace waits at most this long.
SETTLE_DELAY_FACTOR = 6.0


class RegressionBaseline(CheckedModel):
    """The ``regression_baseline`` setting: a segment key and the baseline's value of it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    key: str = Field(min_length=1, max_length=200)
    value: str = Field(default="previous", min_length=1, max_length=200)


class LoopSettings(BaseModel):
    """Timing, concurrency and retry settings of the online loop (every time in seconds)."""

    model_config = ConfigDict(extra="forbid")

    # 5 s, as the worker always had and its docs say: a tick on a quiet store is a few queries,
    # and a longer one adds up to a whole interval to every evaluation's delay after settling.
    interval_seconds: Number = Field(
        default=5.0,
        gt=0,
        le=HOUR,
        description="Seconds between two ticks of the scheduler (plan, claim, run).",
    )
    settle_seconds: Number = Field(
        default=10.0,
        ge=0,
        le=DAY,
        description="A trace is evaluated once its root ended and no span arrived for this long.",
    )
    max_settle_delay_seconds: Number | None = Field(
        default=None,
        ge=0,
        le=DAY,
        description="A trace that never goes quiet (a span every second) is planned anyway once "
        "its first unplanned span has waited this long; what comes later is planned as a late "
        "arrival, and no target is judged twice. At least settle_seconds; null: "
        f"{SETTLE_DELAY_FACTOR:g} times settle_seconds.",
    )
    idle_seconds: Number = Field(
        default=300.0,
        ge=0,
        le=30 * DAY,
        description="A conversation is evaluated after this long without a new turn.",
    )
    concurrency: Count = Field(
        default=8, ge=1, le=1024, description="Evaluations that run at once."
    )
    batch_size: Count = Field(
        default=64,
        ge=1,
        le=10_000,
        description="The most jobs claimed at once; a claim never takes more than the free "
        "evaluation slots, so leased jobs do not wait behind others.",
    )
    lease_seconds: Number = Field(
        default=300.0,
        gt=0,
        le=DAY,
        description="How long a claimed job is this evaluator's before another may take it "
        "over (a crash costs at most this much delay); results older than this are re-sent.",
    )
    max_attempts: Count = Field(
        default=12,
        ge=1,
        le=1000,
        description="Attempts per job: transient judge failures (timeouts, 429, 5xx, "
        "connection errors) are retried in later ticks. With the default delays, 12 "
        "attempts span 32.5 minutes: a judge outage that long still ends in scores.",
    )
    retry_delay_seconds: Number = Field(
        default=30.0,
        ge=0,
        le=DAY,
        description="Attempt n of a job waits n times this long after the last, "
        "at most retry_max_delay_seconds.",
    )
    retry_max_delay_seconds: Number = Field(
        default=300.0,
        gt=0,
        le=DAY,
        description="The longest wait between two attempts of a job: attempt n waits "
        "n * retry_delay_seconds, up to this.",
    )
    retention_seconds: Number | None = Field(
        default=7 * 24 * 3600.0,
        gt=0,
        le=3650 * DAY,
        description="Stored spans older than this are deleted (null: kept for ever).",
    )
    flush_timeout_seconds: Number = Field(
        default=2.0,
        ge=0,
        le=HOUR,
        description="The longest a tick waits for the exporters to confirm results.",
    )
    judge_cache: Flag = Field(
        default=True,
        description="Reuse a scored result for the same metric (parameters, prompts), judge "
        "model and rebuilt case instead of calling the judge again.",
    )
    judge_cache_max_age_seconds: Number = Field(
        default=24 * 3600.0,
        gt=0,
        le=365 * DAY,
        description="How long a cached result is reused; older entries are pruned each tick.",
    )
    judge_tracing: Flag = Field(
        default=False,
        description="Trace the judge's own calls: each call (prompt, completion, model, tokens, "
        "latency, retries) as a GenAI chat span in a trace of its own, linked from the "
        "evaluation span and back; sent with the evaluation spans (span output only).",
    )
    judge_trace_sample_rate: Number = Field(
        default=1.0,
        ge=0,
        le=1,
        description="The share of evaluations whose judge calls are traced (judge_tracing on).",
    )
    judge_trace_max_calls: Count = Field(
        default=16,
        ge=1,
        le=1000,
        description="The most judge call spans kept per evaluation; the rest are counted on the "
        "judge trace's root (spanjudge.judge.calls_dropped).",
    )
    judge_trace_content: Flag = Field(
        default=True,
        description="Whether judge call spans carry the prompt and completion "
        "(gen_ai.input.messages / gen_ai.output.messages); off also when "
        "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT is false.",
    )

    # the worker's numbers (spanjudge/worker/numbers.py, docs/numbers.md)
    interval_keys: tuple[str, ...] = Field(
        default=("service.version",),
        max_length=8,
        description="Segment keys the worker's pass-rate and mean-score gauges (with their "
        "95% interval bounds) are split by, beside the unsplit row: service, service.version, "
        "model, agent, or an attribute a rule lists in segment_keys.",
    )
    interval_refresh_seconds: Number = Field(
        default=60.0,
        ge=1,
        le=DAY,
        description="How often (at most, on a scrape) the worker sums the results again for "
        "its interval and regression gauges: one grouped query per key.",
    )
    regression_baseline: RegressionBaseline | None = Field(
        default=None,
        description="The segment new ones are compared with, continuously: {key = "
        '"service.version", value = "1.4.0"}, or value = "previous" (the default) for the '
        "segment that appeared last (the version just deployed) against the one before it. "
        "Raises the "
        "spanjudge_regression gauges, a WARNING and the SpanjudgeRegression alert. "
        "null: no comparison.",
    )

    @field_validator("max_settle_delay_seconds")
    @classmethod
    def _not_below_settle(cls, value: float | None, info: ValidationInfo) -> float | None:
        settle = info.data.get("settle_seconds")
        if value is not None and settle is not None and value < settle:
            raise ValueError(f"must be at least settle_seconds ({settle:g})")
        return value

    @property
    def settle_delay_limit(self) -> float:
        """The longest a trace's unplanned spans wait to be planned, in seconds:
        ``max_settle_delay_seconds``, or ``SETTLE_DELAY_FACTOR`` times ``settle_seconds``."""
        if self.max_settle_delay_seconds is not None:
            return self.max_settle_delay_seconds
        return SETTLE_DELAY_FACTOR * self.settle_seconds

    def monitor_config(self) -> MonitorConfig:
        """These settings as the loop's frozen :class:`MonitorConfig` (from a worker's settings,
        say), every field taken over by name."""
        return MonitorConfig(**{name: getattr(self, name) for name in LoopSettings.model_fields})


class MonitorConfig(LoopSettings, CheckedModel):
    """The online loop's settings (:class:`LoopSettings`' fields), frozen.

    * ``interval_seconds``: between two ticks of the scheduler;
    * ``settle_seconds``: a trace is settled once its root ended and no span arrived for this
      long; ``max_settle_delay_seconds``: a trace that never goes quiet is planned anyway
      once its first unplanned span waited this long (default 6 times ``settle_seconds``),
      later spans as late arrivals; ``idle_seconds``: a conversation is idle after this long
      without a new span;
    * ``concurrency``: evaluations run at once; ``batch_size``: the most jobs claimed at once
      (a claim never takes more than the free evaluation slots: a job is claimed when a slot
      frees, so leased jobs do not wait behind others);
    * ``lease_seconds``: how long a claimed job is ours before another evaluator may take it
      (a crash costs at most this much delay); it also ages results before they are re-sent;
    * ``max_attempts`` / ``retry_delay_seconds`` / ``retry_max_delay_seconds``: transient judge
      failures (timeouts, 429, 5xx, connection errors) are retried in later ticks,
      ``retry_delay_seconds * attempt`` apart, at most ``retry_max_delay_seconds`` (by
      default 12 attempts over 32.5 minutes, long enough for a provider incident);
    * ``retention_seconds``: stored spans older than this are deleted (``None``: kept);
    * ``flush_timeout_seconds``: the longest a tick waits for the exporters to confirm;
    * ``judge_cache``: reuse a scored result for the same metric (parameters, prompts), judge
      model and rebuilt case instead of calling the judge again (on by default), within
      ``judge_cache_max_age_seconds`` (default a day); older entries are pruned each tick.

    Example::

        MonitorConfig(interval_seconds=10, settle_seconds=5, concurrency=4)
    """

    model_config = ConfigDict(frozen=True)
