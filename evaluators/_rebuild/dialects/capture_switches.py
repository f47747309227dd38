"""Which switch turns content capture on, by the instrumentation that wrote a span: the one
table of it (documented in ``docs/other-libraries.md``, "Content capture switches").

A model call with no content at all was written by an instrumentation that records content only
when told to. The skip reason names that instrumentation's own switch, found by the span's
instrumentation scope name (the longest prefix in :data:`SWITCHES` wins); an instrumentation not
in the table is named by its scope, plainly, without guessing a setting it may not read. The
dialects whose libraries say so on the span itself (OpenInference, OpenLLMetry, pydantic-ai,
the Vercel AI SDK) name their settings themselves, before this table is asked.

Example::

    missing_content(span)
    # "opentelemetry.util.genai.handler recorded no message content
    #  (OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT is off, ...)"
"""

from __future__ import annotations

from spanjudge._core.span_record import SpanRecord

GENAI_CAPTURE = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
_GENAI_SWITCH = (
    f"{GENAI_CAPTURE} is off, or the content went out as log records that did not reach "
    "spanjudge's /v1/logs"
)

SWITCHES: dict[str, str] = {
    # the OpenTelemetry contrib GenAI instrumentations and their shared utility
    "opentelemetry.instrumentation.": _GENAI_SWITCH,
    "opentelemetry.util.genai": _GENAI_SWITCH,
    # our own tracer reads the same variable (tracer/_capture.py)
    "spanjudge": _GENAI_SWITCH,
    # Google ADK: its own variable, and the GenAI one in releases that follow the semconv
    "gcp.vertex.agent": f"ADK_CAPTURE_MESSAGE_CONTENT_IN_SPANS is false, or {_GENAI_SWITCH}",
    "google.adk": f"ADK_CAPTURE_MESSAGE_CONTENT_IN_SPANS is false, or {_GENAI_SWITCH}",
    # Semantic Kernel and the Microsoft Agent Framework
    "Microsoft.SemanticKernel": (
        "SEMANTICKERNEL_EXPERIMENTAL_GENAI_ENABLE_OTEL_DIAGNOSTICS_SENSITIVE is not true"
    ),
    "semantic_kernel": (
        "SEMANTICKERNEL_EXPERIMENTAL_GENAI_ENABLE_OTEL_DIAGNOSTICS_SENSITIVE is not true"
    ),
    "agent_framework": "ENABLE_SENSITIVE_DATA is not true (or enable_sensitive_data=False)",
    # OpenLIT
    "openlit": "OPENLIT_CAPTURE_MESSAGE_CONTENT is false (or capture_message_content=False)",
}
"""Scope name prefix -> what is off when that instrumentation recorded no content."""


def switch_of(scope_name: str | None) -> str | None:
    """The entry of :data:`SWITCHES` for ``scope_name`` (longest prefix), else ``None``."""
    if not scope_name:
        return None
    hits = [prefix for prefix in SWITCHES if scope_name.startswith(prefix)]
    return SWITCHES[max(hits, key=len)] if hits else None


def missing_content(span: SpanRecord) -> str:
    """Why a model call carries no content, naming the instrumentation that wrote it and, when
    the table knows it, the switch that turns its content capture on."""
    scope = span.scope_name
    switch = switch_of(scope)
    if switch is not None:
        return f"message content was not captured by {scope} ({switch})"
    if scope:
        return (
            f"the instrumentation {scope!r} recorded no message content (its content switch "
            "is not in spanjudge's table: see its documentation)"
        )
    return (
        "the instrumentation that wrote it (no scope name on the span) recorded no message content"
    )
