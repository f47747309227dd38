"""The shapes of a misread: text that is not what a field should hold, recognised here (a check)
and, where a general rule can, read into what it stands for (a reader). Shared by the view's
general rules (:mod:`.common_rules`, which read what they can) and the plausibility gate
(:mod:`spanjudge.evaluators._rebuild.plausibility`, which refuses what is left).

Checks (:data:`CHECKS`), each named by the word a skip reason and ``explain`` use:

* ``field_markers``: a template built from field markers, two or more of one syntax at the
  start of a line (``[[ ## question ## ]]``, ``### Question:``, ``<question>...</question>``,
  ``Question: ...`` sections), outside fenced code; read by :func:`template_field`, which takes
  the field that is the question (the last one) or the answer (the first one);
* ``placeholder``: a Python repr or object placeholder, the whole value or anywhere inside it
  (``<acme.Msg object at 0x7f...>`` in prose, a repr as a string inside JSON, the
  ``id='1' source='user' content='...'`` form of a pydantic model's ``str()``); read by
  :func:`repr_message_text` where a message's ``content=`` is unambiguous;
* ``object_dump``: the JSON of an object that is not a message and holds no prose (ids, numbers,
  flags, status values: a framework's state, not anybody's words);
* ``status_word``: an answer of one word that is a status or enum value (``text``,
  ``end_turn``, ``completed``, ``FINISHED``; a question may be one such word: people type
  ``stop``);
* ``field_name``: the name of a field instead of its value (``output``, ``messages``);
* ``markup_only``: markup (tags, code fences) and nothing else.

Honest short answers pass: ``Yes``, ``No``, ``Paris``, ``42``; so does an answer that quotes a
template inline or in fenced code. Every check looks at the first :data:`SCAN_CHARS`
characters, with a cheap test before any pattern (planning reads every span's text).

Example::

    failed_check("[[ ## answer ## ]]\\nParis\\n\\n[[ ## completed ## ]]")   # "field_markers"
    template_field("[[ ## answer ## ]]\\nParis\\n\\n[[ ## completed ## ]]", "output")  # "Paris"
    failed_check("Paris")                                                   # None
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, Literal

from spanjudge.evaluators._rebuild.dialects.message_text import is_placeholder

Want = Literal["input", "output"]

SCAN_CHARS = 20_000
"""Characters of a value the checks read (a misread shows at its start)."""

CHECKS: dict[str, str] = {
    "field_markers": "a template with field markers",
    "placeholder": "a Python repr or object placeholder",
    "object_dump": "a JSON dump of an object that is not a message",
    "status_word": "a single word that is a status or enum value",
    "field_name": "the name of a field, not its value",
    "markup_only": "markup with no text",
}
"""Each check's name and what it means, as skip reasons and ``spanjudge explain`` say it."""

# the reading rules, as ``found_by`` and skip reasons name them
TEMPLATE_RULE = "field-marker template"
REPR_RULE = "content= of a message repr"
PROMPT_BLOCK_RULE = "documents marked in the prompt"
RESULT_OBJECT_RULE = "message-like field of a result object"
MODEL_ANSWER_RULE = "the last model call's answer in the turn"
RULE_FOR_CHECK: dict[str, str] = {
    "field_markers": f"{TEMPLATE_RULE} (takes the question or answer field; found none)",
    "placeholder": f"{REPR_RULE} (reads one unambiguous message; found none)",
    "object_dump": f"{RESULT_OBJECT_RULE}, else {MODEL_ANSWER_RULE} (found neither)",
    "status_word": f"{RESULT_OBJECT_RULE}, else {MODEL_ANSWER_RULE} (found neither)",
    "field_name": f"{RESULT_OBJECT_RULE}, else {MODEL_ANSWER_RULE} (found neither)",
    "markup_only": "none: markup alone holds nothing to read",
}
"""Per check, the rule that reads that shape (what ``explain`` shows for a refused field)."""

# what a template's field is called when it holds the question, or the answer
INPUT_FIELDS = (
    "question",
    "query",
    "user_question",
    "user_query",
    "input",
    "user_input",
    "request",
    "task",
    "message",
    "user_message",
    "problem",
)
CONTEXT_FIELDS = frozenset(
    {"context", "contexts", "documents", "docs", "references", "sources", "memory", "passages"}
)
OUTPUT_FIELDS = ("answer", "final_answer", "response", "output", "result", "reply", "completion")
_FIELD_WORDS = frozenset(
    (*INPUT_FIELDS, *OUTPUT_FIELDS, "context", "documents", "instructions", "reasoning",
     "history", "references", "memory", "sources", "thought", "rationale", "completed")
)  # fmt: skip

STATUS_WORDS = frozenset(
    {
        "text", "stop", "stopped", "end_turn", "tool_use", "tool_calls", "function_call",
        "length", "max_tokens", "content_filter", "completed", "complete", "success",
        "succeeded", "successful", "finished", "finish", "failed", "failure", "error",
        "pending", "running", "cancelled", "canceled", "timeout", "null", "undefined", "nan",
        "terminated", "interrupted", "handoff",
    }
)  # fmt: skip
"""Words that, alone, are a status or an enum value rather than anybody's answer (``OK``,
``Done``, ``None`` and ``Unknown`` are left out: people and models answer with them)."""
FIELD_NAMES = frozenset(
    {
        "input", "output", "inputs", "outputs", "messages", "message", "content", "prompt",
        "completion", "response", "result", "answer", "question", "query", "role", "user",
        "assistant", "system", "args", "kwargs", "value", "data", "payload",
    }
)  # fmt: skip
"""Names of fields: a value equal to one of them is a key read as its value."""

_BRACKET = re.compile(r"(?m)^[ \t]*\[\[ ## (\w+) ## \]\][ \t]*")
_HEADING = re.compile(r"(?m)^[ \t]*#{1,6}[ \t]*([A-Za-z][A-Za-z_ ]{0,30}?)[ \t]*:[ \t]*")
_LABEL = re.compile(r"(?m)^[ \t]*([A-Z][A-Za-z_]{1,30}(?: [A-Za-z_]{1,30})?):[ \t]*")
_OPEN_TAG = re.compile(r"<([a-z][a-z_]{1,30})>")
_MAX_TAGS = 50
_INLINE_MARKER = re.compile(r"\[\[ ## \w+ ## \]\]")
_FENCE = re.compile(r"(?s)```.*?```")
_ANYWHERE_REPR = re.compile(
    r"<[A-Za-z_][\w.]* object at 0x[0-9a-fA-F]{4,}>"
    r"|<(?:function|bound method|coroutine object|generator object) [^\n>]{1,120} at 0x"
    r"|<[A-Z]\w*\.[A-Z_]\w*: [^>\n]{0,60}>"
)
_FIELD_REPR_PAIR = re.compile(
    r"(?:^|\s)([a-z_]\w*)=('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|[\w.]+)"
)
# a repr field holding a message's text: content= in a message; a prediction object's answer=
# (output) or question= (input) when it has no content=
_TEXT_VALUE = {
    key: re.compile(rf"\b{key}=(?:'((?:[^'\\]|\\.)*)'|\"((?:[^\"\\]|\\.)*)\")")
    for key in ("content", "answer", "response", "output", "question", "query", "input")
}
_REPR_TEXT_KEYS: dict[Want, tuple[str, ...]] = {
    "output": ("content", "answer", "response", "output"),
    "input": ("content", "question", "query", "input"),
}
# Name( then a field on the next line: a multi-line repr (a prediction object's)
_LOOSE_REPR = re.compile(r"^[\s\[<(]*[A-Za-z_][\w.]*\(\s*[a-z_]\w*=")
_SPEAKER = re.compile(r"\b(?:source|role)=(?:'([\w-]+)'|\"([\w-]+)\"|<\w+\.\w+: '([\w-]+)'>)")
_TAGS = re.compile(r"<[^<>]{0,200}>")
_ENUM = re.compile(r"^(?:[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+|[A-Z]\w*\.[A-Z][A-Z0-9_]+)$")
_WORD = re.compile(r"^[\w.-]{1,40}$")
_PROSE = re.compile(r"[^\W\d_]{2,}(?:\s+[^\W\d_]{2,}){2}")
_QA_FIELDS = frozenset((*INPUT_FIELDS, *OUTPUT_FIELDS))
USER_SPEAKERS = frozenset({"user", "human"})
_MAX_LEAVES = 200
_MAX_PARSED = 200_000  # longer JSON is not parsed again to look for reprs inside it


# ====================================================================== checks
def failed_check(
    value: str, want: Want = "output", *, checks: tuple[str, ...] = tuple(CHECKS)
) -> str | None:
    """The first of ``checks`` that ``value`` fails (see the module docstring), else ``None``.
    ``want``: whether it stands for a question (a prompt's ``Question:`` labels count as
    markers) or an answer (labels in an answer are the model's own formatting)."""
    text = value[:SCAN_CHARS].strip()
    if not text:
        return None
    for name in checks:
        if name == "field_markers":
            if is_template(text, want):
                return name
        elif name == "status_word" and want == "input":
            continue  # people do type "stop" or "done" to an agent
        elif _CHECKS[name](text):
            return name
    return None


def is_template(text: str, want: Want = "output") -> bool:
    """Two or more field markers of one syntax at line starts, outside fenced code."""
    return _markers(text[:SCAN_CHARS], labels=want == "input") is not None


def _markers(text: str, labels: bool) -> tuple[str, list[tuple[str, int, int]]] | None:
    """``(syntax, [(field name, marker start, content start)])`` of a template, else None;
    ``labels``: ``Question: ...`` sections count."""
    if "```" in text:
        text = _FENCE.sub(lambda m: " " * len(m.group(0)), text)
    if "[[ ##" in text:
        found = [(m.group(1).lower(), m.start(), m.end()) for m in _BRACKET.finditer(text)]
        if len({name for name, _, _ in found}) >= 2:
            return "bracket", found
    if "#" in text:
        found = [(_key(m.group(1)), m.start(), m.end()) for m in _HEADING.finditer(text)]
        if _fieldlike(found):
            return "heading", found
    if "</" in text:
        found = _tag_pairs(text)
        if _fieldlike(found):
            return "tag", found
    if labels and ":" in text:
        found = [(_key(m.group(1)), m.start(), m.end()) for m in _LABEL.finditer(text)]
        if _fieldlike(found):
            return "label", found
    return None


def _tag_pairs(text: str) -> list[tuple[str, int, int]]:
    """``(name, content start, content end)`` of ``<name>...</name>`` pairs, in order, found
    with one scan for the opening tags and one ``find`` for each closing tag (a pattern with a
    back-reference rescans the rest of the text for every unclosed tag)."""
    found = []
    position = 0
    for match in _OPEN_TAG.finditer(text):
        if match.start() < position:
            continue  # inside the previous pair
        end = text.find(f"</{match.group(1)}>", match.end())
        if end < 0:
            continue
        found.append((match.group(1), match.end(), end))
        position = end
        if len(found) >= _MAX_TAGS:
            break
    return found


def _key(name: str) -> str:
    return name.strip().lower().replace(" ", "_")


def _fieldlike(found: list[tuple[str, int, int]]) -> bool:
    """Two distinct marker names, one of them a question or answer field (headings, tags and
    labels are common in prose: ``Note:``, ``Summary:``)."""
    names = {name for name, _, _ in found}
    return len(names) >= 2 and bool(names & _QA_FIELDS)


def has_placeholder(text: str) -> bool:
    """A repr or object placeholder: the whole text, a string inside its JSON, or in prose."""
    if is_placeholder(text) or is_field_repr(text) or _LOOSE_REPR.match(text[:200]):
        return True
    head = text[:SCAN_CHARS]
    if ("0x" in head or ": '" in head) and _ANYWHERE_REPR.search(head):
        return True
    if text[:1] in "[{" and len(text) <= _MAX_PARSED:
        parsed = _json(text)
        if parsed is not None:
            return any(is_placeholder(leaf) or is_field_repr(leaf) for leaf in _leaves(parsed))
    return False


def is_field_repr(text: str) -> bool:
    """The ``str()`` of a pydantic model or dataclass: ``name=value`` pairs from the start, two
    of them quoted strings at least (``id='1' source='user' content='Hi' type='TextMessage'``)."""
    head = text[:400].lstrip()
    if not head[:1].isalpha() and head[:1] != "_":
        return False
    if "=" not in head[:40]:
        return False
    pairs = _FIELD_REPR_PAIR.findall(head)
    quoted = [name for name, value in pairs if value[:1] in "'\""]
    # two quoted values at least: "x=1, y=2" is an answer, not a repr
    return len(quoted) >= 2 and head.startswith(pairs[0][0] + "=")


def _is_object_dump(text: str) -> bool:
    if text[:1] not in "[{" or len(text) >= SCAN_CHARS:
        return False
    parsed = _json(text)
    if not isinstance(parsed, Mapping | list) or not parsed:
        return False
    if _message_like(parsed):
        return False
    return not any(_PROSE.search(leaf) for leaf in _leaves(parsed))


def _message_like(value: Any) -> bool:
    if isinstance(value, list):
        return all(_message_like(v) for v in value if v is not None) and bool(value)
    return isinstance(value, Mapping) and "role" in value


def _is_status_word(text: str) -> bool:
    if not _WORD.match(text):
        return False
    return text.lower().strip(".") in STATUS_WORDS or bool(_ENUM.match(text))


def _is_field_name(text: str) -> bool:
    return len(text) <= 12 and text.lower() in FIELD_NAMES


def _is_markup_only(text: str) -> bool:
    if "<" not in text and "```" not in text:
        return False
    stripped = _TAGS.sub("", text).replace("```", "")
    return not any(c.isalnum() for c in stripped)


_CHECKS = {
    "placeholder": has_placeholder,
    "object_dump": _is_object_dump,
    "status_word": _is_status_word,
    "field_name": _is_field_name,
    "markup_only": _is_markup_only,
}


# ====================================================================== readers
def template_field(text: str, want: Want) -> str | None:
    """The question (``want="input"``: the last question-like field) or the answer (the first
    answer-like field) of a field-marker template, else ``None``. Trailing paragraphs of the
    field that speak about markers (``Respond with ... [[ ## answer ## ]]``) are instructions,
    not the field."""
    fields = INPUT_FIELDS if want == "input" else OUTPUT_FIELDS
    picked = [body for name, body in _sections(text, want == "input") if name in fields and body]
    if not picked:
        return None
    return picked[-1] if want == "input" else picked[0]


def template_sections(text: str, names: frozenset[str]) -> list[str]:
    """The non-empty contents of the template fields named in ``names`` (a prompt template's
    ``context`` or ``documents`` fields)."""
    return [body for name, body in _sections(text, True) if name in names and body]


def _sections(text: str, labels: bool) -> list[tuple[str, str]]:
    """A template's fields in order, ``(name, content)``; none when ``text`` is no template."""
    scanned = text[:SCAN_CHARS]
    found = _markers(scanned, labels)
    if found is None:
        return []
    syntax, markers = found
    sections = []
    for i, (name, start, content) in enumerate(markers):
        if syntax == "tag":
            body = scanned[start:content]
        else:
            end = markers[i + 1][1] if i + 1 < len(markers) else len(text)
            body = text[content:end]
        sections.append((name, _without_instructions(body).strip()))
    return sections


def _without_instructions(body: str) -> str:
    paragraphs = re.split(r"\n[ \t]*\n", body)
    while len(paragraphs) > 1 and _INLINE_MARKER.search(paragraphs[-1]):
        paragraphs.pop()
    return "\n\n".join(paragraphs)


def repr_message_text(value: Any, want: Want) -> str | None:
    """The text of the message that a value made of message reprs holds (a field repr, or JSON
    whose strings are reprs with ``content=``): for the input, the last message from the user
    (or the only message); for the output, the last message not from the user. ``None`` when
    no message is found or which one is meant is ambiguous."""
    parsed = _json(value) if isinstance(value, str) and value[:1] in "[{" else value
    leaves = [parsed] if isinstance(parsed, str) else list(_leaves(parsed))
    messages = [m for m in (_repr_message(leaf, want) for leaf in leaves) if m is not None]
    if not messages:
        return None
    if want == "input":
        users = [text for speaker, text in messages if speaker in USER_SPEAKERS]
        if users:
            return users[-1]
        return messages[0][1] if len(messages) == 1 and messages[0][0] is None else None
    others = [text for speaker, text in messages if speaker not in USER_SPEAKERS]
    if others and (len(others) == 1 or all(s is not None for s, _ in messages)):
        return others[-1]
    return None


def _repr_message(leaf: Any, want: Want) -> tuple[str | None, str] | None:
    if not isinstance(leaf, str) or "=" not in leaf:
        return None
    if not (is_field_repr(leaf) or is_placeholder(leaf) or _LOOSE_REPR.match(leaf[:200])):
        return None
    key = next((k for k in _REPR_TEXT_KEYS[want] if f"{k}=" in leaf), None)
    contents = _TEXT_VALUE[key].findall(leaf) if key is not None else []
    if len(contents) != 1:
        return None  # none, or two (a nested message): which is meant is not clear
    text = _unescape(contents[0][0] or contents[0][1])
    if not text.strip():
        return None
    speaker = _SPEAKER.search(leaf)
    who = next((g for g in speaker.groups() if g), None) if speaker else None
    return (who.lower() if who else None, text)


def _unescape(text: str) -> str:
    return text.replace("\\'", "'").replace('\\"', '"').replace("\\n", "\n")


# ====================================================================== values
def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def _leaves(value: Any) -> list[str]:
    """The strings inside a JSON value (the first :data:`_MAX_LEAVES`, depth-bounded)."""
    out: list[str] = []
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack and len(out) < _MAX_LEAVES:
        item, depth = stack.pop()
        if isinstance(item, str):
            out.append(item)
        elif depth < 8 and isinstance(item, Mapping):
            stack.extend((v, depth + 1) for v in reversed(list(item.values())))
        elif depth < 8 and isinstance(item, list):
            stack.extend((v, depth + 1) for v in reversed(item))
    return out
