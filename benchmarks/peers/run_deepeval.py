"""Runner: deepeval ``@observe`` (``deepeval.tracing``) on the trivial function.

deepeval's tracing is its own (not OpenTelemetry): every decorated call builds a span and a
trace object in memory; at the end of a trace it would queue the trace for upload to
Confident AI, but only with a Confident API key. None is set here, so nothing is queued or
sent: the figure is deepeval's capture cost without export, a lower bound of what it costs
when uploading. Telemetry is opted out and trace logging is quiet (it would print per call).
Run inside the deepeval venv made by ``benchmarks/setup_peers.sh``.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

for _key in ("CONFIDENT_API_KEY", "API_KEY"):
    os.environ.pop(_key, None)  # no key: nothing is ever queued for upload
os.environ["DEEPEVAL_TELEMETRY_OPT_OUT"] = "1"
os.environ["DEEPEVAL_UPDATE_WARNING_OPT_IN"] = "0"
os.environ["DEEPEVAL_DISABLE_LEGACY_KEYFILE"] = "1"
os.environ["CONFIDENT_TRACE_VERBOSE"] = "0"
os.environ["CONFIDENT_TRACE_FLUSH"] = "0"
os.environ["CONFIDENT_BASE_URL"] = "http://127.0.0.1:9"
os.environ["ERROR_REPORTING"] = "0"

import _harness  # noqa: E402
import _otel  # noqa: E402


def build(args: argparse.Namespace) -> _harness.Setup:
    from deepeval.tracing import observe

    raw_exporter = _otel.CountingExporter()
    raw_provider = _otel.make_provider("batch", raw_exporter)
    raw = _otel.raw_span(raw_provider.get_tracer("bench.raw"), _harness.trivial)

    llm_fn = observe(type="llm", model="gpt-4o-mini")(_harness.trivial)
    retriever_fn = observe(type="retriever", embedder="text-embedding-3-small")(_harness.trivial)
    plain_fn = observe()(_harness.trivial)

    def flush() -> None:
        raw_provider.force_flush()

    def shutdown() -> dict[str, object]:
        from deepeval.tracing.tracing import trace_manager

        raw_provider.force_flush()
        return {
            "raw_spans_exported": raw_exporter.count,
            "active_traces_left": len(getattr(trace_manager, "active_traces", {})),
        }

    return _harness.Setup(
        variants={
            _harness.UNDECORATED: _harness.trivial,
            "raw_otel": raw,
            "deepeval_observe": plain_fn,
            "deepeval_observe_llm": llm_fn,
            "deepeval_observe_retriever": retriever_fn,
        },
        flush=flush,
        shutdown=shutdown,
        sample=lambda: _otel.take_last(raw_exporter),
        info={
            "tracer": "deepeval @observe (deepeval.tracing)",
            "processor": "deepeval trace manager; no Confident API key, so no upload "
            "(capture cost only); raw_otel: BatchSpanProcessor -> CountingExporter",
            "content_capture": True,
            "packages": _harness.package_versions("deepeval", "opentelemetry-sdk"),
        },
    )


if __name__ == "__main__":
    raise SystemExit(_harness.main(build))
