"""``spanjudge worker``: OTLP/HTTP in, spans stored, rules evaluated, scores out over OTLP.

Spans are written to the store inside the request, so a 200 means they are durable (when
the rules sample by trace or conversation, only the spans some rule can still pick are kept:

:mod:`spanjudge.worker.keep_policy`; spans waiting for their conversation are held in memory);
when too many spans are waiting for the store the receiver answers 503 with Retry-After and the
Collector's ``otlphttp`` exporter retries. Several workers may share one PostgreSQL store: jobs
are split with row leases, and settling and idleness are decided from the shared arrival times.

Modes (``mode`` setting):

* ``child-span``: scores go out as evaluation spans, children of the evaluated spans.
* ``enrich``: the worker stands in front of the backend and forwards every span it receives;
  a span that a rule picks for evaluation is held until its scores are in (at most
  ``max_hold_seconds``) and forwarded with them as its own attributes.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

from spanjudge._core.urls import redact_url
from spanjudge._receive.ingest import IngestGate
from spanjudge._receive.serving import (
    ConnectionLimits,
    connection_cap,
    serve_sockets,
    uvicorn_config,
)
from spanjudge.human_feedback import feedback_http_sink
from spanjudge.settings import WorkerSettings
from spanjudge.worker.keep_policy import IngestKeep, KeepPlan
from spanjudge.worker.numbers import watch_numbers
from spanjudge.worker.preflight import bind_receiver, open_worker_store, start_warnings
from spanjudge.worker.rule_config import build_rules, make_judge

__all__ = ["Worker", "run_backfill", "run_worker"]

logger = logging.getLogger("spanjudge.worker.service")

AGREEMENT_REFRESH_SECONDS = 60.0


class Worker:
    """The worker's parts, wired; :meth:`serve` runs it until SIGTERM/SIGINT."""

    def __init__(
        self,
        settings: WorkerSettings,
        *,
        judge: Any = None,
        span_exporter: Any = None,
        log_exporter: Any = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        from opentelemetry.sdk.resources import SERVICE_NAME, Resource
        from prometheus_client import CollectorRegistry

        from spanjudge._core.telemetry import (
            Telemetry,
            metrics_asgi_app,
            prometheus_meter_provider,
        )
        from spanjudge._receive.receiver import create_receiver_app
        from spanjudge.evaluators._loop.monitor import Monitor
        from spanjudge.exporters._emit.emitter import ScoreEmitter
        from spanjudge.exporters._sinks.settings import sinks_from_settings

        self.settings = settings
        self.clock = clock
        self.judge = judge if judge is not None else make_judge(settings)
        self.rules = build_rules(settings, self.judge)
        self.registry = CollectorRegistry()
        self.meter_provider = prometheus_meter_provider(self.registry)
        self.telemetry = Telemetry(self.meter_provider)
        self.telemetry.prime([rule.name for rule in self.rules])
        outputs = list(settings.outputs)
        injected_spans_only = span_exporter is not None and log_exporter is None
        if injected_spans_only and "outputs" not in settings.model_fields_set:
            outputs = ["span"]  # injected exporters name the outputs, as in ScoreEmitter
        if span_exporter is None:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            endpoint = _signal_url(settings.downstream_endpoint, "traces")
            span_exporter = OTLPSpanExporter(endpoint=endpoint) if endpoint else OTLPSpanExporter()
        if log_exporter is None and "event" in outputs:
            from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter

            # OTEL_EXPORTER_OTLP_(LOGS_)ENDPOINT and friends apply when no downstream is set
            endpoint = _signal_url(settings.downstream_endpoint, "logs")
            log_exporter = OTLPLogExporter(endpoint=endpoint) if endpoint else OTLPLogExporter()
        self.span_exporter = span_exporter
        self.resource = Resource.create({SERVICE_NAME: settings.service_name})
        self.store = open_worker_store(settings)  # errors name store_url
        self.emitter = ScoreEmitter(
            outputs=outputs,
            span_exporter=span_exporter if "span" in outputs else None,
            log_exporter=log_exporter if "event" in outputs else None,
            resource=self.resource,
            telemetry=self.telemetry,
            sinks=sinks_from_settings(settings, outputs),  # phoenix, mlflow: docs/backends.md
            evaluation_status=settings.evaluation_status,
            evaluation_service=settings.evaluation_service,
        )
        self.enricher: Any = None
        if settings.mode == "enrich":
            from spanjudge.evaluators._enrich.forwarder import Enricher

            # the backend gets the received spans from this exporter, scores on the spans
            self.enricher = Enricher(
                self.rules,
                self.store,
                span_exporter,
                max_hold_seconds=settings.max_hold_seconds,
                telemetry=self.telemetry,
                clock=clock,
                journal=_send_journal(self.store),
            )
        self.monitor = Monitor(
            self.rules,
            store=self.store,
            emitter=self.emitter
            if self.enricher is None
            else self.enricher.emitter_for_conversations(self.emitter),
            telemetry=self.telemetry,
            clock=clock,
            after_tick=self.enricher.release if self.enricher is not None else None,
            # the loop's settings are WorkerSettings' inherited LoopSettings fields
            config=settings.monitor_config(),
            readers=settings.readers,  # [[readers]]: checked when the settings were loaded
        )
        self.keep: IngestKeep | None = None
        # enrich mode forwards every span through the store's outbox: it keeps storing all
        plan = KeepPlan() if self.enricher is not None else KeepPlan.of(self.rules)
        if not plan.everything:
            self.keep = IngestKeep(
                plan,
                max_held_spans=settings.ingest_hold_max_spans,
                max_held_bytes=settings.ingest_hold_max_bytes,
                hold_seconds=settings.ingest_hold_seconds,
                telemetry=self.telemetry,
                clock=clock,
            )
        self._ingest_plan = plan.describe()
        self.gate = IngestGate(
            self.store,
            max_pending_spans=settings.max_pending_spans,
            clock=clock,
            outbox=self.enricher.outbox_entries if self.enricher is not None else None,
            after_write=self.enricher.received if self.enricher is not None else None,
            telemetry=self.telemetry,
            keep=self.keep,
        )
        self._ready = threading.Event()
        self._agreement: tuple[float, list[tuple[str, str, str, float]]] | None = None
        self.telemetry.set_agreement_callback(self.agreement_rows)
        self._wire_operations_metrics()
        self.numbers = watch_numbers(self.store, settings, self.meter_provider, clock=clock)
        self.app = create_receiver_app(
            sink=self.gate.write,
            log_sink=self.gate.write_logs,
            bearer_token=settings.bearer_token,
            max_body_bytes=settings.max_body_bytes,
            max_decompressed_bytes=settings.max_decompressed_bytes,
            max_inflight_bytes=settings.max_inflight_bytes,
            ready=self.is_ready,
            backpressure=self.gate.backpressure,
            telemetry=self.telemetry,
            metrics_app=metrics_asgi_app(self.registry),
            feedback_sink=feedback_http_sink(
                self.store,
                metrics=[rule.metric.name for rule in self.rules],
                stored=self._send_label,
                annotator_tokens=settings.annotator_tokens,
            ),
            keep_span_bytes=self.enricher is not None,  # forwarded as received
            screen=self.keep,  # spans of traces no rule can pick are not even decoded
        )

    def _wire_operations_metrics(self) -> None:
        """The judge-health, late-arrival and store-file counters, read per scrape from the
        loop and the store (exporters may not import the evaluators: callbacks wired here)."""
        health, late = self.monitor.runner.health, self.monitor.planner.late
        store = self.store
        self.telemetry.set_operations_callbacks(
            judge=lambda: (health.outages, health.failed, health.gave_up, health.down),
            late=lambda: (late.spans, late.traces, late.conversations),
            file_changes=lambda: getattr(store, "file_changes", None),
        )

    def _send_label(self, label: Any) -> None:
        """A label posted here leaves as its event at once (the loop re-sends orphans)."""
        from spanjudge.exporters._delivery import feedback_emitter, send_feedback

        self._agreement = None  # the gauges show it at the next scrape
        emitter = feedback_emitter(self.emitter)
        if emitter is not None:
            send_feedback(self.store, emitter, label)

    def agreement_rows(self) -> list[tuple[str, str, str, float]]:
        """The agreement gauge's rows, recomputed at most once a minute (scrapes come often;
        the labels of the window are read from the store)."""
        from spanjudge.evaluators._review.agreement import agreement, gauge_rows

        now = self.clock()
        if self._agreement is not None and now - self._agreement[0] < AGREEMENT_REFRESH_SECONDS:
            return self._agreement[1]
        pairs = self.store.labelled_results(since=now - self.settings.agreement_window_seconds)
        rows = gauge_rows(
            agreement(pairs),
            floor=self.settings.agreement_floor,
            min_labels=self.settings.agreement_min_labels,
        )
        self._agreement = (now, rows)
        return rows

    def is_ready(self) -> bool:
        """Ready once the evaluation loop runs, and not while the store is shedding load."""
        return self._ready.is_set() and not self.gate.shedding()

    def start_background(self) -> None:
        if self.enricher is not None:
            self.enricher.start()
        self.monitor.start()
        if self.numbers is not None:
            # the gauges' sums and the regression check on a timer: scrapes read the last
            self.numbers.start(refresh=True)
        self._ready.set()

    def shutdown(self, grace: float | None = None) -> None:
        """Stop evaluating, flush exporters, close: within ``grace`` seconds (default the
        ``shutdown_grace_seconds`` setting). Jobs in flight get most of it to finish and be
        stored; judge calls still running then are cancelled and their jobs given back for the
        next start (nothing is marked done that was not). What is left is the exporters'."""
        grace = self.settings.shutdown_grace_seconds if grace is None else grace
        deadline = time.monotonic() + grace

        def left(share: float = 1.0) -> float:
            return max(0.0, (deadline - time.monotonic()) * share)

        self._ready.clear()
        if self.numbers is not None:
            self.numbers.stop(left(0.1))
        stopping = threading.Thread(
            target=self.monitor.stop, args=(left(0.7),), name="spanjudge-stop", daemon=True
        )
        stopping.start()
        stopping.join(left(0.6))  # the jobs in flight finish and are stored meanwhile
        if stopping.is_alive():
            cancelled = self.monitor.runner.abandon()
            if cancelled:
                logger.warning(
                    "shutdown: %d judge call(s) still running after %.0f s were cancelled; "
                    "their jobs are left for the next start",
                    cancelled,
                    grace - left(),
                )
            stopping.join(left(0.5))
        if self.enricher is not None:
            # what is due goes out now; spans still held stay in the store for the next start
            self.enricher.release()
            self.enricher.stop(left(0.5))
        self.emitter.shutdown(left(0.8))
        self.meter_provider.shutdown()
        self.store.close()

    def connection_limits(self) -> ConnectionLimits:
        """The receiver's connection limits from the settings (the cap under the open-file
        limit: :func:`~spanjudge._receive.serving.connection_cap`)."""
        settings = self.settings
        return ConnectionLimits(
            max_connections=connection_cap(settings.receiver_max_connections),
            header_timeout_seconds=settings.receiver_header_timeout_seconds,
            body_timeout_seconds=settings.receiver_body_timeout_seconds,
        )

    def serve(self, sockets: list[socket.socket] | None = None) -> int:
        """Serve the receiver until SIGTERM/SIGINT, then shut down within
        ``shutdown_grace_seconds``; returns the exit code.

        ``sockets``: the receiver's, bound and listening (:func:`bind_receiver`); by default
        they are bound here, before anything starts, so a port in use is an error naming
        receiver_port and nothing else has run."""
        import uvicorn

        if sockets is None:
            sockets = bind_receiver(self.settings.receiver_host, self.settings.receiver_port)
        limits = self.connection_limits()
        grace = self.settings.shutdown_grace_seconds
        # requests in flight get a quarter of the grace period, the evaluations the rest
        config = uvicorn_config(self.app, limits=limits, timeout_graceful_shutdown=grace / 4)
        server = uvicorn.Server(config)
        self.start_background()
        port = sockets[0].getsockname()[1]  # the one the system chose for receiver_port = 0
        logger.warning(
            "spanjudge worker listening on http://%s:%s/v1/traces (mode %s, %d rules, store %s)",
            self.settings.receiver_host,
            port,
            self.settings.mode,
            len(self.rules),
            redact_url(self.settings.store_url),
        )
        if limits.max_connections < self.settings.receiver_max_connections:
            # said louder when the operator asked for more than the process can hold
            explicit = "receiver_max_connections" in self.settings.model_fields_set
            logger.log(
                logging.WARNING if explicit else logging.INFO,
                "receiver_max_connections: %d connections at most, half the open-file limit "
                "(ulimit -n) and under the %d set",
                limits.max_connections,
                self.settings.receiver_max_connections,
            )
        # after the listening line: a setup mistake stays the only line a failed start prints
        logger.info("ingest: %s", self._ingest_plan)
        import asyncio
        import signal

        stopped_at: list[float] = []

        def stop(signum: int, frame: Any) -> None:
            # uvicorn stops accepting, finishes the requests in flight, then serve() returns
            if not stopped_at:
                stopped_at.append(time.monotonic())
            server.should_exit = True

        previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            # our handlers, not uvicorn's: uvicorn re-raises the signal after shutdown, which
            # would end the process before the monitor's jobs and the exporters are flushed
            asyncio.run(serve_sockets(server, sockets, signals=False))
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            spent = time.monotonic() - stopped_at[0] if stopped_at else 0.0
            self.shutdown(max(1.0, grace - spent))
        logger.warning("spanjudge worker stopped")
        return 0


def _send_journal(store: Any) -> str | None:
    """Where enrich mode notes the request in flight: beside a SQLite store's file (a worker
    restarted on PostgreSQL may be another host: it sends such a request again)."""
    path = getattr(store, "path", None)
    if not isinstance(path, str) or path == ":memory:":
        return None
    return f"{path}.forwarding"


def _signal_url(endpoint: str | None, signal: str) -> str | None:
    """The downstream URL of one OTLP signal: a base URL gets ``/v1/<signal>`` appended, a URL
    ending in another signal's path gets it swapped (``.../v1/traces`` -> ``.../v1/logs``)."""
    if not endpoint:
        return None
    base = endpoint.rstrip("/")
    for other in ("/v1/traces", "/v1/logs"):
        if base.endswith(other):
            base = base[: -len(other)]
    return f"{base}/v1/{signal}"


class JsonLines(logging.Formatter):
    """One JSON object a line, for log pipelines (Loki, Elasticsearch, CloudWatch): ``time``
    (ISO 8601, UTC), ``level``, ``logger``, ``message`` and ``traceback`` when there is one.
    Messages quoting received data were escaped and cut already (``log_text``); JSON quoting
    keeps them on one line either way."""

    def format(self, record: logging.LogRecord) -> str:
        line = {
            "time": datetime.fromtimestamp(record.created, timezone.utc).isoformat(),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            line["traceback"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False)


def configure_logging(log_format: str) -> None:
    """The worker's root handler, in the settings' ``log_format``."""
    handler = logging.StreamHandler()
    if log_format == "json":
        handler.setFormatter(JsonLines())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=logging.INFO, handlers=[handler])


def run_worker(settings: WorkerSettings) -> int:
    """``spanjudge worker``: every check first (settings, rules, judge, store, the receiver's
    address), then listen. A failure raises before anything listens, naming the setting."""
    configure_logging(settings.log_format)
    worker = Worker(settings)
    try:
        sockets = bind_receiver(settings.receiver_host, settings.receiver_port)
        # after the last check that can refuse the start: a mistake stays the one line printed
        for warning in start_warnings(settings, worker.judge):
            logger.warning("%s", warning)
    except BaseException:
        worker.shutdown()
        raise
    return worker.serve(sockets)


def run_backfill(settings: WorkerSettings, *, since: float, retry_errors: bool = False) -> int:
    """Evaluate what the store holds since ``since`` under the configured rules; with
    ``retry_errors``, the errored results recorded since then are evaluated again too."""
    from rich.progress import Progress

    worker = Worker(settings)
    try:
        with Progress(transient=False) as progress:
            task = progress.add_task("evaluating stored targets", total=None)
            report = worker.monitor.backfill(
                since=since,
                progress=lambda n: progress.advance(task, n),
                retry_errors=retry_errors,
            )
        redone = f"{report.retried_errors} errored results redone, " if retry_errors else ""
        print(
            f"backfill: {redone}{report.planned_traces} traces and "
            f"{report.planned_conversations} "
            f"conversations planned, {report.jobs_enqueued} jobs, {report.scored} scored, "
            f"{report.errors} errors, {report.missing} skipped for missing fields"
        )
        return 1 if report.errors else 0
    finally:
        worker.shutdown()
