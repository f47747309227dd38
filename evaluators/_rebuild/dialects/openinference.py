"""OpenInference (Arize Phoenix's conventions; its instrumentations for OpenAI, LangChain,
LlamaIndex, DSPy...): ``openinference.span.kind``, flattened message lists
(``llm.input_messages.N.message.role``/``content``, also ``...message.contents.M...``),
``input.value``/``output.value`` with their mime types, flattened or JSON
``retrieval.documents``, ``tool.*``, ``session.id``, ``user.id``, ``agent.name``.

Hidden content (``OPENINFERENCE_HIDE_*``) is written as ``__REDACTED__`` or left out; a span
that shows it names those settings in ``capture_off``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from spanjudge._core.span_record import SpanRecord
from spanjudge.evaluators._rebuild.dialects import semconv, tool_calls
from spanjudge.evaluators._rebuild.dialects.message_text import (
    INPUT_KEYS,
    OUTPUT_KEYS,
    assistant_text,
    captured_text,
    document_texts,
    last_user_text,
    maybe_json,
    system_text,
)
from spanjudge.evaluators._rebuild.dialects.view import (
    Document,
    GenAIView,
    ToolCallView,
    ViewKind,
)

NAME = "openinference"

SPAN_KIND = "openinference.span.kind"
REDACTED = "__REDACTED__"
CAPTURE_SETTING = (
    "OpenInference hid the content (OPENINFERENCE_HIDE_INPUTS, OPENINFERENCE_HIDE_OUTPUTS, "
    "OPENINFERENCE_HIDE_INPUT_MESSAGES, OPENINFERENCE_HIDE_OUTPUT_MESSAGES, "
    "OPENINFERENCE_HIDE_RETRIEVAL_DOCUMENTS or TraceConfig)"
)
_KINDS: dict[str, ViewKind] = {
    "LLM": "llm",
    "AGENT": "agent",
    "RETRIEVER": "retriever",
    "TOOL": "tool",
    "CHAIN": "chain",
    "EMBEDDING": "chain",
    "RERANKER": "chain",
    "PROMPT": "chain",
    "GUARDRAIL": "chain",
    "EVALUATOR": "chain",
}
_MESSAGE = re.compile(r"^llm\.(input|output)_messages\.(\d+)\.message\.(.+)$")
_DOC = re.compile(r"^retrieval\.documents\.(\d+)\.document\.(id|score|content)$")


def matches(span: SpanRecord) -> bool:
    return isinstance(span.attributes.get(SPAN_KIND), str)


def kind_of(span: SpanRecord) -> ViewKind | None:
    return _KINDS.get(str(span.attributes.get(SPAN_KIND, "")).upper())


def read(view: GenAIView) -> None:
    a = view.span.attributes
    view.kind = kind_of(view.span)
    view.conversation_id = _str(a.get("session.id"))
    view.user_id = _str(a.get("user.id"))
    view.agent_name = _str(a.get("agent.name")) or _str(a.get("graph.node.name"))
    view.model = _str(a.get("llm.model_name"))
    redacted = any(v == REDACTED for v in a.values())
    inputs, outputs = _messages(a)
    if inputs:
        view.input_text = _clean(last_user_text(inputs))
        view.system_text = _clean(system_text(inputs))
    if outputs:
        view.output_text = _clean(assistant_text(outputs))
        if view.output_text is None:
            _tool_call_answer(view, outputs)
    if view.input_text is None:
        view.input_text = _clean(_value_text(view, "input.value", "input"))
    if view.output_text is None and "actual_output" not in view.notes:
        view.output_text = _clean(_value_text(view, "output.value", "actual_output"))
    if view.kind == "retriever":
        view.documents = _documents(view)
        if view.documents and all(d.text in (None, REDACTED) for d in view.documents):
            redacted = True
            for doc in view.documents:
                doc.text = None
    if view.kind == "tool":
        name = _str(a.get("tool.name")) or view.span.name
        view.tool = ToolCallView(
            name=name,
            arguments=maybe_json(_clean(_str(a.get("input.value")))),
            result=maybe_json(_clean(_str(a.get("output.value")))),
            description=_str(a.get("tool.description")),
        )
    if redacted or _hidden(view):
        view.capture_off = CAPTURE_SETTING
    semconv.read(view)  # gen_ai.* attributes some OpenInference versions add


def _messages(a: Mapping[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    found: dict[str, dict[int, dict[str, Any]]] = {"input": {}, "output": {}}
    for key, value in a.items():
        match = _MESSAGE.match(key)
        if not match:
            continue
        side, index, rest = match.group(1), int(match.group(2)), match.group(3)
        message = found[side].setdefault(index, {})
        if rest in ("role", "content"):
            message[rest] = value
        elif rest.endswith("message_content.text") and isinstance(value, str):
            message.setdefault("parts", []).append({"type": "text", "content": value})
        elif rest.startswith("tool_calls.") and rest.endswith((".name", ".arguments")):
            # tool_calls.N.tool_call.function.{name,arguments}
            call_index, _, field = rest[len("tool_calls.") :].partition(".")
            calls = message.setdefault("tool_calls", {})
            calls.setdefault(call_index, {})[field.rsplit(".", 1)[-1]] = value
    return (
        [found["input"][i] for i in sorted(found["input"])],
        [found["output"][i] for i in sorted(found["output"])],
    )


def _tool_call_answer(view: GenAIView, outputs: list[dict[str, Any]]) -> None:
    """An output of tool calls only: the answer when it is a final-answer tool's call, else a
    note (not the ``output.value`` dump of the response object)."""
    calls = [c for m in outputs for c in (m.get("tool_calls") or {}).values()]
    if not calls:
        return
    for call in calls:
        answer = tool_calls.final_answer(call.get("name"), call.get("arguments"))
        if answer:
            view.output_text = answer
            view.source("actual_output", f"final-answer tool call {call.get('name')}")
            return
    view.note(
        "actual_output",
        f"span {view.span.span_id} ({view.span.name!r}): the model answered with tool calls "
        "only, no text",
    )


def _value_text(view: GenAIView, key: str, field_name: str) -> str | None:
    value = semconv.raw(view, key, field_name)
    if not isinstance(value, str) or not value.strip():
        return None
    parsed = maybe_json(value)
    want_input = field_name == "input"
    if isinstance(parsed, Mapping) and isinstance(parsed.get("choices"), list):
        return assistant_text(parsed["choices"])  # a raw chat completion response
    keys = INPUT_KEYS if want_input else OUTPUT_KEYS
    return captured_text(parsed, keys, want_input)


def _documents(view: GenAIView) -> list[Document] | None:
    a = view.span.attributes
    docs: dict[int, Document] = {}
    for key, value in a.items():
        match = _DOC.match(key)
        if not match:
            continue
        doc = docs.setdefault(int(match.group(1)), Document(None))
        field = match.group(2)
        if field == "content" and isinstance(value, str):
            doc.text = value
        elif field == "id" and value is not None:
            doc.id = str(value)
        elif field == "score" and isinstance(value, int | float) and not isinstance(value, bool):
            doc.score = float(value)
    if docs:
        return [docs[i] for i in sorted(docs)]
    value = maybe_json(a.get("retrieval.documents"))  # the JSON form
    if isinstance(value, list):
        return [Document(t) for t in document_texts(value)]
    texts = document_texts(maybe_json(a.get("output.value")))
    return [Document(t) for t in texts] if texts else None


def _hidden(view: GenAIView) -> bool:
    """Text fields absent on a kind that always has them, with no reason: hidden on purpose."""
    a = view.span.attributes
    if view.kind == "llm":
        return not any(_MESSAGE.match(k) for k in a) and "input.value" not in a
    # an agent span without input.value/output.value is not evidence: many frameworks keep
    # the turn's text on its model calls only
    return False


def _clean(value: str | None) -> str | None:
    return None if value is None or value == REDACTED else value


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None
