"""Runner: Langfuse ``@observe`` (langfuse SDK, OpenTelemetry based) on the trivial function.

Offline: keys are dummies, the base URL is a closed loopback port, and the spans go to the
harness's counting in-memory exporter through Langfuse's own span processor (a
BatchSpanProcessor subclass; Langfuse offers no synchronous one). Run inside the langfuse venv
made by ``benchmarks/setup_peers.sh``; ``--standalone`` prints a summary by itself.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# Before the import: the SDK reads these at client creation. Nothing may leave the machine.
os.environ.setdefault("LANGFUSE_PUBLIC_KEY", "pk-lf-benchmark")
os.environ.setdefault("LANGFUSE_SECRET_KEY", "sk-lf-benchmark")
os.environ["LANGFUSE_HOST"] = "http://127.0.0.1:9"
os.environ["LANGFUSE_BASE_URL"] = "http://127.0.0.1:9"
os.environ["LANGFUSE_OBSERVE_DECORATOR_IO_CAPTURE_ENABLED"] = "true"  # content capture on
os.environ.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)

import _harness
import _otel


def build(args: argparse.Namespace) -> _harness.Setup:
    from langfuse import Langfuse, observe

    exporter = _otel.CountingExporter()
    # Raw OTel reference in this same process/venv, on its own provider (same processor kind).
    raw_exporter = _otel.CountingExporter()
    raw_provider = _otel.make_provider("batch", raw_exporter)
    raw = _otel.raw_span(raw_provider.get_tracer("bench.raw"), _harness.trivial)

    from opentelemetry.sdk.trace import TracerProvider

    provider = TracerProvider()
    client = Langfuse(tracer_provider=provider, span_exporter=exporter)

    span_fn = observe(name="trivial")(_harness.trivial)
    generation_fn = observe(name="trivial", as_type="generation")(_harness.trivial)
    retriever_fn = observe(name="trivial", as_type="retriever")(_harness.trivial)

    def flush() -> None:
        provider.force_flush()
        raw_provider.force_flush()

    def shutdown() -> dict[str, object]:
        client.flush()
        raw_provider.force_flush()
        return {
            "spans_exported": exporter.count,
            "raw_spans_exported": raw_exporter.count,
            "last_span": _otel.span_summary(exporter.last),
        }

    return _harness.Setup(
        variants={
            _harness.UNDECORATED: _harness.trivial,
            "raw_otel": raw,
            "langfuse_observe": span_fn,
            "langfuse_observe_generation": generation_fn,
            "langfuse_observe_retriever": retriever_fn,
        },
        flush=flush,
        shutdown=shutdown,
        sample=lambda: _otel.take_last(exporter, raw_exporter),
        info={
            "tracer": "langfuse @observe",
            "processor": "LangfuseSpanProcessor (BatchSpanProcessor subclass) -> "
            "CountingExporter (in-memory)",
            "content_capture": True,
            "packages": _harness.package_versions("langfuse", "opentelemetry-sdk"),
        },
    )


if __name__ == "__main__":
    raise SystemExit(_harness.main(build))
