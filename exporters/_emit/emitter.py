"""The score emitter: ships each evaluation result in the forms ``outputs`` names, without ever
blocking or failing the caller.

Outputs (see :mod:`spanjudge.exporters._emit.evaluation_result` for what each carries):

* ``"span"``: the evaluation span, child of the evaluated span, over an OTLP span exporter;
* ``"event"``: the semconv ``gen_ai.evaluation.result`` log record on the evaluated span, over
  an OTLP log exporter (``/v1/logs``);
* ``"phoenix"``, ``"mlflow"``: the result as the product's own annotation or assessment, through
  its HTTP API (:mod:`spanjudge.exporters._sinks`); a person's label goes there too.

The evaluation span carries the judged span's ``service.name`` or the worker's
(``evaluation_service``): ``auto`` picks the judged one when the spans go to MLflow, which tags
a whole trace with the resource of the last batch it received (a worker's ``service.name``
would relabel every judged trace), and the worker's elsewhere, where a trace has spans of many
services.

Each output has its own bounded queue and writer thread (a
:class:`~spanjudge.exporters._batch.BatchWorker`), so a dead logs backend never delays the spans,
and each confirms separately: :meth:`ScoreEmitter.take_confirmed` hands back ``(key, output)``
once that output's exporter accepted the item, which is when the caller may mark it delivered.
A logs endpoint that answers 404/405/501 takes no logs (a traces-only backend: Jaeger, Tempo,
Phoenix): the event output then settles its items unsent, confirmed all the same so that they are
not owed forever, says so once and counts them (:mod:`.logs_refusal`).

Example::

    emitter = ScoreEmitter()             # OTLP/HTTP span and log exporters from OTEL_* env
    emitter.emit(record, key=42)         # returns at once
    emitter.force_flush(5)
    emitter.take_confirmed()             # [(42, "span"), (42, "event")]
    emitter.shutdown()
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Collection, Mapping
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol, get_args

from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from spanjudge._core import metric_names as names
from spanjudge._core.kinds import OUTPUTS, SINKS, Output, Sink
from spanjudge._core.log_text import log_text
from spanjudge._core.span_record import EvaluationRecord, FeedbackRecord
from spanjudge.errors import ConfigError
from spanjudge.exporters._emit.channel import Channel
from spanjudge.exporters._emit.evaluation_result import (
    DEFAULT_EVALUATION_STATUS,
    check_evaluation_status,
    default_resource,
    evaluation_event,
    evaluation_span,
    evaluation_trace_id,
    feedback_event,
)
from spanjudge.exporters._emit.logs_refusal import RECHECK_SECONDS, LogsRefusal
from spanjudge.exporters._sinks.base import REFUSED, ResultSink, SinkItem

if TYPE_CHECKING:
    from opentelemetry.sdk._logs.export import LogRecordExporter

    from spanjudge._core.telemetry import Telemetry
    from spanjudge.evaluators._judge.judges.judge_trace import JudgeTrace

logger = logging.getLogger("spanjudge.emitter")


# Drop reasons (the ``reason`` label of the emitter's dropped counter; ``output`` says which).
DROP_QUEUE_FULL = names.QUEUE_FULL
DROP_INVALID = names.INVALID_RECORD
DROP_EXPORT_FAILED = names.EXPORT_FAILED
DROP_SHUTDOWN = names.SHUTDOWN
DROP_REASONS: tuple[str, ...] = names.EMITTER_DROP_REASONS
# Whose service.name the evaluation span carries (module docstring).
EvaluationService = Literal["auto", "judged", "worker"]
EVALUATION_SERVICES: Final[tuple[EvaluationService, ...]] = get_args(EvaluationService)
# A header that sends OTLP spans into an MLflow experiment: the spans' backend is MLflow.
MLFLOW_HEADER = "x-mlflow-experiment-id"
JUDGED_RESOURCES_MAX = 1024

__all__ = [
    "DROP_REASONS",
    "EVALUATION_SERVICES",
    "Emitter",
    "ScoreEmitter",
    "check_outputs",
]


class _FeedbackKey(int):
    """A feedback id riding the event channel: confirmed apart from the results' job ids."""


class _JudgeSpanKey:
    """A judge trace's span riding the span channel: counted apart, confirming no result."""


_JUDGE_SPAN = _JudgeSpanKey()


class Emitter(Protocol):
    """What the evaluation loop needs of an emitter (the score emitter, or enrich mode's)."""

    outputs: tuple[Output | Sink, ...]

    def emit(
        self, record: EvaluationRecord, key: Any = None, *, outputs: Collection[str] | None = None
    ) -> None: ...

    def take_confirmed(self) -> list[tuple[Any, str]]: ...

    def force_flush(
        self, timeout_seconds: float = 10, *, outputs: Collection[str] | None = None
    ) -> bool: ...

    def shutdown(self, timeout_seconds: float = 10) -> None: ...


def check_outputs(outputs: Collection[str]) -> tuple[Output | Sink, ...]:
    """``outputs`` validated and de-duplicated in canonical order; a clear error otherwise."""
    known: tuple[Output | Sink, ...] = (*OUTPUTS, *SINKS)
    if isinstance(outputs, str):
        raise ConfigError(f"outputs must be a list such as ['span', 'event'], got {outputs!r}")
    unknown = sorted(set(outputs) - set(known))
    if unknown:
        raise ConfigError(f"unknown output(s) {unknown}; known: {', '.join(known)}")
    if not outputs:
        raise ConfigError("outputs must name at least one of: " + ", ".join(known))
    return tuple(o for o in known if o in outputs)


def _headers_name_mlflow(span_exporter: Any) -> bool:
    """Whether the span exporter's headers (or the OTLP header variables) send to MLflow."""
    texts = [os.environ.get(f"OTEL_EXPORTER_OTLP{s}_HEADERS", "") for s in ("", "_TRACES")]
    headers = getattr(getattr(span_exporter, "_client", None), "_headers", None)
    if isinstance(headers, Mapping):
        texts.extend(str(key) for key in headers)
    return any(MLFLOW_HEADER in text.lower() for text in texts)


def _valid_trace_id(trace_id: str | None) -> bool:
    try:
        return bool(trace_id) and int(trace_id or "", 16) != 0
    except ValueError:
        return False


class ScoreEmitter:
    """Exports evaluation results as spans and/or events from background threads.

    ``emit()`` never blocks on I/O and never raises; when an output's queue holds ``max_queue``
    items, new ones are dropped and counted (``dropped`` by output and reason, and the telemetry
    counter if given). The emitter counts only its own drops; the evaluation loop records the
    evaluation metrics (``Telemetry.record_evaluation``) once per result.

    ``outputs`` defaults to the outputs whose exporter is given, or both when none is. An
    output without an exporter gets an OTLP/HTTP one configured from the standard
    ``OTEL_EXPORTER_OTLP_*`` variables (``..._TRACES_*`` for spans, ``..._LOGS_*`` for events).
    When the logs endpoint answers that it takes no logs, events are settled unsent and one
    batch is tried again every ``logs_recheck_seconds`` (:mod:`.logs_refusal`).

    Example::

        emitter = ScoreEmitter(outputs=["event"], log_exporter=OTLPLogExporter(endpoint=url))
        emitter.emit(record)
        assert emitter.force_flush(5)
    """

    def __init__(
        self,
        *,
        outputs: Collection[str] | None = None,
        span_exporter: SpanExporter | None = None,
        log_exporter: LogRecordExporter | None = None,
        resource: Resource | None = None,
        telemetry: Telemetry | None = None,
        max_queue: int = 2048,
        logs_recheck_seconds: float = RECHECK_SECONDS,
        sinks: Mapping[str, ResultSink] | None = None,
        evaluation_status: str = DEFAULT_EVALUATION_STATUS,
        evaluation_service: str = "auto",
    ) -> None:
        if max_queue < 1:
            raise ConfigError("max_queue must be positive")
        if evaluation_service not in EVALUATION_SERVICES:
            raise ConfigError(
                f"evaluation_service must be one of {', '.join(EVALUATION_SERVICES)},"
                f" got {evaluation_service!r}"
            )
        self.evaluation_status = check_evaluation_status(evaluation_status)
        if outputs is None:
            # exporters given by the caller name the outputs; none given: both, over OTLP
            given = [o for o, e in (("span", span_exporter), ("event", log_exporter)) if e]
            outputs = given or OUTPUTS
        self.outputs = check_outputs(outputs)
        self.resource = resource or default_resource()
        self.telemetry = telemetry
        self.max_queue = max_queue
        self._confirmed: list[tuple[Any, str]] = []
        self._feedback_confirmed: list[tuple[int, str]] = []
        self._lock = threading.Lock()
        self.span_exporter: SpanExporter | None = None
        self.log_exporter: LogRecordExporter | None = None
        # set with the event output: whether its endpoint is known not to take logs
        self.logs_refusal: LogsRefusal | None = None
        self._channels: dict[str, Channel] = {}
        if "span" in self.outputs:
            if span_exporter is None:
                from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
                    OTLPSpanExporter,
                )

                span_exporter = OTLPSpanExporter()
            self.span_exporter = span_exporter
            self._add_channel("span", self._span, self._export_spans)
        if "event" in self.outputs:
            if log_exporter is None:
                from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter

                log_exporter = OTLPLogExporter()
            self.log_exporter = log_exporter
            self.logs_refusal = LogsRefusal(
                log_exporter,
                recheck_seconds=logs_recheck_seconds,
                on_settled=telemetry.record_events_not_accepted if telemetry else None,
            )
            self._add_channel("event", self._event, self._export_events, self.logs_refusal)
        self.sinks: dict[str, ResultSink] = {}
        for name in SINKS:
            if name in self.outputs:
                self._add_sink(name, (sinks or {}).get(name))
        self.judged_service = evaluation_service == "judged" or (
            evaluation_service == "auto"
            and ("mlflow" in self.outputs or _headers_name_mlflow(self.span_exporter))
        )
        self._judged_resources: dict[str, Resource] = {}
        self.exported_judge_spans = 0  # judge tracing: spans of judge traces accepted

    def _add_sink(self, name: Sink, sink: ResultSink | None) -> None:
        if sink is None:
            from spanjudge.exporters._sinks.settings import sink_from_environment

            sink = sink_from_environment(name)
        if getattr(sink, "on_refused", False) is None:
            telemetry = self.telemetry

            def refused(count: int) -> None:
                if telemetry is not None:
                    telemetry.record_emitter_dropped(REFUSED, count, output=name)

            sink.on_refused = refused  # type: ignore[attr-defined]  # an HttpSink's hook
        self.sinks[name] = sink
        self._add_channel(name, SinkItem.of, sink.export)

    def _add_channel(
        self,
        output: Output | Sink,
        build: Callable[[EvaluationRecord], Any],
        export: Callable[[list[Any]], bool],
        refusal: LogsRefusal | None = None,
    ) -> None:
        def on_dropped(reason: str, count: int) -> None:
            if self.telemetry is not None:
                self.telemetry.record_emitter_dropped(reason, count, output=output)

        self._channels[output] = Channel(
            output,
            build,
            export,
            max_queue=self.max_queue,
            on_dropped=on_dropped,
            on_confirmed=self._add_confirmed,
            refusal=refusal,
        )

    # ---------------------------------------------------------------- builders and exports
    def _span(self, record: EvaluationRecord) -> Any:
        resource = self._span_resource(record)
        own = self.resource.attributes.get(SERVICE_NAME)
        return evaluation_span(
            record,
            resource,
            status=self.evaluation_status,
            emitted_by=str(own) if resource is not self.resource and own else None,
        )

    def _span_resource(self, record: EvaluationRecord) -> Resource:
        """The worker's resource, or with ``judged``, the same with the judged span's
        service.name (the worker's then in the span's ``spanjudge.evaluation.emitted_by``)."""
        service = record.service_name
        if not self.judged_service or not service:
            return self.resource
        found = self._judged_resources.get(service)
        if found is None:
            attributes = {**self.resource.attributes, SERVICE_NAME: service}
            found = Resource(attributes, self.resource.schema_url)
            if len(self._judged_resources) < JUDGED_RESOURCES_MAX:
                self._judged_resources[service] = found
        return found

    def _event(self, record: EvaluationRecord) -> Any:
        return evaluation_event(record, self.resource)

    def _export_spans(self, spans: list[Any]) -> bool:
        assert self.span_exporter is not None
        return self.span_exporter.export(spans) is SpanExportResult.SUCCESS

    def _export_events(self, events: list[Any]) -> bool:
        from opentelemetry.sdk._logs.export import LogRecordExportResult

        assert self.log_exporter is not None
        return self.log_exporter.export(events) is LogRecordExportResult.SUCCESS

    def _add_confirmed(self, confirmed: list[tuple[Any, str]]) -> None:
        with self._lock:
            for key, output in confirmed:
                if isinstance(key, _FeedbackKey):
                    self._feedback_confirmed.append((int(key), output))
                elif key is _JUDGE_SPAN:
                    self.exported_judge_spans += 1
                else:
                    self._confirmed.append((key, output))

    # ---------------------------------------------------------------- counters
    @property
    def exported(self) -> int:
        """Evaluation spans the span exporter accepted (0 without the span output); the judge
        trace's spans are counted apart (``exported_judge_spans``)."""
        channel = self._channels.get("span")
        return channel.exported - self.exported_judge_spans if channel else 0

    @property
    def exported_events(self) -> int:
        """Evaluation events the log exporter accepted (0 without the event output)."""
        channel = self._channels.get("event")
        return channel.exported if channel else 0

    @property
    def events_not_accepted(self) -> int:
        """Events settled unsent because the logs endpoint takes no logs (they are confirmed)."""
        return self.logs_refusal.settled if self.logs_refusal else 0

    @property
    def logs_refused_with(self) -> int | None:
        """The HTTP status with which the logs endpoint said it takes no logs, while that holds
        (404, 405 or 501); None otherwise."""
        return self.logs_refusal.code if self.logs_refusal else None

    @property
    def dropped(self) -> dict[str, int]:
        """Dropped items by reason, all outputs together (a copy)."""
        total: dict[str, int] = {}
        for channel in self._channels.values():
            for reason, n in channel.worker.dropped.items():
                total[reason] = total.get(reason, 0) + n
        return total

    def dropped_by_output(self) -> dict[str, dict[str, int]]:
        """Dropped items per output, by reason."""
        return {name: channel.worker.dropped for name, channel in self._channels.items()}

    @property
    def dropped_total(self) -> int:
        return sum(self.dropped.values())

    # ---------------------------------------------------------------- the interface
    def emit(
        self, record: EvaluationRecord, key: Any = None, *, outputs: Collection[str] | None = None
    ) -> None:
        """Queue ``record`` for every output (or only ``outputs``, e.g. those a re-emission
        still owes); returns at once, never raises.

        ``key`` (e.g. a job id) comes back from :meth:`take_confirmed` with the output's name
        once that output's exporter accepted the item; a dropped or failed item never confirms.
        """
        for name, channel in self._channels.items():
            if outputs is not None and name not in outputs:
                continue
            try:
                item = channel.build(record)
            except Exception:
                logger.warning(
                    "evaluation record %s/%s has no usable trace id; no %s emitted",
                    getattr(record, "rule", "?"),
                    # a conversation target's id is whatever the sender's spans said
                    log_text(getattr(record, "target_id", "?")),
                    name,
                )
                channel.worker.drop(DROP_INVALID)
                continue
            channel.worker.put([(item, key)])

    def emit_judge_trace(self, record: EvaluationRecord, trace: JudgeTrace) -> None:
        """Queue the spans of the judge's own trace for ``record`` (judge tracing) on the span
        output, beside its evaluation span, under the worker's resource; never raises. Nothing
        without a span output; they confirm no result (``exported_judge_spans`` counts them)."""
        channel = self._channels.get("span")
        if channel is None:
            return
        try:
            spans = trace.spans(
                evaluation_trace_id(record), int(record.evaluation_span_id, 16), self.resource
            )
        except Exception:
            channel.worker.drop(DROP_INVALID)
            return
        if spans:
            channel.worker.put([(span, _JUDGE_SPAN) for span in spans])

    @property
    def label_outputs(self) -> tuple[str, ...]:
        """The outputs a person's label goes to: the event output and the sinks."""
        return tuple(o for o in self._channels if o == "event" or o in SINKS)

    def emit_feedback(
        self,
        feedback: FeedbackRecord,
        span_id: str | None,
        *,
        outputs: Collection[str] | None = None,
    ) -> bool:
        """Queue a person's label on ``span_id`` for every label output (or only ``outputs``):
        a ``spanjudge.feedback`` log event (the event output), a HUMAN annotation or assessment
        (the sinks). False, queueing nothing, without such an output or a valid trace id.
        :meth:`take_confirmed_feedback` hands ``(id, output)`` back once an output took it."""
        if not _valid_trace_id(feedback.trace_id):
            for name in self.label_outputs:
                self._channels[name].worker.drop(DROP_INVALID)
            return False
        key = _FeedbackKey(feedback.feedback_id)
        queued = False
        for name in self.label_outputs:
            if outputs is not None and name not in outputs:
                continue
            channel = self._channels[name]
            if name == "event":
                item: Any = feedback_event(feedback, span_id, self.resource)
            else:
                item = SinkItem(label=feedback, span_id=span_id)
            channel.worker.put([(item, key)])
            queued = True
        return queued

    def take_confirmed_feedback(self) -> list[tuple[int, str]]:
        """``(feedback id, output)`` pairs an output took since the last call (each once)."""
        with self._lock:
            confirmed, self._feedback_confirmed = self._feedback_confirmed, []
        return confirmed

    def take_confirmed(self) -> list[tuple[Any, str]]:
        """``(key, output)`` pairs the exporters accepted since the last call (each once), and
        the event output's items settled unsent because its endpoint takes no logs."""
        with self._lock:
            confirmed, self._confirmed = self._confirmed, []
        return confirmed

    def force_flush(
        self, timeout_seconds: float = 10, *, outputs: Collection[str] | None = None
    ) -> bool:
        """Wait until every queued item of every output (or of ``outputs``) was exported or
        dropped; False when ``timeout_seconds`` ran out first. The outputs drain side by side."""
        deadline = time.monotonic() + timeout_seconds
        ok = True
        for name, channel in self._channels.items():
            if outputs is not None and name not in outputs:
                continue
            remaining = max(0.0, deadline - time.monotonic())
            ok = channel.worker.force_flush(remaining) and ok
        return ok

    def shutdown(self, timeout_seconds: float = 10) -> None:
        """Flush what is queued (bounded by ``timeout_seconds``), then shut the exporters down."""
        self.force_flush(timeout_seconds)
        for channel in self._channels.values():
            channel.worker.shutdown(0)
        for exporter in (self.span_exporter, self.log_exporter):
            if exporter is None:
                continue
            try:
                exporter.shutdown()
            except Exception:
                logger.debug("exporter shutdown failed", exc_info=True)
        if self.logs_refusal is not None:
            self.logs_refusal.close()
        for sink in self.sinks.values():
            try:
                sink.close()
            except Exception:
                logger.debug("sink close failed", exc_info=True)
