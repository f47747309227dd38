"""A span processor the current test points at its own processor, on the global provider.

The OpenTelemetry global tracer provider can be set once per process, and a processor added to
it stays for good: suites that need spans of ``@observe`` calls each add ONE switch for the
session and point it at their test's processor. (Sharing one suite's session fixture instead
added a second forwarding processor in some orders and delivered spans twice.)
"""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider


class SpanSwitch(SpanProcessor):
    """Forwards finished spans to ``target`` (the processor the current test installed)."""

    target: SpanProcessor | None = None

    def on_end(self, span: ReadableSpan) -> None:
        if self.target is not None:
            self.target.on_end(span)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.target.force_flush(timeout_millis) if self.target is not None else True


def install(switch: SpanSwitch) -> TracerProvider:
    """Add ``switch`` to the global SDK provider (set one if there is none); returns it."""
    current = trace.get_tracer_provider()
    if not isinstance(current, TracerProvider):
        current = TracerProvider()
        trace.set_tracer_provider(current)
    current.add_span_processor(switch)
    return current
