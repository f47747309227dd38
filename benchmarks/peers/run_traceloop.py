"""Runner: OpenLLMetry (``traceloop-sdk``) ``@workflow`` and ``@task`` on the trivial function.

Offline: ``Traceloop.init`` gets the counting in-memory exporter (so no OTLP exporter is
made), batching on (its default BatchSpanProcessor), its own telemetry off, metrics and
logging off, no library instrumentations (none would be on this path), content tracing on.
The base URL is a closed loopback port in case anything still tries to talk to it.
Run inside the traceloop venv made by ``benchmarks/setup_peers.sh``.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

os.environ["TRACELOOP_TELEMETRY"] = "false"
os.environ["TRACELOOP_BASE_URL"] = "http://127.0.0.1:9"
os.environ["TRACELOOP_TRACE_CONTENT"] = "true"  # record inputs/outputs, like the others
os.environ["TRACELOOP_METRICS_ENABLED"] = "false"
os.environ["TRACELOOP_LOGGING_ENABLED"] = "false"
os.environ.pop("TRACELOOP_API_KEY", None)
for _key in [k for k in os.environ if k.startswith("OTEL_EXPORTER_OTLP")]:
    os.environ.pop(_key)

import _harness  # noqa: E402
import _otel  # noqa: E402


def build(args: argparse.Namespace) -> _harness.Setup:
    from traceloop.sdk import Traceloop
    from traceloop.sdk.decorators import task, workflow

    raw_exporter = _otel.CountingExporter()
    raw_provider = _otel.make_provider("batch", raw_exporter)
    raw = _otel.raw_span(raw_provider.get_tracer("bench.raw"), _harness.trivial)

    exporter = _otel.CountingExporter()
    Traceloop.init(
        app_name="overhead-bench",
        exporter=exporter,
        disable_batch=False,
        telemetry_enabled=False,
        instruments=set(),
    )
    from opentelemetry import trace

    provider = trace.get_tracer_provider()

    workflow_fn = workflow(name="trivial")(_harness.trivial)
    task_fn = task(name="trivial")(_harness.trivial)

    def flush() -> None:
        provider.force_flush()  # type: ignore[attr-defined]
        raw_provider.force_flush()

    def shutdown() -> dict[str, object]:
        flush()
        return {
            "spans_exported": exporter.count,
            "raw_spans_exported": raw_exporter.count,
            "last_span": _otel.span_summary(exporter.last),
        }

    return _harness.Setup(
        variants={
            _harness.UNDECORATED: _harness.trivial,
            "raw_otel": raw,
            "traceloop_workflow": workflow_fn,
            "traceloop_task": task_fn,
        },
        flush=flush,
        shutdown=shutdown,
        sample=lambda: _otel.take_last(exporter, raw_exporter),
        info={
            "tracer": "OpenLLMetry traceloop-sdk @workflow / @task",
            "processor": "Traceloop's BatchSpanProcessor -> CountingExporter (in-memory); "
            "raw_otel: its own provider, BatchSpanProcessor -> CountingExporter",
            "content_capture": True,
            "packages": _harness.package_versions("traceloop-sdk", "opentelemetry-sdk"),
        },
    )


if __name__ == "__main__":
    raise SystemExit(_harness.main(build))
