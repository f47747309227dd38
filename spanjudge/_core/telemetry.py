"""spanjudge's own OpenTelemetry metrics and a Prometheus ``/metrics`` endpoint for them.

:class:`Telemetry` creates every instrument named in :mod:`spanjudge._core.metric_names`
once, with the documented labels, and offers one method per thing that happened. Every method
is safe to call from any thread and never raises into the caller.

Example::

    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry()
    telemetry = Telemetry(prometheus_meter_provider(registry))
    telemetry.record_evaluation(record)
    app = metrics_asgi_app(registry)  # mount at /metrics in a starlette app
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, MeterProvider, Observation

from spanjudge._core import metric_names as names
from spanjudge._core.kinds import LABELS, OUTPUTS, Outcome

if TYPE_CHECKING:
    from opentelemetry.exporter.prometheus import PrometheusMetricReader
    from opentelemetry.sdk.metrics import MeterProvider as SdkMeterProvider
    from prometheus_client import CollectorRegistry

    from spanjudge._core.span_record import EvaluationRecord

logger = logging.getLogger("spanjudge.telemetry")

BacklogState = tuple[Mapping[str, int], float | None]
# (rule, metric, stat, value) rows of the agreement gauge
AgreementRows = Iterable[tuple[str, str, str, float]]
# (outages, failed attempts, evaluations given up, down now) of the judge-health instruments
JudgeState = tuple[int, int, int, bool]
# (late spans, traces re-planned, conversations judged again) of the late-arrival counters
LateState = tuple[int, int, int]

# Scores live in [0, 1]; a tenth per bucket reads well on a heatmap.
SCORE_BUCKETS: tuple[float, ...] = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
# Lag spans settle time (seconds) to backlog catch-up (tens of minutes).
# Why a rule did not evaluate a target (the ``reason`` label of spanjudge.sampler.skipped).
SKIP_REASONS: tuple[str, ...] = (
    "not_sampled",
    "rate_budget",
    "cost_budget",
    "day_budget",
    "filtered",
    names.IMPLAUSIBLE_FIELD,
)
LAG_BUCKETS: tuple[float, ...] = (1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1800, 3600)


def evaluation_label(record: EvaluationRecord) -> Outcome:
    """The ``label`` of the evaluations counter: the verdict, error or skipped."""
    if record.status == "scored":
        if record.label in LABELS:  # a stored record may hold anything
            return record.label
        return "pass" if record.success else "fail"
    return "skipped" if record.status == "skipped" else "error"


class Telemetry:
    """The instruments of metric_names.py on one meter (``meter_provider`` or the global one).

    Example::

        telemetry = Telemetry()
        telemetry.record_skip("faithfulness-llm", "not_sampled")
    """

    def __init__(self, meter_provider: MeterProvider | None = None) -> None:
        provider = meter_provider or metrics.get_meter_provider()
        meter = provider.get_meter(names.METER_NAME)
        self.score = meter.create_histogram(
            names.EVALUATION_SCORE,
            description="Evaluation scores (0..1) by metric, label, service and rule",
            explicit_bucket_boundaries_advisory=list(SCORE_BUCKETS),
        )
        self.evaluations = meter.create_counter(
            names.EVALUATIONS, description="Finished evaluations by metric, label, service, rule"
        )
        self.lag = meter.create_histogram(
            names.EVALUATION_LAG,
            description="Seconds from the evaluated target's end to its score",
            explicit_bucket_boundaries_advisory=list(LAG_BUCKETS),
        )
        self.tokens = meter.create_counter(names.JUDGE_TOKENS, description="Judge tokens")
        self.cost = meter.create_counter(names.JUDGE_COST, description="Judge cost in USD")
        self.calls = meter.create_counter(names.JUDGE_CALLS, description="Judge calls")
        self.cache_hits = meter.create_counter(
            names.JUDGE_CACHE_HITS, description="Results reused from the judge-result cache"
        )
        self.skipped = meter.create_counter(
            names.SAMPLER_SKIPPED, description="Targets not evaluated, by rule and reason"
        )
        self.exporter_dropped = meter.create_counter(
            names.EXPORTER_DROPPED, description="Spans the store exporter dropped"
        )
        self.exporter_written = meter.create_counter(
            names.EXPORTER_WRITTEN, description="Spans the store exporter wrote"
        )
        self.emitter_dropped = meter.create_counter(
            names.EMITTER_DROPPED, description="Evaluation spans the score emitter dropped"
        )
        self.events_not_accepted = meter.create_counter(
            names.EMITTER_EVENTS_NOT_ACCEPTED,
            description="Evaluation events settled unsent: the logs endpoint takes no logs",
        )
        self.receiver_requests = meter.create_counter(
            names.RECEIVER_REQUESTS, description="OTLP/HTTP requests by status code and encoding"
        )
        self.receiver_spans = meter.create_counter(
            names.RECEIVER_SPANS, description="Spans accepted by the OTLP/HTTP receiver"
        )
        self.enrich_forwarded = meter.create_counter(
            names.ENRICH_FORWARDED, description="Spans the enrich mode forwarded to the backend"
        )
        self.enrich_forward_failed = meter.create_counter(
            names.ENRICH_FORWARD_FAILED,
            description="Spans the enrich mode failed to forward (kept and sent again)",
        )
        self.unrecognised_spans = meter.create_counter(
            names.PLANNER_UNRECOGNISED_SPANS,
            description="Spans of settled traces that no GenAI dialect recognised, by service",
        )
        self.no_target = meter.create_counter(
            names.RULES_NO_TARGET,
            description="Settled traces in which a rule found no target, by rule and reason",
        )
        self.ingest = meter.create_counter(
            names.INGEST_SPANS, description="Spans received by what ingest did with them"
        )
        self._backlog_fn: Callable[[], BacklogState] | None = None
        meter.create_observable_gauge(
            names.BACKLOG, callbacks=[self._observe_backlog], description="Work waiting"
        )
        meter.create_observable_gauge(
            names.BACKLOG_AGE,
            callbacks=[self._observe_backlog_age],
            description="Age in seconds of the oldest settled-but-unevaluated target",
        )
        self._agreement_fn: Callable[[], AgreementRows] | None = None
        meter.create_observable_gauge(
            names.JUDGE_AGREEMENT,
            callbacks=[self._observe_agreement],
            description="Judge-human agreement by rule, metric and statistic",
        )
        self._operations_instruments(meter)

    def _operations_instruments(self, meter: metrics.Meter) -> None:
        """Counts kept by parts this module may not import (the loop's judge health, the
        planner's late arrivals, the SQLite store), read per scrape through callbacks."""
        self._judge_fn: Callable[[], JudgeState] | None = None
        self._late_fn: Callable[[], LateState] | None = None
        self._file_changes_fn: Callable[[], int | None] | None = None
        counters = (
            (names.JUDGE_OUTAGES, self._judge_observer(0), "Judge outages begun"),
            (names.JUDGE_FAILED_ATTEMPTS, self._judge_observer(1), "Judge attempts failed"),
            (names.JUDGE_GAVE_UP, self._judge_observer(2), "Evaluations given up as errors"),
            (names.PLANNER_LATE_SPANS, self._observe_late_spans, "Spans after their plan"),
            (names.PLANNER_REPLANNED, self._observe_replanned, "Planned again, by kind"),
            (names.STORE_FILE_CHANGES, self._observe_file_changes, "Store file replaced"),
        )
        for name, callback, description in counters:
            meter.create_observable_counter(name, callbacks=[callback], description=description)
        meter.create_observable_gauge(
            names.JUDGE_DOWN, callbacks=[self._judge_observer(3)], description="1: judge failing"
        )

    def prime(self, rules: Sequence[str] = (), *, services: Sequence[str] = ()) -> None:
        """Start the drop, write, skip and no-target counters at 0, so a dashboard or alert
        expression returns 0 (not "no data") before the first event. Series appear once, with
        the label values that will be used later; ``services`` primes the unrecognised-span
        counter for the services expected to send spans."""
        try:
            self.exporter_written.add(0, {})
            for reason in names.EXPORTER_DROP_REASONS:
                self.exporter_dropped.add(0, {names.L_REASON: reason})
            for output in OUTPUTS:
                for reason in names.EMITTER_DROP_REASONS:
                    self.emitter_dropped.add(0, {names.L_REASON: reason, names.L_OUTPUT: output})
            self.events_not_accepted.add(0, {})
            for rule in rules:
                for reason in SKIP_REASONS:
                    self.skipped.add(0, {names.L_RULE: rule, names.L_REASON: reason})
                for reason in names.NO_TARGET_REASONS:
                    self.no_target.add(0, {names.L_RULE: rule, names.L_REASON: reason})
            for service in services:
                self.unrecognised_spans.add(0, {names.L_SERVICE: service})
            self.enrich_forward_failed.add(0, {})
            for outcome in names.INGEST_OUTCOMES:
                self.ingest.add(0, {names.L_OUTCOME: outcome})
        except Exception:  # metrics must never stop the worker from starting
            logger.debug("priming counters failed", exc_info=True)

    # --- evaluations ---------------------------------------------------------------------
    def record_evaluation(self, record: EvaluationRecord, *, now: float | None = None) -> None:
        """Count one finished evaluation: score (scored only), counter, spend and lag."""
        try:
            self._record_evaluation(record, now)
        except Exception:  # metrics must never break the evaluation loop
            logger.debug("record_evaluation failed", exc_info=True)

    def _record_evaluation(self, record: EvaluationRecord, now: float | None) -> None:
        label = evaluation_label(record)
        service = record.service_name or ""
        base = {names.L_METRIC: record.metric, names.L_SERVICE: service, names.L_RULE: record.rule}
        self.evaluations.add(1, {**base, names.L_LABEL: label})
        if record.status == "skipped" and record.error_type == names.IMPLAUSIBLE_FIELD:
            # a refused misread is counted under its own reason: a number to drive to zero
            refused = {names.L_RULE: record.rule, names.L_REASON: names.IMPLAUSIBLE_FIELD}
            self.skipped.add(1, refused)
        if record.status == "scored" and record.score is not None:
            self.score.record(float(record.score), {**base, names.L_LABEL: label})
        model = record.judge_model or ""
        spend = {names.L_METRIC: record.metric, names.L_MODEL: model}
        if record.input_tokens:
            self.tokens.add(record.input_tokens, {**spend, names.L_DIRECTION: "input"})
        if record.output_tokens:
            self.tokens.add(record.output_tokens, {**spend, names.L_DIRECTION: "output"})
        if record.cost:
            self.cost.add(float(record.cost), spend)
        if record.judge_calls:
            self.calls.add(record.judge_calls, spend)
        if record.target_end_unix_nano:
            finished = record.finished_at if record.finished_at is not None else now
            if finished is None:
                finished = time.time()
            lag = finished - record.target_end_unix_nano / 1e9
            self.lag.record(max(lag, 0.0), {names.L_METRIC: record.metric})

    def record_cache_hit(self, rule: str, metric: str) -> None:
        """One result reused from the judge-result cache instead of calling the judge."""
        self._add(self.cache_hits, 1, {names.L_METRIC: metric, names.L_RULE: rule})

    def record_skip(self, rule: str, reason: str, count: int = 1) -> None:
        """Count targets a rule did not evaluate (reason: not_sampled, rate_budget, ...)."""
        self._add(self.skipped, count, {names.L_RULE: rule, names.L_REASON: reason})

    def record_unrecognised_spans(self, service: str, count: int = 1) -> None:
        """Spans of a settled trace that no dialect recognised (``read_span(s).dialect``)."""
        self._add(self.unrecognised_spans, count, {names.L_SERVICE: service})

    def record_no_target(self, rule: str, reason: str, count: int = 1) -> None:
        """Settled traces (or conversations) in which ``rule`` found no target, by reason
        (one of ``metric_names.NO_TARGET_REASONS``)."""
        self._add(self.no_target, count, {names.L_RULE: rule, names.L_REASON: reason})

    # --- backlog -------------------------------------------------------------------------
    def set_backlog_callback(self, fn: Callable[[], BacklogState] | None) -> None:
        """``fn()`` returns ``({state: count}, oldest_age_seconds or None)``; read per scrape."""
        self._backlog_fn = fn

    def _backlog(self) -> BacklogState | None:
        if self._backlog_fn is None:
            return None
        try:
            return self._backlog_fn()
        except Exception:
            logger.debug("backlog callback failed", exc_info=True)
            return None

    def _observe_backlog(self, options: CallbackOptions) -> Iterable[Observation]:
        state = self._backlog()
        if state is None:
            return []
        return [Observation(int(n), {names.L_STATE: s}) for s, n in state[0].items()]

    def _observe_backlog_age(self, options: CallbackOptions) -> Iterable[Observation]:
        state = self._backlog()
        if state is None or state[1] is None:
            return []
        return [Observation(float(state[1]))]

    # --- agreement -----------------------------------------------------------------------
    def set_agreement_callback(self, fn: Callable[[], AgreementRows] | None) -> None:
        """``fn()`` returns ``(rule, metric, stat, value)`` rows; read per scrape."""
        self._agreement_fn = fn

    def _observe_agreement(self, options: CallbackOptions) -> Iterable[Observation]:
        if self._agreement_fn is None:
            return []
        try:
            rows = list(self._agreement_fn())
        except Exception:
            logger.debug("agreement callback failed", exc_info=True)
            return []
        return [
            Observation(value, {names.L_RULE: rule, names.L_METRIC: metric, names.L_STAT: stat})
            for rule, metric, stat, value in rows
        ]

    # --- judge health, late arrivals, store file ------------------------------------------
    def set_operations_callbacks(
        self,
        *,
        judge: Callable[[], JudgeState] | None = None,
        late: Callable[[], LateState] | None = None,
        file_changes: Callable[[], int | None] | None = None,
    ) -> None:
        """Callbacks read per scrape: ``judge()`` -> (outages, failed attempts, given up,
        down), ``late()`` -> (late spans, traces re-planned, conversations judged again),
        ``file_changes()`` -> times the store file changed (None: not a file store)."""
        self._judge_fn, self._late_fn, self._file_changes_fn = judge, late, file_changes

    @staticmethod
    def _read(fn: Callable[[], Any] | None, what: str) -> Any:
        if fn is None:
            return None
        try:
            return fn()
        except Exception:
            logger.debug("%s callback failed", what, exc_info=True)
            return None

    def _judge_observer(self, index: int) -> Callable[[CallbackOptions], Iterable[Observation]]:
        def observe(options: CallbackOptions) -> Iterable[Observation]:
            state = self._read(self._judge_fn, "judge health")
            return [] if state is None else [Observation(int(state[index]))]

        return observe

    def _observe_late_spans(self, options: CallbackOptions) -> Iterable[Observation]:
        state = self._read(self._late_fn, "late arrivals")
        return [] if state is None else [Observation(int(state[0]))]

    def _observe_replanned(self, options: CallbackOptions) -> Iterable[Observation]:
        state = self._read(self._late_fn, "late arrivals")
        if state is None:
            return []
        kinds = zip(names.REPLANNED_KINDS, state[1:], strict=True)
        return [Observation(int(n), {names.L_KIND: kind}) for kind, n in kinds]

    def _observe_file_changes(self, options: CallbackOptions) -> Iterable[Observation]:
        changes = self._read(self._file_changes_fn, "store file changes")
        return [] if changes is None else [Observation(int(changes))]

    # --- exporter / emitter / receiver ---------------------------------------------------
    def record_exporter_written(self, count: int) -> None:
        self._add(self.exporter_written, count, {})

    def record_exporter_dropped(self, reason: str, count: int) -> None:
        """Hook for ``StoreSpanExporter(on_dropped=telemetry.record_exporter_dropped)``."""
        self._add(self.exporter_dropped, count, {names.L_REASON: reason})

    def record_emitter_dropped(self, reason: str, count: int = 1, *, output: str = "span") -> None:
        """Evaluation results the score emitter dropped, by reason and output (span|event)."""
        self._add(self.emitter_dropped, count, {names.L_REASON: reason, names.L_OUTPUT: output})

    def record_events_not_accepted(self, count: int) -> None:
        """Events settled unsent because the logs endpoint does not take logs."""
        self._add(self.events_not_accepted, count, {})

    def record_receiver_request(self, code: int, encoding: str, spans: int = 0) -> None:
        """One OTLP/HTTP request answered with ``code``; ``spans`` accepted from it."""
        self._add(self.receiver_requests, 1, {names.L_CODE: str(code), names.L_ENCODING: encoding})
        if spans:
            self._add(self.receiver_spans, spans, {names.L_ENCODING: encoding})

    def record_ingest(self, outcome: str, count: int) -> None:
        """Received spans stored, not sampled, held, released, expired or overflowed."""
        self._add(self.ingest, count, {names.L_OUTCOME: outcome})

    def record_enrich_forwarded(self, count: int, *, held: bool) -> None:
        """Spans the enrich mode sent on; ``held``: they had waited for their scores."""
        self._add(self.enrich_forwarded, count, {names.L_HELD: "true" if held else "false"})

    def record_enrich_forward_failed(self, count: int) -> None:
        self._add(self.enrich_forward_failed, count, {})

    @staticmethod
    def _add(counter: Any, value: float, labels: dict[str, str]) -> None:
        try:
            if value:
                counter.add(value, labels)
        except Exception:
            logger.debug("counter add failed", exc_info=True)


# --- Prometheus ----------------------------------------------------------------------------
def prometheus_reader(registry: CollectorRegistry | None = None) -> PrometheusMetricReader:
    """A ``PrometheusMetricReader`` registered on ``registry`` (default: prometheus_client's
    global one). Create it once per registry: each reader adds a collector."""
    from opentelemetry.exporter.prometheus import PrometheusMetricReader
    from prometheus_client import REGISTRY

    return PrometheusMetricReader(registry=registry if registry is not None else REGISTRY)


def prometheus_meter_provider(registry: CollectorRegistry | None = None) -> SdkMeterProvider:
    """An SDK ``MeterProvider`` whose metrics are served by Prometheus on ``registry``."""
    from opentelemetry.sdk.metrics import MeterProvider as SdkMeterProvider

    return SdkMeterProvider(metric_readers=[prometheus_reader(registry)])


def metrics_asgi_app(registry: CollectorRegistry | None = None) -> Any:
    """An ASGI app serving the Prometheus text format (mount it at ``/metrics``)."""
    from prometheus_client import REGISTRY, make_asgi_app

    return make_asgi_app(registry=registry if registry is not None else REGISTRY)
