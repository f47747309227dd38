"""A scripted OpenAI-compatible chat-completions server that plays an agent's model, so real agent
frameworks run their whole loop offline: scripted tool calls per turn, then the final answer once
the tool results are in the messages. It is not a model: it answers from a script.

A script is a list of :class:`AgentConversation` s. A request belongs to the conversation whose
``user`` text is in its latest user message that names any conversation (and whose ``system``
text, when given, is in its system prompt: two agents of one turn, a hand-off, are told apart
by their instructions). The reply is the conversation's next step: the first
:class:`AgentReply` whose tool-call ids are not yet in the messages. Ids are the script's own
(``call_<conversation>_<step>_<n>``), so the answer depends on the messages alone: a framework
that retries a call gets the same reply, and a second agent that sees the first one's calls in
its history is not confused by them. Once every step's calls are answered, the last reply (the
final text) is repeated. ``"stream": true`` is answered as server-sent events, tool calls as
deltas.

Example::

    script = AgentScript([
        AgentConversation("Where is order A-1?", [
            AgentReply(tool_calls=[ScriptedToolCall("lookup_order", {"order_id": "A-1"})]),
            AgentReply(content="Order A-1 is in transit."),
        ]),
    ])
    with AgentModelServer(script) as server:
        client = OpenAI(base_url=server.base_url, api_key="x")   # the framework's client

From another virtual environment, run it as a process that prints its base URL on the first
line of its output and serves until it is stopped (``--log`` appends each request as a JSON
line)::

    python -m spanjudge.testing.agent_model --script script.json --port 0 --log calls.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any, TextIO

from spanjudge.errors import ConfigError
from spanjudge.testing._loopback import LoopbackServer

CREATED = 1_700_000_000  # a fixed time: recordings stay identical from one run to the next


@dataclass(frozen=True)
class ScriptedToolCall:
    """One tool call the model requests: the tool's name and its arguments."""

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class AgentReply:
    """One model answer: tool calls to request, or the text (a final answer)."""

    tool_calls: Sequence[ScriptedToolCall] = ()
    content: str | None = None


@dataclass(frozen=True)
class AgentConversation:
    """The replies of one agent in one turn, in order; ``name`` prefixes the tool-call ids."""

    user: str
    replies: Sequence[AgentReply]
    system: str | None = None
    name: str = ""

    def call_id(self, step: int, index: int) -> str:
        return f"call_{self.name or 'c'}_{step}_{index}"


@dataclass(frozen=True)
class AgentScript:
    """Every conversation the server can play, and the model name it answers with."""

    conversations: Sequence[AgentConversation]
    model: str = "scripted-agent-model"

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AgentScript:
        """The script from its JSON form (what ``--script`` reads)::

        {"model": "...", "conversations": [{"user": "...", "system": "...", "name": "t1",
          "replies": [{"tool_calls": [{"name": "...", "arguments": {...}}]},
                      {"content": "..."}]}]}
        """
        conversations = []
        for n, item in enumerate(data.get("conversations") or []):
            replies = [
                AgentReply(
                    tuple(
                        ScriptedToolCall(str(c["name"]), dict(c.get("arguments") or {}))
                        for c in reply.get("tool_calls") or []
                    ),
                    reply.get("content"),
                )
                for reply in item["replies"]
            ]
            if not replies:
                raise ConfigError(f"conversation {n} ({item.get('user')!r}) has no replies")
            conversations.append(
                AgentConversation(
                    str(item["user"]), replies, item.get("system"), str(item.get("name") or n)
                )
            )
        return cls(conversations, str(data.get("model") or cls.model))

    @classmethod
    def load(cls, path: str | Path) -> AgentScript:
        return cls.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def _seen_ids(messages: list[dict[str, Any]]) -> set[str]:
    """Tool-call ids already in the conversation: requested by an assistant or answered."""
    seen: set[str] = set()
    for message in messages:
        for call in message.get("tool_calls") or []:
            if isinstance(call, dict) and call.get("id"):
                seen.add(str(call["id"]))
        if message.get("tool_call_id"):
            seen.add(str(message["tool_call_id"]))
    return seen


def choose(script: AgentScript, messages: list[dict[str, Any]]) -> tuple[AgentConversation, int]:
    """The conversation a request belongs to and the index of the reply it gets.

    Raises ``LookupError`` naming the request's last user text when no conversation matches.
    """
    system = "\n".join(
        _text(m.get("content")) for m in messages if m.get("role") in ("system", "developer")
    )
    users = [_text(m.get("content")) for m in messages if m.get("role") == "user"]
    for text in reversed(users):
        named = [c for c in script.conversations if c.user in text]
        if not named:
            continue  # a tool result sent as a user message, or a framework's nudge
        told = [c for c in named if c.system is not None and c.system in system]
        candidates = told or [c for c in named if c.system is None]
        if not candidates:
            break
        conversation = candidates[0]
        seen = _seen_ids(messages)
        for step, reply in enumerate(conversation.replies):
            ids = {conversation.call_id(step, i) for i in range(len(reply.tool_calls))}
            if not ids or not ids <= seen:
                return conversation, step
        return conversation, len(conversation.replies) - 1
    last = users[-1] if users else ""
    raise LookupError(f"no scripted conversation for user message {last[:200]!r}")


def completion(script: AgentScript, request: dict[str, Any]) -> dict[str, Any]:
    """The ``chat.completion`` answering ``request`` (see :func:`choose`)."""
    messages = [m for m in request.get("messages") or [] if isinstance(m, dict)]
    conversation, step = choose(script, messages)
    reply = conversation.replies[step]
    message: dict[str, Any] = {"role": "assistant", "content": reply.content}
    if reply.tool_calls:
        message["tool_calls"] = [
            {
                "id": conversation.call_id(step, i),
                "type": "function",
                "function": {"name": call.name, "arguments": json.dumps(call.arguments)},
            }
            for i, call in enumerate(reply.tool_calls)
        ]
    prompt = sum(len(_text(m.get("content")).split()) + 1 for m in messages)
    answer = len((reply.content or "").split()) + 5 * len(reply.tool_calls) or 1
    return {
        "id": f"chatcmpl-{conversation.name or 'c'}-{step}",
        "object": "chat.completion",
        "created": CREATED,
        "model": str(request.get("model") or script.model),
        "system_fingerprint": "fp_scripted_agent",
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if reply.tool_calls else "stop",
                "logprobs": None,
            }
        ],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": answer,
            "total_tokens": prompt + answer,
        },
    }


def chunks(completion: dict[str, Any], with_usage: bool) -> Iterator[dict[str, Any]]:
    """The ``chat.completion.chunk`` s streaming ``completion``: role, text or tool calls, the
    finish reason, and the usage when the request asked for it (``stream_options``)."""
    base = {k: completion[k] for k in ("id", "created", "model", "system_fingerprint")}
    base["object"] = "chat.completion.chunk"
    choice = completion["choices"][0]
    message = choice["message"]

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return dict(base, choices=[{"index": 0, "delta": delta, "finish_reason": finish}])

    yield chunk({"role": "assistant", "content": ""})
    if message.get("content"):
        yield chunk({"content": message["content"]})
    for i, call in enumerate(message.get("tool_calls") or []):
        yield chunk({"tool_calls": [dict(call, index=i)]})
    yield chunk({}, choice["finish_reason"])
    if with_usage:
        yield dict(base, choices=[], usage=completion["usage"])


class AgentModelServer(LoopbackServer):
    """The agent's model on 127.0.0.1 (random port): ``POST /v1/chat/completions``.

    ``requests`` keeps each request body in arrival order; ``log`` (a text file) gets each as a
    JSON line too. A request no conversation matches is answered 400 with the reason.
    """

    def __init__(
        self,
        script: AgentScript,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        log: TextIO | None = None,
    ) -> None:
        super().__init__(host=host, port=port)
        self.script = script
        self.requests: list[dict[str, Any]] = []
        self._log = log
        self._lock = threading.Lock()

    def handle(self, handler: BaseHTTPRequestHandler, raw: bytes) -> None:
        if not handler.path.rstrip("/").endswith("/chat/completions"):
            self.send(handler, 404, b'{"error": {"message": "not found"}}')
            return
        try:
            request = json.loads(raw or b"{}")
            if not isinstance(request, dict):
                raise ConfigError("not an object")
        except ValueError:
            self.send(handler, 400, b'{"error": {"message": "body is not JSON"}}')
            return
        with self._lock:
            self.requests.append(request)
            if self._log is not None:
                self._log.write(json.dumps(request) + "\n")
                self._log.flush()
        try:
            answer = completion(self.script, request)
        except LookupError as exc:
            error = {"error": {"message": str(exc), "type": "invalid_request_error"}}
            self.send(handler, 400, json.dumps(error).encode())
            return
        if not request.get("stream"):
            self.send(handler, 200, json.dumps(answer).encode())
            return
        with_usage = bool((request.get("stream_options") or {}).get("include_usage"))
        events = b"".join(
            b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks(answer, with_usage)
        )
        self.send(handler, 200, events + b"data: [DONE]\n\n", "text/event-stream")


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m spanjudge.testing.agent_model --script FILE [--port N] [--log FILE]``."""
    parser = argparse.ArgumentParser(description="Serve a scripted agent model.")
    parser.add_argument("--script", required=True, help="the script as JSON")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--log", help="append each request here as a JSON line")
    args = parser.parse_args(argv)
    log = open(args.log, "a", encoding="utf-8") if args.log else None  # noqa: SIM115
    server = AgentModelServer(
        AgentScript.load(args.script), host=args.host, port=args.port, log=log
    )
    print(server.base_url, flush=True)
    try:
        server.serve_until_stopped()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
        if log is not None:
            log.close()


if __name__ == "__main__":
    main(sys.argv[1:])
