"""The decoration-time plan of one ``@observe``-decorated function.

Everything that depends only on the function and the decorator's options (span name, static
attributes, which argument holds the query, the messages or the conversation id, what to capture)
is worked out once, here, so that the per-call path in :mod:`spanjudge.tracer._wrappers` is a few
dict operations. The per-call methods below only read what ``__init__`` decided.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from opentelemetry.util.types import AttributeValue

from spanjudge.errors import ConfigError
from spanjudge.tracer import _attributes as attrs
from spanjudge.tracer import _capture as capture
from spanjudge.tracer import _fast_path as fast_path
from spanjudge.tracer import _messages as messages
from spanjudge.tracer import _span_writes as span_writes
from spanjudge.tracer._attributes import Kind
from spanjudge.tracer._context import CONVERSATION

_INPUT_NAMES = ("input", "query", "question", "message", "prompt", "user_input", "text")
_CONVERSATION_NAMES = ("conversation_id", "session_id")

_Where = fast_path.Where


@dataclass(frozen=True)
class Options:
    """The keyword options of ``observe()``, exactly as the caller gave them."""

    model: str | None = None
    provider: str | None = None
    conversation_id_arg: str | None = None
    input_arg: str | None = None
    tool_call_id: str | None = None
    description: str | None = None
    attributes: Mapping[str, AttributeValue] | None = None
    capture_input: bool = True
    capture_output: bool = True


def check_kind(kind: object) -> None:
    """Fail at decoration time, not on the first call, for a kind outside :data:`attrs.KINDS`."""
    if kind not in attrs.OPERATION_BY_KIND:
        raise ConfigError(f"observe(kind={kind!r}): kind must be one of {attrs.KINDS}")


class Plan:
    """Decoration-time facts about one decorated function."""

    __slots__ = (
        "capture_input",
        "capture_output",
        "conv_arg",
        "conv_from_arg",
        "fixed",
        "hot_end",
        "hot_start",
        "input_arg",
        "kind",
        "messages_arg",
        "model_arg",
        "name",
        "names",
        "skip",
        "span_name",
        "static",
        "tool_call_id",
        "tool_call_id_arg",
        "var_positional",
        "warm",
    )

    def __init__(self, fn: Callable[..., Any], kind: Kind, name: str | None, options: Options):
        check_kind(kind)
        self.kind = kind
        # True once a call of this function was recorded: later calls then capture their inputs
        # before the span starts and hand them to start_span (one attribute pass, not two).
        self.warm = False
        qualname = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or "call"
        # "test.<locals>.f" names a place in the source, not the step: keep the last part.
        self.name = name or qualname.rsplit("<locals>.", 1)[-1]
        try:
            params = list(inspect.signature(fn).parameters.values())
        except (TypeError, ValueError):
            params = []
        positional = [
            p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
        self.names = positional
        self.var_positional = next((p.name for p in params if p.kind == p.VAR_POSITIONAL), None)
        self.skip = 1 if positional and positional[0] in ("self", "cls") else 0
        all_names = {p.name for p in params}

        def arg(candidates: tuple[str, ...]) -> _Where | None:
            for cand in candidates:
                if cand in all_names:
                    return (positional.index(cand) if cand in positional else None, cand)
            return None

        input_arg, conv_arg = options.input_arg, options.conversation_id_arg
        self.input_arg = arg((input_arg,) if input_arg is not None else _INPUT_NAMES)
        self.messages_arg = arg(("messages",))
        self.model_arg = arg(("model",))
        self.conv_arg = arg((conv_arg,) if conv_arg is not None else _CONVERSATION_NAMES)
        self.conv_from_arg = kind == "agent" and self.conv_arg is not None
        self.tool_call_id_arg = arg(("tool_call_id",))
        self.tool_call_id = options.tool_call_id
        self.capture_input = bool(options.capture_input)
        self.capture_output = bool(options.capture_output)
        self.static = self._static(kind, options)
        # No argument can change the span name or the start attributes (conversation() can).
        self.fixed = self.model_arg is None and self.conv_arg is None
        # The fast path for common calls (tracer/_fast_path.py); None: always the general one.
        self.hot_start = (
            fast_path.start_builder(
                kind,
                self.static,
                capture_input=self.capture_input,
                input_arg=self.input_arg,
                messages_arg=self.messages_arg,
                names=self.names,
                skip=self.skip,
                tool_call_id=self.tool_call_id,
                tool_call_id_arg=self.tool_call_id_arg,
            )
            if self.fixed
            else None
        )
        self.hot_end = fast_path.end_writer(kind, self.static) if self.capture_output else None

    def _static(self, kind: Kind, options: Options) -> dict[str, Any]:
        """The attributes every call starts with; also fixes the span name and the model arg."""
        static: dict[str, Any] = {
            attrs.GEN_AI_OPERATION_NAME: attrs.OPERATION_BY_KIND[kind],
            attrs.SPANJUDGE_KIND: kind,
        }
        model, provider = options.model, options.provider
        if kind == "llm" and model and provider is None and "/" in str(model):
            provider = str(model).split("/", 1)[0]  # litellm-style "openai/gpt-4o"
        if model:
            static[attrs.GEN_AI_REQUEST_MODEL] = str(model)
        if provider:
            static[attrs.GEN_AI_PROVIDER_NAME] = str(provider)
        if kind == "llm":
            self.span_name = attrs.span_name("llm", str(model) if model else self.name)
        else:
            self.span_name = attrs.span_name(kind, self.name)
        if kind == "agent":
            static[attrs.GEN_AI_AGENT_NAME] = self.name
        elif kind == "tool":
            static[attrs.GEN_AI_TOOL_NAME] = self.name
            if options.description:
                static[attrs.GEN_AI_TOOL_DESCRIPTION] = str(options.description)
        for key, value in (options.attributes or {}).items():
            static[str(key)] = value
        if kind != "llm" or model:
            self.model_arg = None  # the name is fixed; no per-call model lookup
        return static

    # --- per call -----------------------------------------------------------------------------
    def start_attributes(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        """Static attributes plus what the call's arguments decide before the span starts."""
        conv = CONVERSATION.get()
        conv_id = _value(self.conv_arg, args, kwargs) if self.conv_arg is not None else None
        if conv is None and conv_id is None and self.model_arg is None:
            return self.static
        found = dict(self.static)
        if conv is not None:
            found[attrs.GEN_AI_CONVERSATION_ID] = conv[0]
            if conv[1] is not None:
                found[attrs.SPANJUDGE_USER_ID] = conv[1]
        if conv_id is not None and self.kind == "agent":
            found[attrs.GEN_AI_CONVERSATION_ID] = str(conv_id)
        if self.model_arg is not None:
            model = _value(self.model_arg, args, kwargs)
            if isinstance(model, str) and model:
                found[attrs.GEN_AI_REQUEST_MODEL] = model
                if attrs.GEN_AI_PROVIDER_NAME not in found and "/" in model:
                    found[attrs.GEN_AI_PROVIDER_NAME] = model.split("/", 1)[0]
        return found

    def call_span_name(self, attributes: Mapping[str, Any]) -> str:
        if self.model_arg is not None:
            model = attributes.get(attrs.GEN_AI_REQUEST_MODEL)
            if model:
                return attrs.span_name("llm", model)
        return self.span_name

    def bound(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        """The call's arguments by parameter name (self/cls left out), without inspect."""
        out: dict[str, Any] = {}
        names = self.names
        extra: list[Any] = []
        for i in range(self.skip, len(args)):
            if i < len(names):
                out[names[i]] = args[i]
            else:
                extra.append(args[i])
        if extra:
            out[self.var_positional or "args"] = extra
        out.update(kwargs)
        return out

    def input_text(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if self.input_arg is not None:
            return _value(self.input_arg, args, kwargs)
        for value in args[self.skip :]:
            if isinstance(value, str):
                return value
        for value in kwargs.values():
            if isinstance(value, str):
                return value
        return None

    def input_attributes(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], out: dict[str, Any]
    ) -> dict[str, Any]:
        """Stage the call's input attributes (content policy permitting) into ``out``."""
        kind = self.kind
        if kind == "tool":
            call_id = _value(self.tool_call_id_arg, args, kwargs) if self.tool_call_id_arg else None
            if call_id is None:
                call_id = self.tool_call_id or fast_path.new_call_id()
            out[attrs.GEN_AI_TOOL_CALL_ID] = str(call_id)
        if capture.POLICY.content and self.capture_input:
            if kind == "llm" or kind == "agent":
                input_messages = self._input_messages(args, kwargs)
                span_writes.put(out, attrs.GEN_AI_INPUT_MESSAGES, input_messages)
            elif kind == "retriever":
                query = self.input_text(args, kwargs)
                if query is not None:
                    query_text = capture.serialize(query)
                    span_writes.put(out, attrs.GEN_AI_RETRIEVAL_QUERY_TEXT, query_text)
            elif kind == "tool":
                arguments = capture.dumps(self.bound(args, kwargs))
                span_writes.put(out, attrs.GEN_AI_TOOL_CALL_ARGUMENTS, arguments)
            else:
                arguments = capture.dumps(self.bound(args, kwargs))
                span_writes.put(out, attrs.SPANJUDGE_INPUT, arguments)
        return out

    def on_start(self, span: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Capture the inputs onto a span that is already recording."""
        span_writes.apply(span, self.input_attributes(args, kwargs, {}))

    def _input_messages(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
        """``gen_ai.input.messages`` JSON from the messages argument or the user's text."""
        if self.messages_arg is not None:
            value = _value(self.messages_arg, args, kwargs)
            if value is not None and not isinstance(value, str):
                return capture.dumps(messages.to_semconv_messages(value))
        text = self.input_text(args, kwargs)
        if isinstance(text, str):
            return messages.text_message_json("user", text)
        if text is None:
            first: Any = args[self.skip] if len(args) > self.skip else None
            if messages.looks_like_messages(first):
                return capture.dumps(messages.to_semconv_messages(first))
            text = self.bound(args, kwargs)
        elif messages.looks_like_messages(text):
            return capture.dumps(messages.to_semconv_messages(text))
        return messages.text_message_json("user", capture.serialize(text))

    def on_end(self, span: Any, value: Any, existing: Mapping[str, Any] | None = None) -> None:
        """Record the call's output. ``existing``: the span's attributes if known without reading
        them back (the start attributes, nothing written since); else ``None``."""
        if self.capture_output:
            out: dict[str, Any] = {}
            span_writes.write_output(span, self.kind, value, out, False, existing)
            span_writes.apply(span, out)

    def end_stream(self, span: Any, chunks: list[Any], returned: Any = None) -> None:
        """Record a finished stream's output (called under ``_safe``: odd chunks never raise
        into the consumer). A generator that yields nothing but returns a value is recorded by
        that value."""
        value = returned if not chunks and returned is not None else self.stream_value(chunks)
        self.on_end(span, value)

    def stream_value(self, chunks: list[Any]) -> Any:
        """What a finished stream recorded as its output."""
        if self.kind == "retriever":
            return chunks
        text = messages.stream_text(chunks)
        if self.kind == "llm":
            usage_chunk = next((c for c in reversed(chunks) if messages.field(c, "usage")), None)
            if text is not None:
                response: dict[str, Any] = {
                    "choices": [
                        {"message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
                    ]
                }
                if usage_chunk is not None:
                    response["usage"] = messages.field(usage_chunk, "usage")
                model = messages.field(chunks[-1], "model") if chunks else None
                if isinstance(model, str):
                    response["model"] = model
                return response
            return chunks
        if text is not None and all(isinstance(c, str) for c in chunks):
            return text
        return chunks


def _value(where: _Where | None, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if where is None:
        return None
    index, name = where
    if name in kwargs:
        return kwargs[name]
    if index is not None and index < len(args):
        return args[index]
    return None
