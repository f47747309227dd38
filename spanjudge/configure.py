"""``spanjudge.configure()``: export spans over OTLP/HTTP and set the capture policy; optionally
keep the GenAI content log events of instrumentations in a store (in-process mode).

The SDK and the OTLP exporter are imported inside :func:`configure`, so ``import spanjudge``
does not pay for protobuf and requests.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from spanjudge.tracer import _capture as capture

if TYPE_CHECKING:
    from opentelemetry.sdk._logs import LoggerProvider, LogRecordProcessor
    from opentelemetry.sdk.trace import SpanProcessor, TracerProvider

    from spanjudge._store.sql import SpanStore

logger = logging.getLogger("spanjudge")

# processors configure() added, per provider, by what they are: a second call with the same
# settings finds them here and adds nothing.
_REGISTRY_ATTR = "_spanjudge_processors"
_lock = threading.Lock()


@dataclass
class Tracing:
    """What :func:`configure` set up; ``shutdown()`` at exit flushes and stops it.

    When spanjudge created the provider, ``shutdown()`` shuts it down; when it added to the
    application's provider, only spanjudge's processors are stopped.
    """

    provider: TracerProvider
    processors: list[SpanProcessor] = field(default_factory=list)
    owns_provider: bool = False
    # configure(log_store=...): the logger provider and the store's log record processor
    logger_provider: LoggerProvider | None = None
    log_processors: list[LogRecordProcessor] = field(default_factory=list)
    owns_logger_provider: bool = False

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        ok = True
        for processor in self.processors:
            ok = processor.force_flush(timeout_millis) and ok
        for log_processor in self.log_processors:
            ok = log_processor.force_flush(timeout_millis) and ok
        return ok

    def shutdown(self) -> None:
        _stop(self.provider, self.processors, owns=self.owns_provider)
        if self.logger_provider is not None:
            _stop(self.logger_provider, self.log_processors, owns=self.owns_logger_provider)


def _stop(provider: Any, processors: list[Any], *, owns: bool) -> None:
    registry: dict[Any, Any] = getattr(provider, _REGISTRY_ATTR, {})
    with _lock:
        for key in [k for k, p in registry.items() if p in processors]:
            del registry[key]
    if owns:
        provider.shutdown()
        return
    for processor in processors:
        processor.shutdown()


def _traces_url(endpoint: str) -> str:
    # Like OTEL_EXPORTER_OTLP_ENDPOINT: a base URL gets the signal path appended.
    endpoint = endpoint.rstrip("/")
    return endpoint if endpoint.endswith("/v1/traces") else endpoint + "/v1/traces"


def configure(
    service_name: str | None = None,
    otlp_endpoint: str | None = None,
    headers: Mapping[str, str] | None = None,
    *,
    capture_content: bool | None = None,
    max_value_length: int | None = None,
    redact: Callable[[str, str], str] | None = None,
    pii: bool | None = None,
    span_processors: Iterable[SpanProcessor] = (),
    export_otlp: bool = True,
    resource_attributes: Mapping[str, str] | None = None,
    log_store: SpanStore | None = None,
) -> Tracing:
    """Send ``@observe`` spans over OTLP/HTTP (protobuf) and set what they capture.

    Standard variables apply when an argument is left out: ``OTEL_SERVICE_NAME``,
    ``OTEL_RESOURCE_ATTRIBUTES``, ``OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT``,
    ``OTEL_EXPORTER_OTLP_(TRACES_)HEADERS``, ... If the application already installed an SDK
    ``TracerProvider``, spanjudge adds its processors to it instead of replacing it. Calling again
    with the same settings adds nothing. ``span_processors`` are added too (once each).

    ``capture_content`` defaults to ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` (on
    when unset); ``redact(key, value) -> value`` sees every captured string before it leaves the
    process; ``pii=True`` masks emails, phone and card numbers.

    ``log_store`` (opt-in): instrumentations that send message content as log records (the
    official OpenAI instrumentation's ``event_only`` mode) have their GenAI content events
    written to this store, to be read with their spans. The processor goes on the installed SDK
    ``LoggerProvider``, or on one spanjudge installs (with the tracer provider's resource)::

        tracing = spanjudge.configure(service_name="support-bot",
                                      otlp_endpoint="http://localhost:4318")
        ...
        tracing.shutdown()
    """
    from opentelemetry import trace
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    capture.set_policy(
        content=capture_content if capture_content is not None else capture._content_from_env(),
        max_value_length=max_value_length,
        redact=redact,
        pii=pii,
    )

    with _lock:
        current = trace.get_tracer_provider()
        owns = False
        if isinstance(current, TracerProvider):
            provider = current
            owns = bool(getattr(provider, "_spanjudge_owned", False))
        else:
            resource_values: dict[str, Any] = dict(resource_attributes or {})
            if service_name:
                resource_values[SERVICE_NAME] = service_name
            # Resource.create merges OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME underneath.
            provider = TracerProvider(resource=Resource.create(resource_values))
            provider._spanjudge_owned = True  # type: ignore[attr-defined]
            trace.set_tracer_provider(provider)
            if trace.get_tracer_provider() is not provider:
                logger.warning(
                    "spanjudge.configure(): a non-SDK tracer provider is already installed; "
                    "spans from @observe go to it, not to the exporter configured here"
                )
            owns = True
        if not owns and service_name:
            logger.debug(
                "configure(service_name=...) ignored: the existing provider keeps its resource"
            )
        registry: dict[Any, SpanProcessor] = getattr(provider, _REGISTRY_ATTR, None) or {}
        setattr(provider, _REGISTRY_ATTR, registry)

        wanted: list[tuple[Any, Callable[[], SpanProcessor]]] = []
        if export_otlp:
            url = _traces_url(otlp_endpoint) if otlp_endpoint else None
            key = ("otlp", url or _env_endpoint(), tuple(sorted((headers or {}).items())))

            def make_otlp() -> SpanProcessor:
                from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
                    OTLPSpanExporter,
                )

                exporter = OTLPSpanExporter(
                    endpoint=url, headers=dict(headers) if headers is not None else None
                )
                return BatchSpanProcessor(exporter)

            wanted.append((key, make_otlp))
        for extra in span_processors:
            wanted.append((("processor", id(extra)), functools.partial(_same, extra)))

        mine: list[SpanProcessor] = []
        for key, make in wanted:
            processor = registry.get(key)
            if processor is None:
                processor = make()
                provider.add_span_processor(processor)
                registry[key] = processor
            mine.append(processor)
        tracing = Tracing(provider=provider, processors=mine, owns_provider=owns)
        if log_store is not None:
            _add_log_store(tracing, log_store)
    return tracing


def _add_log_store(tracing: Tracing, store: SpanStore) -> None:
    """Put the store's log record processor on the global SDK logger provider (installing one
    when there is none), once per store; the caller holds ``_lock``."""
    from opentelemetry import _logs
    from opentelemetry.sdk._logs import LoggerProvider

    from spanjudge.exporters._store_logs import store_log_processor

    current = _logs.get_logger_provider()
    if isinstance(current, LoggerProvider):
        logger_provider = current
        owns = bool(getattr(current, "_spanjudge_owned", False))
    else:
        logger_provider = LoggerProvider(resource=tracing.provider.resource)
        logger_provider._spanjudge_owned = True  # type: ignore[attr-defined]
        _logs.set_logger_provider(logger_provider)
        if _logs.get_logger_provider() is not logger_provider:
            logger.warning(
                "spanjudge.configure(log_store=...): a non-SDK logger provider is already "
                "installed; GenAI content log records go to it, not to the store"
            )
        owns = True
    registry: dict[Any, LogRecordProcessor] = getattr(logger_provider, _REGISTRY_ATTR, None) or {}
    setattr(logger_provider, _REGISTRY_ATTR, registry)
    key = ("log_store", id(store))
    processor = registry.get(key)
    if processor is None:
        processor = store_log_processor(store)
        logger_provider.add_log_record_processor(processor)
        registry[key] = processor
    tracing.logger_provider = logger_provider
    tracing.log_processors = [processor]
    tracing.owns_logger_provider = owns


def _same(processor: SpanProcessor) -> SpanProcessor:
    return processor


def _env_endpoint() -> str | None:
    return os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or os.environ.get(
        "OTEL_EXPORTER_OTLP_ENDPOINT"
    )
