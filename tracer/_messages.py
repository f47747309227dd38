"""GenAI semconv shapes: chat messages, usage and retrieved documents from what apps pass around.

Inputs are duck-typed: OpenAI / litellm response objects, their ``dict`` forms, LangChain-like
documents. Nothing here imports a provider SDK.

>>> to_semconv_messages([{"role": "user", "content": "hi"}])
[{'role': 'user', 'parts': [{'type': 'text', 'content': 'hi'}]}]
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from itertools import islice
from json.encoder import encode_basestring  # the C-accelerated string quoting of json
from typing import Any

from spanjudge.tracer import _capture as capture

Message = dict[str, Any]


def field(obj: Any, name: str, default: Any = None) -> Any:
    """``obj[name]`` for mappings, ``obj.name`` otherwise."""
    if isinstance(obj, Mapping):
        return obj.get(name, default)
    return getattr(obj, name, default)


def text_message(role: str, text: str, finish_reason: str | None = None) -> Message:
    message: Message = {"role": role, "parts": [{"type": "text", "content": text}]}
    if finish_reason is not None:
        message["finish_reason"] = finish_reason
    return message


_TEXT_OPEN = ',"parts":[{"type":"text","content":'
# The JSON around the text of the two messages the decorator writes on every call:
# USER_OPEN + quoted text + TEXT_CLOSE, and ASSISTANT_OPEN + quoted text + STOP_CLOSE.
USER_OPEN = '[{"role":"user"' + _TEXT_OPEN
ASSISTANT_OPEN = '[{"role":"assistant"' + _TEXT_OPEN
TEXT_CLOSE = "}]}]"
STOP_CLOSE = '}],"finish_reason":"stop"}]'
_OPEN_BY_ROLE = {"user": USER_OPEN, "assistant": ASSISTANT_OPEN}


def text_message_json(role: str, text: str, finish_reason: str | None = None) -> str:
    """``[text_message(...)]`` as JSON, built without a general encoder pass (hot path)."""
    if len(text) > capture.POLICY.max_value_length:
        # long text: the careful path cuts the string inside, so the JSON stays valid
        return capture.dumps([text_message(role, text, finish_reason)])
    head = _OPEN_BY_ROLE.get(role) or '[{"role":' + encode_basestring(role) + _TEXT_OPEN
    if finish_reason is None:
        tail = TEXT_CLOSE
    elif finish_reason == "stop":
        tail = STOP_CLOSE
    else:
        tail = '}],"finish_reason":' + encode_basestring(finish_reason) + "}]"
    return head + encode_basestring(capture.valid_text(text)) + tail


def _content_parts(content: Any) -> list[dict[str, Any]]:
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "content": content}]
    if isinstance(content, list):  # OpenAI multi-part content
        parts: list[dict[str, Any]] = []
        for part in content:
            if isinstance(part, str):
                parts.append({"type": "text", "content": part})
            elif field(part, "type") == "text" or field(part, "text") is not None:
                parts.append({"type": "text", "content": field(part, "text", "")})
            else:
                parts.append({"type": str(field(part, "type", "unknown")), "content": part})
        return parts
    return [{"type": "text", "content": content}]


def _tool_call_parts(tool_calls: Any) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    for call in tool_calls or ():
        function = field(call, "function")
        parts.append(
            {
                "type": "tool_call",
                "id": field(call, "id"),
                "name": field(function, "name") if function is not None else field(call, "name"),
                "arguments": field(function, "arguments")
                if function is not None
                else field(call, "arguments"),
            }
        )
    return parts


def convert_message(message: Any) -> Message:
    """One OpenAI-format chat message -> semconv ``{"role", "parts"}``."""
    if isinstance(message, str):
        return text_message("user", message)
    role = str(field(message, "role", "user"))
    if role == "tool":
        return {
            "role": "tool",
            "parts": [
                {
                    "type": "tool_call_response",
                    "id": field(message, "tool_call_id"),
                    "response": field(message, "content"),
                }
            ],
        }
    parts = _content_parts(field(message, "content"))
    parts.extend(_tool_call_parts(field(message, "tool_calls")))
    return {"role": role, "parts": parts}


def looks_like_messages(value: Any) -> bool:
    return (
        isinstance(value, (list, tuple))
        and len(value) > 0
        and all(field(m, "role") is not None for m in value[:3])
    )


def to_semconv_messages(messages: Iterable[Any]) -> list[Message]:
    """The first ``capture.MAX_ITEMS`` messages, converted (a list is cut there, as anywhere)."""
    return [convert_message(m) for m in islice(messages, capture.MAX_ITEMS)]


def output_messages(response: Any) -> list[Message] | None:
    """Assistant messages from a chat response (``choices``) or a plain string; else ``None``."""
    if isinstance(response, str):
        return [text_message("assistant", response, "stop")]
    choices = field(response, "choices")
    if not choices:
        return None
    out: list[Message] = []
    # at most capture.MAX_ITEMS choices: a response with a million of them would otherwise cost
    # the caller minutes and gigabytes before the capture limit cut the text
    for choice in islice(choices, capture.MAX_ITEMS):
        message = field(choice, "message") or field(choice, "delta")
        if message is None:
            text = field(choice, "text")  # legacy completions
            out.append(text_message("assistant", text or "", field(choice, "finish_reason")))
            continue
        converted = convert_message(message)
        converted["role"] = field(message, "role") or "assistant"
        converted["finish_reason"] = field(choice, "finish_reason") or "stop"
        out.append(converted)
    return out


def usage_of(response: Any) -> tuple[int | None, int | None]:
    """(input_tokens, output_tokens) from an OpenAI / litellm / Anthropic-style response."""
    usage = field(response, "usage")
    if usage is None:
        return None, None
    inp = field(usage, "prompt_tokens")
    if inp is None:
        inp = field(usage, "input_tokens")
    out = field(usage, "completion_tokens")
    if out is None:
        out = field(usage, "output_tokens")
    return (
        int(inp) if isinstance(inp, (int, float)) else None,
        int(out) if isinstance(out, (int, float)) else None,
    )


def finish_reasons(response: Any) -> list[str]:
    reasons = []
    for choice in field(response, "choices") or ():
        reason = field(choice, "finish_reason")
        if reason:
            reasons.append(str(reason))
    return reasons


def stream_text(chunks: list[Any]) -> str | None:
    """Join streamed output: text chunks, or ``choices[0].delta.content`` of chat chunks."""
    pieces: list[str] = []
    for chunk in chunks:
        if isinstance(chunk, str):
            pieces.append(chunk)
            continue
        choices = field(chunk, "choices")
        if not choices:
            continue
        delta = field(choices[0], "delta")
        content = field(delta, "content") if delta is not None else field(choices[0], "text")
        if isinstance(content, str):
            pieces.append(content)
    return "".join(pieces) if pieces or not chunks else None


# --- retrieved documents --------------------------------------------------------------------
_TEXT_FIELDS = ("page_content", "content", "text")


def document_fields(doc: Any) -> tuple[Any, Any, Any]:
    """(id, score, text) of one retrieved document in any of the accepted shapes."""
    if isinstance(doc, str):
        return None, None, doc
    if isinstance(doc, (tuple, list)) and len(doc) == 2 and isinstance(doc[1], (int, float)):
        inner_id, _, text = document_fields(doc[0])  # (document, score) pairs
        return inner_id, doc[1], text
    text = None
    for name in _TEXT_FIELDS:
        text = field(doc, name)
        if text is not None:
            break
    doc_id = field(doc, "id")
    metadata = field(doc, "metadata")
    if doc_id is None and metadata is not None:
        doc_id = field(metadata, "id")
    score = field(doc, "score")
    if score is None and metadata is not None:
        score = field(metadata, "score")
    return doc_id, score, text
