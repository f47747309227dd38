"""Runner: spanjudge ``@observe`` next to an undecorated call and a raw OpenTelemetry span.

``--processor batch|simple``: an SDK TracerProvider (set as the global provider, which is
what ``@observe`` uses without ``configure()``) with that processor on the counting in-memory
exporter; the raw span uses a tracer from the same provider, so both pay the same SDK and
processor costs. ``--processor noop``: no SDK at all, the API's no-op provider.

Content capture is on (``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``).
Runs in the project venv; ``--standalone`` prints a summary by itself.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] = "true"
for _key in [k for k in os.environ if k.startswith("OTEL_EXPORTER_OTLP")]:
    os.environ.pop(_key)  # nothing may leave the machine, whatever the shell exported

import _harness  # noqa: E402


def _flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--processor", choices=("batch", "simple", "noop"), default="batch")


def build(args: argparse.Namespace) -> _harness.Setup:
    from opentelemetry import trace

    from spanjudge.tracer import _attributes as attrs

    info: dict[str, Any] = {
        "tracer": "spanjudge @observe",
        "content_capture": True,
        "packages": _harness.package_versions(
            "spanjudge", "opentelemetry-api", "opentelemetry-sdk"
        ),
    }
    flush: Callable[[], None] | None = None
    shutdown: Callable[[], dict[str, Any]] | None = None
    sample: Callable[[], Any] | None = None
    if args.processor == "noop":
        # Nothing sets a provider: trace.get_tracer() returns the API's no-op machinery.
        info["processor"] = "none (OpenTelemetry API no-op provider, no SDK)"
        tracer = trace.get_tracer("bench.raw")
    else:
        import _otel

        exporter = _otel.CountingExporter()
        provider = _otel.make_provider(args.processor, exporter)
        trace.set_tracer_provider(provider)
        tracer = provider.get_tracer("bench.raw")
        info["processor"] = _otel.describe(args.processor)

        def _flush() -> None:
            provider.force_flush()

        def _shutdown() -> dict[str, Any]:
            provider.force_flush()
            return {"spans_exported": exporter.count}

        def _sample() -> Any:
            return _otel.take_last(exporter)

        flush, shutdown, sample = _flush, _shutdown, _sample

    fn = _harness.trivial

    def raw_otel(question: str) -> Any:
        with tracer.start_as_current_span("trivial"):
            return fn(question)

    # The hand-written equivalent of what @observe(kind="llm") records: the same keys, the
    # arguments and result serialised to the semconv message JSON. Shows what the attributes
    # themselves cost, apart from the decorator machinery.
    def raw_otel_genai(question: str) -> Any:
        with tracer.start_as_current_span("chat trivial") as span:
            span.set_attribute(attrs.GEN_AI_OPERATION_NAME, "chat")
            span.set_attribute(attrs.SPANJUDGE_KIND, "llm")
            span.set_attribute(
                attrs.GEN_AI_INPUT_MESSAGES,
                json.dumps([{"role": "user", "parts": [{"type": "text", "content": question}]}]),
            )
            result = fn(question)
            span.set_attribute(
                attrs.GEN_AI_OUTPUT_MESSAGES,
                json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": result}]}]),
            )
            return result

    variants: dict[str, Any] = {
        _harness.UNDECORATED: fn,
        "raw_otel": raw_otel,
        "raw_otel_genai_attrs": raw_otel_genai,
    }
    errors: dict[str, str] = {}
    try:
        from spanjudge import conversation, observe
        from spanjudge.tracer._attributes import KINDS

        for kind in KINDS:  # every kind the decorator has
            variants[f"observe_{kind}"] = observe(kind=kind)(_harness.trivial)
        variants.update(_shape_variants(observe, conversation))
    except Exception as exc:  # the tracer not being there yet is a result to report
        errors["observe"] = repr(exc)
    return _harness.Setup(
        variants=variants, flush=flush, shutdown=shutdown, info=info, errors=errors, sample=sample
    )


# Kinds whose fast path takes the call's arguments two ways: as argument JSON (tool, chain) and
# as one text (retriever, llm, agent); one of each stands for its family in the shape variants.
SHAPE_KINDS = ("tool", "retriever")


def _shape_variants(observe: Any, conversation: Any) -> dict[str, Callable[[str], Any]]:
    """The same call in the two other shapes apps use most: the argument by keyword, and a call
    inside a ``conversation()`` block (its ids go on the span). Each is one Python call more than
    the plain variant (the keyword call's wrapper; ``Context.run``), counted in its overhead."""
    import contextvars
    import functools

    inside = contextvars.copy_context()  # a context where a conversation() block is open
    inside.run(conversation("bench-conversation", user_id="bench-user").__enter__)
    out: dict[str, Callable[[str], Any]] = {}
    for kind in SHAPE_KINDS:
        decorated = observe(kind=kind)(_harness.trivial)

        def by_keyword(question: str, decorated: Any = decorated) -> Any:
            return decorated(question=question)

        out[f"observe_{kind}_by_keyword"] = by_keyword
        out[f"observe_{kind}_in_conversation"] = functools.partial(inside.run, decorated)
    return out


if __name__ == "__main__":
    raise SystemExit(_harness.main(build, _flags))
