"""What a scripted server takes and gives back, by the servers it mimics.

Each profile lists the structured-output forms a real server accepts (the others are refused
with the status and wording that server uses) and whether it returns log-probabilities:

* ``openai`` / ``vllm``: ``json_schema``, ``json_object``, tools and plain prompts, logprobs;
* ``llama.cpp`` (``llama-server``): ``json_object`` with a ``schema`` (the schema constrains
  decoding), tools, prompts; ``json_schema`` refused with a 400;
* ``llama-cpp-python`` (its server, 0.3.36): the same forms; ``json_schema`` refused with a 500
  whose body quotes the request-validation error;
* ``ollama``: ``json_schema``, ``json_object``, prompts; no tools with a forced choice; no logprobs;
* ``tools-only``: no ``response_format`` at all, tools and prompts;
* ``plain``: prompts only, any ``response_format`` or ``tools`` refused.

Example::

    with ScriptedJudgeServer(profile="llama.cpp") as server:   # refuses json_schema
        ...
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

FORMS = ("json_schema", "json_object", "tools", "prompt")


@dataclass(frozen=True)
class ServerProfile:
    accepts: tuple[str, ...]
    logprobs: bool = True
    refusal_status: int = 400
    # "validation": the refusal quotes a request-validation error, as llama-cpp-python's does
    refusal_style: str = "message"


PROFILES: dict[str, ServerProfile] = {
    "openai": ServerProfile(FORMS),
    "vllm": ServerProfile(FORMS),
    "llama.cpp": ServerProfile(("json_object", "tools", "prompt")),
    # as recorded from llama-cpp-python 0.3.36's server: json_schema -> HTTP 500 quoting pydantic
    "llama-cpp-python": ServerProfile(
        ("json_object", "tools", "prompt"), refusal_status=500, refusal_style="validation"
    ),
    "ollama": ServerProfile(("json_schema", "json_object", "prompt"), logprobs=False),
    "tools-only": ServerProfile(("tools", "prompt"), logprobs=False),
    "plain": ServerProfile(("prompt",), logprobs=False, refusal_status=422),
}

_TYPES = ("text", "json_object", "json_schema")
_SCHEMA_IN_PROMPT = re.compile(r"for the schema (\w+)")
_TOKEN = re.compile(r"\d+|\w+|\s+|[^\w\s]")


def request_form(body: dict[str, Any]) -> str:
    """The structured-output form a chat request asks for."""
    if body.get("tools"):
        return "tools"
    response_format = body.get("response_format")
    if isinstance(response_format, dict):
        kind = response_format.get("type")
        if kind in ("json_schema", "json_object"):
            return str(kind)
    return "prompt"


def schema_name(body: dict[str, Any], prompt: str) -> str | None:
    """The name of the schema a request asks for, whatever form it uses: the ``json_schema``
    name, the title of a ``json_object`` schema, the forced tool's name, or the name the
    prompt's JSON instruction gives."""
    response_format = body.get("response_format")
    if isinstance(response_format, dict):
        named = (response_format.get("json_schema") or {}).get("name")
        if named:
            return str(named)
        titled = (response_format.get("schema") or {}).get("title")
        if titled:
            return str(titled)
    for tool in body.get("tools") or []:
        name = ((tool or {}).get("function") or {}).get("name")
        if name:
            return str(name)
    found = _SCHEMA_IN_PROMPT.findall(prompt)
    return found[-1] if found else None


def refusal(profile: ServerProfile, body: dict[str, Any]) -> dict[str, Any] | None:
    """The error payload a server of ``profile`` answers this request with, or None."""
    form = request_form(body)
    if form not in profile.accepts and profile.refusal_style == "validation":
        allowed = " or ".join(f"'{f}'" for f in ("text", *profile.accepts) if f in _TYPES)
        message = (
            "1 validation error:\n  {'type': 'literal_error', 'loc': ('body', "
            f"'response_format', 'type'), 'msg': \"Input should be {allowed}\", "
            f"'input': '{form}'}}"
        )
        return {"error": {"message": message, "type": "internal_server_error"}}
    if form not in profile.accepts:
        if form == "tools":
            message = "tools and tool_choice are not supported by this server"
        else:
            usable = [f"'{f}'" for f in profile.accepts if f not in ("tools", "prompt")]
            message = f"response_format type '{form}' is not supported" + (
                f"; use one of {', '.join(usable)}" if usable else ""
            )
        return {"error": {"message": message, "type": "invalid_request_error"}}
    if body.get("logprobs") and not profile.logprobs:
        return {"error": {"message": "logprobs is not supported", "type": "invalid_request_error"}}
    return None


def token_logprobs(content: str, alternatives: dict[str, dict[str, float]]) -> dict[str, Any]:
    """OpenAI-style ``logprobs`` for ``content``: each token certain (logprob 0), except the
    first occurrence of each token named in ``alternatives``, which gets those alternatives
    (its own logprob is the value under its own name)."""
    items = []
    pending = dict(alternatives)
    for token in _TOKEN.findall(content):
        top = pending.pop(token, None)
        if top is None:
            items.append(
                {"token": token, "logprob": 0.0, "top_logprobs": [{"token": token, "logprob": 0.0}]}
            )
            continue
        ranked = sorted(top.items(), key=lambda kv: kv[1], reverse=True)
        items.append(
            {
                "token": token,
                "logprob": float(top.get(token, ranked[0][1])),
                "top_logprobs": [{"token": t, "logprob": float(lp)} for t, lp in ranked],
            }
        )
    return {"content": items}


def message(form: str, content: str, name: str | None) -> dict[str, Any]:
    """The assistant message: a forced tool call carrying ``content`` for the tools form."""
    if form != "tools":
        return {"role": "assistant", "content": content}
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_scripted",
                "type": "function",
                "function": {"name": name or "answer", "arguments": content},
            }
        ],
    }
