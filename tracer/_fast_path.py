"""The per-call fast path of ``@observe``: start attributes and output for the common shapes.

A call whose input is a plain string (or, for tools and chains, arguments, positional or by
keyword, that are strings, ints, bools or ``None``) and whose result is as simple, under a capture
policy that neither masks nor redacts, needs none of the general capture machinery: its JSON is a
few string concatenations, and it fits the size limit, so nothing is cut (inside a
``conversation()`` block the start attributes also carry its ids, as on the general path).
:func:`start_builder` and :func:`end_writer` make, once per decorated function, the two closures
that record such calls with as few Python calls as possible. Each returns "not handled" (``None``
/ ``False``) for any other call, which then takes the general path in
:mod:`spanjudge.tracer._decoration_plan`; both paths record the same attributes byte for byte
(``tests/tracer/test_golden.py`` pins fixed scenarios, ``tests/tracer/test_two_paths.py``
compares the two on drawn arguments, results and size limits).

Why a second copy of what the general path computes: it pays for itself. ``@observe`` overhead
over a raw span (``benchmarks/overhead.py``, ``ratios.batch.<kind>.observe_over_raw_otel``), with
and without these closures alternating on a loaded 2-core machine (2026-11-27), medians of 3 full
runs: llm 1.14 vs 1.54, tool 1.26 vs 1.62, retriever 1.26 vs 1.57 (of 10 ``--quick`` runs: llm
1.18 vs 1.49, tool 1.24 vs 1.66). Without them every kind misses the 1.3 goal.

Every closure reads ``capture.POLICY.plain_limit`` per call: ``-1`` unless content capture is on
without PII masking or a redaction hook, so ``len(text) <= limit`` fails whenever the general path
has work to do.
"""

from __future__ import annotations

import os
import random
import sys
from collections.abc import Callable, Mapping
from json.encoder import encode_basestring
from typing import Any

from spanjudge.tracer import _attributes as attrs
from spanjudge.tracer import _capture as capture
from spanjudge.tracer import _messages as messages
from spanjudge.tracer._context import CONVERSATION

StartBuilder = Callable[[tuple[Any, ...], dict[str, Any]], "dict[str, Any] | None"]
EndWriter = Callable[[Any, Any], bool]

_POLICY = capture.POLICY  # the one policy object: set_policy() changes it in place
# Bound once: a method looked up on the context variable per call is not cached by CPython 3.11.
_conversation = CONVERSATION.get
_scalar = capture.scalar_json
_valid = capture.valid_text
# Fresh tool call ids, "call_" + 16 hex digits, from a generator of our own: the app's
# random.seed() and random stream are not ours to use. Drawn 256 at a time (one getrandbits());
# a call pops one.
_ids = random.Random()
_call_ids: list[str] = []
_pop_call_id = _call_ids.pop


def _draw_call_ids() -> str:
    # Every step one C call over all 256 ids (16 hex digits each, comma-separated, then prefixed
    # and split), not a Python loop of 255 slices and joins: new_call_id() went from ~2,400 to
    # ~1,500 instructions a call, amortised (callgrind, 2026-12-08).
    digits = _ids.getrandbits(64 * 256).to_bytes(2048, "big").hex(",", 8)
    _call_ids.extend(("call_" + digits.replace(",", ",call_")).split(","))
    return _pop_call_id()


def new_call_id() -> str:
    """A fresh random tool call id."""
    try:
        return _pop_call_id()
    except IndexError:
        return _draw_call_ids()


def _after_fork_in_child() -> None:
    # a forked child must not hand out the ids its parent will
    _ids.seed()
    _call_ids.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)

_USER_OPEN, _USER_CLOSE = messages.USER_OPEN, messages.TEXT_CLOSE
_ASSISTANT_OPEN, _ASSISTANT_CLOSE = messages.ASSISTANT_OPEN, messages.STOP_CLOSE
_DOCUMENT_REFS = tuple("[" + ",".join(f'{{"id":"{i}"}}' for i in range(n)) + "]" for n in range(9))

# Where an argument sits: (its position, or None if keyword-only; its name).
Where = tuple[int | None, str]


def start_builder(
    kind: str,
    static: dict[str, Any],
    *,
    capture_input: bool,
    input_arg: Where | None,
    messages_arg: Where | None,
    names: list[str],
    skip: int,
    tool_call_id: str | None,
    tool_call_id_arg: Where | None,
) -> StartBuilder | None:
    """The closure giving a call's start attributes (static ones, the enclosing
    ``conversation()``'s ids, then its input), or ``None`` when this function has no fast path
    (its calls then always take the general one). Only for a function whose arguments cannot
    change its span name or start set (``Plan.fixed``)."""
    if kind == "tool" and tool_call_id_arg is not None:
        return None  # the call id is an argument: rare, general path
    if not capture_input:
        if kind != "tool":

            def static_only(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
                conv = _conversation()
                return static if conv is None else _in_conversation(static, conv)

            return static_only
        fixed_id = str(tool_call_id) if tool_call_id else None

        def tool_id_only(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any] | None:
            conv = _conversation()
            out = static.copy() if conv is None else _in_conversation(static, conv)
            out[attrs.GEN_AI_TOOL_CALL_ID] = fixed_id or new_call_id()
            return out

        return tool_id_only
    if kind in ("llm", "agent", "retriever"):
        if input_arg is None or (messages_arg is not None and kind != "retriever"):
            return None
        return _text_start(kind, static, input_arg)
    return _arguments_start(kind, static, names, skip, tool_call_id)


def _in_conversation(static: dict[str, Any], conv: tuple[str, str | None]) -> dict[str, Any]:
    """The static attributes and the ids of the enclosing ``conversation()``, in the general
    path's order (``Plan.start_attributes``)."""
    out = static.copy()
    out[attrs.GEN_AI_CONVERSATION_ID] = conv[0]
    if conv[1] is not None:
        out[attrs.SPANJUDGE_USER_ID] = conv[1]
    return out


def _text_start(kind: str, static: dict[str, Any], where: Where) -> StartBuilder:
    """The input text is one argument (by keyword, else at its position): the lookup is the
    general path's ``plan._value``, written out. A retriever records the text as its query; an
    LLM or agent call as a one-message ``gen_ai.input.messages``."""
    name = where[1]
    at = sys.maxsize if where[0] is None else where[0]  # keyword-only: never positional
    as_message = kind != "retriever"
    key = attrs.GEN_AI_INPUT_MESSAGES if as_message else attrs.GEN_AI_RETRIEVAL_QUERY_TEXT

    def text_start(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any] | None:
        if kwargs and name in kwargs:
            text = kwargs[name]
        elif at < len(args):
            text = args[at]
        else:
            return None
        if type(text) is not str:
            return None
        if as_message:
            if not text.isascii():
                text = _valid(text)
            text = f"{_USER_OPEN}{encode_basestring(text)}{_USER_CLOSE}"  # one join, not two +
        if len(text) > _POLICY.plain_limit:
            return None
        conv = _conversation()
        out = static.copy() if conv is None else _in_conversation(static, conv)
        out[key] = text
        return out

    return text_start


def _arguments_start(
    kind: str, static: dict[str, Any], names: list[str], skip: int, tool_call_id: str | None
) -> StartBuilder:
    """Tools and chains: the arguments as a JSON object (``Plan.bound``'s keys and order: the
    positional ones by parameter name, then the keyword ones as given)."""
    # what goes before each positional argument's JSON, by position ("self"/"cls" never written)
    openers = tuple(
        ("{" if i == skip else ",") + encode_basestring(name) + ":" for i, name in enumerate(names)
    )
    # the same, for a parameter given by keyword: first in the object, or after another argument
    # (agent frameworks call tools with keywords; quoting the name on each call was 2,100 of the
    # 8,200 instructions a tool call by keyword cost over a positional one, callgrind 2026-12-08)
    quoted = {name: encode_basestring(name) + ":" for name in names[skip:]}
    first_keyword = {name: "{" + text for name, text in quoted.items()}
    next_keyword = {name: "," + text for name, text in quoted.items()}
    fixed_id = str(tool_call_id) if tool_call_id else None
    most = len(names)
    id_key = attrs.GEN_AI_TOOL_CALL_ID if kind == "tool" else None
    key = attrs.GEN_AI_TOOL_CALL_ARGUMENTS if kind == "tool" else attrs.SPANJUDGE_INPUT

    def with_keywords(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
        """The JSON of a call with keyword arguments (after any positional ones)."""
        pieces = []
        for i in range(skip, len(args)):
            arg = args[i]
            text = encode_basestring(arg) if type(arg) is str else _scalar(arg)
            if text is None:
                return None
            pieces.append(openers[i] + text)
        given = names[skip : len(args)] if len(args) > skip else ()
        for name, arg in kwargs.items():
            if type(name) is not str or name in given:
                return None  # a value given twice (fn raises TypeError): the general path
            text = encode_basestring(arg) if type(arg) is str else _scalar(arg)
            if text is None:
                return None
            opener = (next_keyword if pieces else first_keyword).get(name)
            if opener is None:  # a keyword-only parameter, or one **kwargs takes
                opener = ("," if pieces else "{") + encode_basestring(name) + ":"
            pieces.append(opener + text)
        return "".join(pieces) + "}" if pieces else "{}"

    def arguments_start(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any] | None:
        count = len(args)
        if count > most:
            return None  # extra positional arguments (recorded under *args): general path
        if kwargs:
            json = with_keywords(args, kwargs)
            if json is None:
                return None
        elif count == skip + 1:  # one argument: the common call
            arg = args[skip]
            text = encode_basestring(arg) if type(arg) is str else _scalar(arg)
            if text is None:
                return None
            json = f"{openers[skip]}{text}}}"
        elif count <= skip:
            json = "{}"
        else:
            pieces = []
            for i in range(skip, count):
                arg = args[i]
                text = encode_basestring(arg) if type(arg) is str else _scalar(arg)
                if text is None:
                    return None
                pieces.append(openers[i] + text)
            json = "".join(pieces) + "}"
        if len(json) > _POLICY.plain_limit:
            return None
        conv = _conversation()
        out = static.copy() if conv is None else _in_conversation(static, conv)
        if id_key is not None:
            if fixed_id:
                out[id_key] = fixed_id
            else:
                try:  # new_call_id(), written out
                    out[id_key] = _pop_call_id()
                except IndexError:
                    out[id_key] = _draw_call_ids()
        out[key] = json
        return out

    return arguments_start


def end_writer(kind: str, static: Mapping[str, Any]) -> EndWriter | None:
    """The closure recording a call's output when the span holds only its start attributes
    (no handle write during the call), or ``None`` when this function has no fast path."""
    if kind in ("llm", "agent"):
        key = attrs.GEN_AI_OUTPUT_MESSAGES
        if key in static:
            return None  # the decorator leaves an output set by the user alone: general path

        def message_end(span: Any, value: Any) -> bool:
            if type(value) is not str:
                return False
            if not value.isascii():
                value = _valid(value)
            json = f"{_ASSISTANT_OPEN}{encode_basestring(value)}{_ASSISTANT_CLOSE}"
            if len(json) > _POLICY.plain_limit:
                return False
            span.set_attribute(key, json)
            return True

        return message_end
    if kind == "retriever":
        if attrs.GEN_AI_RETRIEVAL_DOCUMENTS in static:
            return None
        return _documents_end
    key = attrs.GEN_AI_TOOL_CALL_RESULT if kind == "tool" else attrs.SPANJUDGE_OUTPUT
    if key in static:
        return None
    small = capture.small_json

    def json_end(span: Any, value: Any) -> bool:
        json = encode_basestring(value) if type(value) is str else small(value)
        if json is None or len(json) > _POLICY.plain_limit:
            return False
        span.set_attribute(key, json)
        return True

    return json_end


def _documents_end(span: Any, value: Any) -> bool:
    """A retriever's plain-text documents: positions as ids, the texts as content."""
    if type(value) is str:
        texts = f"[{encode_basestring(value)}]"
        refs = _DOCUMENT_REFS[1]
    elif type(value) is list and len(value) < len(_DOCUMENT_REFS):
        quoted = []
        for text in value:
            if type(text) is not str:
                return False
            quoted.append(encode_basestring(text))
        texts = "[" + ",".join(quoted) + "]"
        refs = _DOCUMENT_REFS[len(value)]
    else:
        return False
    limit = _POLICY.plain_limit
    if len(texts) > limit or len(refs) > limit:
        return False
    # two set_attribute calls cost less in the SDK than one set_attributes of two keys
    span.set_attribute(attrs.GEN_AI_RETRIEVAL_DOCUMENTS, refs)
    span.set_attribute(attrs.SPANJUDGE_RETRIEVAL_DOCUMENTS_CONTENT, texts)
    return True
