"""A scripted OpenAI-compatible chat-completions server on 127.0.0.1, for tests, benchmarks and
the offline demo. It is not a model: it answers by rules, so the whole judge path (litellm, HTTP,
JSON parsing, retries) runs without a network.

::

    with ScriptedJudgeServer() as server:
        server.add_rule({"claims": ["The sky is blue."]}, schema="Claims")
        server.add_rule(Fault.status(429, retry_after=0), times=1)   # first call rate-limited
        judge = server.judge()
        obj, usage = judge.generate("...", Claims)

Rules are tried in the order added; the first that matches answers (a rule whose ``times`` ran
out is passed over). A request matches on ``schema`` (the schema's name, whichever
structured-output form the request uses), ``contains`` (a substring of the prompt) and ``match``
(a predicate), all that are given. ``profile`` makes the server take only the forms a real one
takes (see :mod:`spanjudge.testing.server_rules`); a rule's ``logprobs`` gives the
log-probabilities returned when a request asks for them.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from pydantic import BaseModel

from spanjudge.errors import ConfigError
from spanjudge.testing import server_rules
from spanjudge.testing._loopback import LoopbackServer


@dataclass
class ScriptedRequest:
    """What a rule sees of a request."""

    prompt: str
    schema_name: str | None
    model: str
    body: dict[str, Any]
    status: int = 0  # filled in once answered
    headers: dict[str, str] = field(default_factory=dict)  # names in lower case

    @property
    def form(self) -> str:
        """The structured-output form asked for: json_schema, json_object, tools or prompt."""
        return server_rules.request_form(self.body)


@dataclass(frozen=True)
class Fault:
    """A failure to answer with instead of content."""

    kind: str
    code: int = 500
    retry_after: float | None = None
    seconds: float = 0.0
    text: str = ""
    location: str = ""

    @classmethod
    def status(cls, code: int, retry_after: float | None = None) -> Fault:
        """Answer with this HTTP status (429, 500, 503...), optionally with Retry-After."""
        return cls("status", code=code, retry_after=retry_after)

    @classmethod
    def hang(cls, seconds: float = 30.0) -> Fault:
        """Sleep before answering (long enough for the client to time out)."""
        return cls("hang", seconds=seconds)

    @classmethod
    def redirect(cls, location: str, code: int = 307) -> Fault:
        """Answer with a redirect (307 keeps the method and body) to ``location``."""
        return cls("redirect", code=code, location=location)

    @classmethod
    def malformed(cls, text: str = '{"claims": [') -> Fault:
        """Answer 200 with this content, which is not valid JSON for the schema."""
        return cls("malformed", text=text)


Respond = Any  # dict | BaseModel | str | Callable[[ScriptedRequest], Any] | Fault


@dataclass
class _Rule:
    respond: Respond
    schema: str | None = None
    contains: str | None = None
    match: Callable[[ScriptedRequest], bool] | None = None
    times: int | None = None
    latency: float = 0.0
    logprobs: dict[str, dict[str, float]] | None = None
    used: int = 0

    def applies(self, request: ScriptedRequest) -> bool:
        if self.times is not None and self.used >= self.times:
            return False
        if self.schema is not None and request.schema_name != self.schema:
            return False
        if self.contains is not None and self.contains not in request.prompt:
            return False
        return self.match is None or bool(self.match(request))


@dataclass
class _State:
    rules: list[_Rule] = field(default_factory=list)
    requests: list[ScriptedRequest] = field(default_factory=list)
    in_flight: int = 0
    max_in_flight: int = 0


def _content_text(message: dict[str, Any]) -> str:
    content = message.get("content")
    return content if isinstance(content, str) else json.dumps(content)


def _tokens(text: str) -> int:
    return len(text) // 4 + 1


class ScriptedJudgeServer(LoopbackServer):
    """OpenAI-compatible ``POST /v1/chat/completions`` on 127.0.0.1 (random port)."""

    def __init__(
        self,
        *,
        latency: float = 0.0,
        host: str = "127.0.0.1",
        port: int = 0,
        profile: str = "openai",
    ) -> None:
        if profile not in server_rules.PROFILES:
            raise ConfigError(
                f"unknown profile {profile!r}; known: {', '.join(server_rules.PROFILES)}"
            )
        super().__init__(host=host, port=port)
        self.latency = latency
        self.profile = server_rules.PROFILES[profile]
        self._state = _State()
        self._lock = threading.Lock()

    def judge(self, model: str = "openai/scripted-judge", **options: Any) -> Any:
        """A :class:`LiteLLMJudge` pointed at this server."""
        from spanjudge.evaluators._judge.judges.litellm_judge import LiteLLMJudge

        options.setdefault("api_key", "sk-scripted-not-a-real-key")
        return LiteLLMJudge(model, api_base=self.base_url, **options)

    # ------------------------------------------------------------------ script
    def add_rule(
        self,
        respond: Respond,
        *,
        schema: str | None = None,
        contains: str | None = None,
        match: Callable[[ScriptedRequest], bool] | None = None,
        times: int | None = None,
        latency: float = 0.0,
        logprobs: dict[str, dict[str, float]] | None = None,
    ) -> ScriptedJudgeServer:
        """Answer matching requests with ``respond``; ``logprobs`` maps a token of the answer
        to its alternatives (token -> logprob), returned when the request asks for logprobs."""
        with self._lock:
            self._state.rules.append(
                _Rule(respond, schema, contains, match, times, latency, logprobs)
            )
        return self

    def clear(self) -> None:
        with self._lock:
            self._state = _State()

    @property
    def requests(self) -> list[ScriptedRequest]:
        with self._lock:
            return list(self._state.requests)

    @property
    def max_in_flight(self) -> int:
        return self._state.max_in_flight

    # ------------------------------------------------------------------ serving
    def handle(self, handler: BaseHTTPRequestHandler, raw: bytes) -> None:
        try:
            body = json.loads(raw or b"{}")
            messages = body.get("messages") or []
            prompt = "\n\n".join(
                str(m["content"])
                if isinstance(m.get("content"), str)
                else json.dumps(m.get("content"))
                for m in messages
                if isinstance(m, dict)
            )
            schema_name = server_rules.schema_name(body, prompt)
        except (ValueError, AttributeError):
            self._reply(handler, 400, {"error": {"message": "body is not a chat request"}})
            return
        request = ScriptedRequest(
            prompt,
            schema_name,
            str(body.get("model", "")),
            body,
            headers={k.lower(): v for k, v in handler.headers.items()},
        )
        refused = server_rules.refusal(self.profile, body)
        if refused is not None:
            request.status = self.profile.refusal_status
            with self._lock:
                self._state.requests.append(request)
            self._reply(handler, self.profile.refusal_status, refused)
            return
        with self._lock:
            self._state.requests.append(request)
            self._state.in_flight += 1
            self._state.max_in_flight = max(self._state.max_in_flight, self._state.in_flight)
            rule = next((r for r in self._state.rules if r.applies(request)), None)
            if rule is not None:
                rule.used += 1
        left = False

        def leave() -> None:
            nonlocal left
            if not left:
                left = True
                with self._lock:
                    self._state.in_flight -= 1

        def reply(
            status: int, payload: dict[str, Any], headers: dict[str, str] | None = None
        ) -> None:
            # out of flight before the answer is written: a client reading it may send its next
            # call at once, and that call must not find this one still counted
            leave()
            self._reply(handler, status, payload, headers)

        try:
            delay = self.latency + (rule.latency if rule else 0.0)
            if delay:
                self._stopping.wait(delay)
            if rule is None:
                request.status = 500
                reply(500, {"error": {"message": f"no rule matched (schema {schema_name})"}})
                return
            respond = rule.respond
            if callable(respond) and not isinstance(respond, (Fault, BaseModel)):
                respond = respond(request)
            if isinstance(respond, Fault):
                self._fault(reply, request, respond)
                return
            if isinstance(respond, BaseModel):
                content = respond.model_dump_json()
            elif isinstance(respond, (dict, list)):
                content = json.dumps(respond)
            else:
                content = str(respond)
            request.status = 200
            reply(200, self._completion(request, content, rule.logprobs))
        finally:
            leave()  # a respond() that raised never replied

    def _fault(
        self,
        reply: Callable[[int, dict[str, Any], dict[str, str] | None], None],
        request: ScriptedRequest,
        fault: Fault,
    ) -> None:
        if fault.kind == "hang":
            self._stopping.wait(fault.seconds)
            request.status = 599
            # _reply swallows the broken pipe: the client gave up long ago
            reply(500, {"error": {"message": "hung"}}, None)
            return
        if fault.kind == "malformed":
            request.status = 200
            reply(200, self._completion(request, fault.text), None)
            return
        request.status = fault.code
        headers = {"Location": fault.location} if fault.kind == "redirect" else {}
        if fault.retry_after is not None:
            headers["Retry-After"] = str(fault.retry_after)
        reply(
            fault.code,
            {"error": {"message": f"scripted {fault.code}", "type": "scripted"}},
            headers,
        )

    @staticmethod
    def _completion(
        request: ScriptedRequest,
        content: str,
        logprobs: dict[str, dict[str, float]] | None = None,
    ) -> dict[str, Any]:
        choice: dict[str, Any] = {
            "index": 0,
            "message": server_rules.message(request.form, content, request.schema_name),
            "finish_reason": "tool_calls" if request.form == "tools" else "stop",
        }
        if request.body.get("logprobs"):
            choice["logprobs"] = server_rules.token_logprobs(content, logprobs or {})
        return {
            "id": f"chatcmpl-scripted-{int(time.time() * 1000)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": request.model.split("/", 1)[-1] or "scripted-judge",
            "choices": [choice],
            "usage": {
                "prompt_tokens": _tokens(request.prompt),
                "completion_tokens": _tokens(content),
                "total_tokens": _tokens(request.prompt) + _tokens(content),
            },
        }

    def _reply(
        self,
        handler: BaseHTTPRequestHandler,
        status: int,
        payload: dict[str, Any],
        headers: dict[str, str] | None = None,
    ) -> None:
        self.send(handler, status, json.dumps(payload).encode(), headers=headers)
