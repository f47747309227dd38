"""Per-request context: ``conversation()`` and the handle to the current span.

Both live in :mod:`contextvars`, so they follow ``asyncio`` tasks and
``contextvars.copy_context().run(...)`` into threads like the OpenTelemetry context does.
"""

from __future__ import annotations

import contextvars
import json
from collections.abc import Mapping
from types import TracebackType
from typing import Any

from opentelemetry import trace

from spanjudge.tracer import _attributes as attrs
from spanjudge.tracer import _capture as capture
from spanjudge.tracer import _span_writes as span_writes

# (conversation id, user id) of the enclosing conversation() block, or None
CONVERSATION: contextvars.ContextVar[tuple[str, str | None] | None] = contextvars.ContextVar(
    "spanjudge_conversation", default=None
)


class conversation:
    """Put ``gen_ai.conversation.id`` (and ``spanjudge.user.id``) on every span started inside.

    Works with ``with`` and ``async with``; nests (the innermost id wins)::

        with conversation("chat-42", user_id="u-7"):
            answer(question)
    """

    __slots__ = ("_token", "id", "user_id")

    def __init__(self, id: str, user_id: str | None = None) -> None:
        self.id = str(id)
        self.user_id = None if user_id is None else str(user_id)
        self._token: contextvars.Token[tuple[str, str | None] | None] | None = None

    def __enter__(self) -> conversation:
        self._token = CONVERSATION.set((self.id, self.user_id))
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._token is not None:
            CONVERSATION.reset(self._token)
            self._token = None

    async def __aenter__(self) -> conversation:
        return self.__enter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.__exit__(exc_type, exc, tb)


def _span_attributes(span: Any) -> Mapping[str, Any]:
    try:
        found = getattr(span, "attributes", None)
        return found if found is not None else {}
    except Exception:
        return {}


def _attribute_value(value: Any) -> Any:
    """A value OpenTelemetry accepts: primitives and homogeneous primitive lists as they are."""
    if isinstance(value, (str, bool, int, float)):
        return value
    if (
        isinstance(value, (list, tuple))
        and value
        and all(isinstance(v, (str, bool, int, float)) for v in value)
        and len({type(v) for v in value}) == 1
    ):
        return list(value)
    return capture.serialize(value)


# Bumped by every handle write the decorator must respect (output, usage, model). A decorated
# call compares it before and after: unchanged means it need not read its span's attributes back.
writes = 0


def _wrote() -> None:
    global writes
    writes += 1


class SpanHandle:
    """User annotations on the span of the enclosing ``@observe`` call; a no-op outside one.

    No method raises::

        @observe(kind="llm")
        def call(prompt: str) -> str:
            span = current_span()
            span.set_model("gpt-4o-mini")
            span.set_usage(input_tokens=12, output_tokens=30)
            span.set_metadata(experiment="b")
            return "..."
    """

    __slots__ = ("_span",)

    def __init__(self, span: Any) -> None:
        self._span = span

    @property
    def recording(self) -> bool:
        try:
            return bool(self._span.is_recording())
        except Exception:
            return False

    def _kind(self) -> str | None:
        kind = _span_attributes(self._span).get(attrs.SPANJUDGE_KIND)
        return kind if isinstance(kind, str) else None

    def set_attribute(self, key: str, value: Any) -> None:
        """Set one attribute; non-primitive values are stored as JSON."""
        if not self.recording:
            return
        try:
            value = _attribute_value(value)
            if isinstance(value, str):
                value, _ = capture.finish(key, value)
            self._span.set_attribute(key, value)
        except Exception as exc:
            capture.note_failure(exc)

    def set_attributes(self, values: Mapping[str, Any]) -> None:
        for key, value in values.items():
            self.set_attribute(key, value)

    def set_usage(self, input_tokens: int | None = None, output_tokens: int | None = None) -> None:
        """Token usage; the decorator will not overwrite it from the response."""
        _wrote()
        if input_tokens is not None:
            self.set_attribute(attrs.GEN_AI_USAGE_INPUT_TOKENS, int(input_tokens))
        if output_tokens is not None:
            self.set_attribute(attrs.GEN_AI_USAGE_OUTPUT_TOKENS, int(output_tokens))

    def set_metadata(self, **values: Any) -> None:
        """Merge ``values`` into the span's ``spanjudge.metadata`` JSON object."""
        if not self.recording:
            return
        try:
            merged: dict[str, Any] = {}
            existing = _span_attributes(self._span).get(attrs.SPANJUDGE_METADATA)
            if isinstance(existing, str):
                try:
                    loaded = json.loads(existing)
                    if isinstance(loaded, dict):
                        merged.update(loaded)
                except ValueError:
                    pass
            merged.update(capture.to_jsonable(values))
            self.set_attribute(attrs.SPANJUDGE_METADATA, capture.dumps(merged))
        except Exception as exc:
            capture.note_failure(exc)

    def set_model(self, model: str, provider: str | None = None) -> None:
        """The requested model (and provider); an LLM span is renamed ``chat {model}``."""
        _wrote()
        if not self.recording:
            return
        try:
            self._span.set_attribute(attrs.GEN_AI_REQUEST_MODEL, str(model))
            if provider is not None:
                self._span.set_attribute(attrs.GEN_AI_PROVIDER_NAME, str(provider))
            if self._kind() == "llm":
                self._span.update_name(attrs.span_name("llm", str(model)))
        except Exception as exc:
            capture.note_failure(exc)

    def set_output(self, value: Any) -> None:
        """The span's output, recorded in the kind's attribute instead of the return value."""
        _wrote()
        if not self.recording:
            return
        try:
            out: dict[str, Any] = {}
            span_writes.write_output(self._span, self._kind() or "chain", value, out, True)
            span_writes.apply(self._span, out)
        except Exception as exc:
            capture.note_failure(exc)

    def __bool__(self) -> bool:
        return self.recording


def current_span() -> SpanHandle:
    """A handle to the current span (see :class:`SpanHandle`); no-op when none is recording."""
    return SpanHandle(trace.get_current_span())
