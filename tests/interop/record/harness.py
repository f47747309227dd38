"""Stdlib-only machinery every interop recorder uses: two local servers and a driver.

A recorder (``recorders/<library>.py``, run by ``record.sh`` inside that library's venv with
this folder on ``PYTHONPATH``) declares its recordings and one function that runs the scenario::

    import harness
    import scenario

    MODES = {
        "mylib": harness.Mode(content_capture="on", env={"MYLIB_CAPTURE": "true"}),
        "mylib-nocontent": harness.Mode(content_capture="off", env={"MYLIB_CAPTURE": "false"}),
    }

    def record(rec: harness.Recording) -> None:
        # rec.openai_base_url -> the fake OpenAI server (also set as OPENAI_BASE_URL)
        # rec.traces_url / rec.logs_url -> the capture server (OTLPSpanExporter(endpoint=...))
        ... set up the library, run scenario.TURNS, then force_flush()/shutdown() the providers:
        ... anything still queued after record() returns is lost.
        rec.note("the library made one extra call per turn")   # lands in manifest.json

    if __name__ == "__main__":
        harness.main("mylib", MODES, record)

A recorder file is named after its library (``recorders/openinference.py``), so it runs with
``PYTHONSAFEPATH=1`` (its own folder is not put on ``sys.path``) and this folder on
``PYTHONPATH``; ``record.sh`` and ``main`` set both.

``main`` with no arguments records every mode, each in a fresh child process whose environment
is the mode's ``env`` (libraries read their switches at import time); ``main`` with recording
names records just those.  Each recording empties ``fixtures/<recording>/``, then writes there
``NNN-traces.pb`` / ``NNN-logs.pb`` (raw, decompressed OTLP/HTTP protobuf request bodies, NNN one
sequence across both in arrival order) and ``manifest.json``: recording, library, content
capture, the pinned packages' installed versions (names from ``$INTEROP_REQUIREMENTS``), all
installed distributions, Python version, date, body counts, chat completion calls and notes.

The fake OpenAI server answers ``POST /v1/chat/completions`` by the last user message (the
scenario's scripted answer; id ``chatcmpl-<turn>``, ``usage`` included).  When the request has
``tools`` and no tool result follows the last user message it first answers with one tool call
(to the first tool whose name contains "retriev", else the first tool; arguments
``{"query": question}``), so agent frameworks that retrieve through a tool work; the recorder
notes the two calls.  ``"stream": true`` is answered as server-sent events.
"""

from __future__ import annotations

import gzip
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import metadata
from pathlib import Path
from typing import Any

import scenario

RECORD_DIR = Path(__file__).resolve().parent
FIXTURES_DIR = RECORD_DIR.parent / "fixtures"
# A fixed creation time keeps the fake answers identical from one recording to the next.
CREATED = 1_700_000_000
QUIET_SECONDS = 1.0


@dataclass(frozen=True)
class Mode:
    """One recording of a library: its content-capture setting, said in words, and its env."""

    content_capture: str
    env: dict[str, str] = field(default_factory=dict)


# --------------------------------------------------------------------------- fake OpenAI server


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def _tokens(text: str) -> int:
    return max(1, len(text.split()))


class FakeOpenAI:
    """The scripted OpenAI-compatible chat completions server; ``calls`` keeps each request."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def start(self) -> FakeOpenAI:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def reply(self, request: dict[str, Any]) -> dict[str, Any]:
        """The chat.completion object answering ``request``."""
        messages = request.get("messages", [])
        last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)
        question = _text_of(messages[last_user].get("content")) if last_user >= 0 else ""
        turn = scenario.turn_for_question(question)
        number = turn.number if turn else 0
        tool_done = any(m.get("role") == "tool" for m in messages[last_user + 1 :])
        prompt_tokens = sum(_tokens(_text_of(m.get("content"))) for m in messages)
        message: dict[str, Any]
        if request.get("tools") and not tool_done:
            names = [t.get("function", {}).get("name", "") for t in request["tools"]]
            name = next((n for n in names if "retriev" in n.lower()), names[0])
            message = {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"call_{number}",
                        "type": "function",
                        "function": {"name": name, "arguments": json.dumps({"query": question})},
                    }
                ],
            }
            finish, reply_id, completion_tokens = "tool_calls", f"chatcmpl-{number}-tool", 5
        else:
            answer = turn.answer if turn else "I do not know."
            message = {"role": "assistant", "content": answer, "refusal": None}
            finish, reply_id, completion_tokens = "stop", f"chatcmpl-{number}", _tokens(answer)
        return {
            "id": reply_id,
            "object": "chat.completion",
            "created": CREATED,
            "model": request.get("model", scenario.MODEL),
            "system_fingerprint": "fp_spanjudge",
            "choices": [
                {"index": 0, "message": message, "finish_reason": finish, "logprobs": None}
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    self.send_error(404)
                    return
                body = read_body(self)
                request = json.loads(body or b"{}")
                fake.calls.append(request)
                completion = fake.reply(request)
                if request.get("stream"):
                    self._stream(completion, bool(request.get("stream_options", {})))
                    return
                data = json.dumps(completion).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _stream(self, completion: dict[str, Any], with_usage: bool) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()
                choice = completion["choices"][0]
                base = {k: completion[k] for k in ("id", "created", "model", "system_fingerprint")}
                base["object"] = "chat.completion.chunk"
                deltas: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
                if choice["message"].get("tool_calls"):
                    calls = [
                        dict(c, index=i) for i, c in enumerate(choice["message"]["tool_calls"])
                    ]
                    deltas.append({"tool_calls": calls})
                else:
                    deltas.append({"content": choice["message"]["content"]})
                chunks = [dict(base, choices=[{"index": 0, "delta": d}]) for d in deltas]
                done = {"index": 0, "delta": {}, "finish_reason": choice["finish_reason"]}
                chunks.append(dict(base, choices=[done]))
                if with_usage:
                    chunks.append(dict(base, choices=[], usage=completion["usage"]))
                for chunk in chunks:
                    self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
                self.wfile.write(b"data: [DONE]\n\n")
                self.close_connection = True

        return Handler


# --------------------------------------------------------------------------- OTLP capture server


def read_body(request: BaseHTTPRequestHandler) -> bytes:
    """A request body by Content-Length, or de-chunked: Node's OTLP/HTTP exporters stream the
    body (``Transfer-Encoding: chunked``) without a Content-Length."""
    if "chunked" not in (request.headers.get("Transfer-Encoding") or "").lower():
        return request.rfile.read(int(request.headers.get("Content-Length", "0")))
    body = bytearray()
    while True:
        size = int(request.rfile.readline().split(b";", 1)[0].strip() or b"0", 16)
        if size == 0:
            while request.rfile.readline().strip():  # trailers, then the empty line
                pass
            return bytes(body)
        body += request.rfile.read(size)
        request.rfile.readline()  # the CRLF after each chunk


class Capture:
    """OTLP/HTTP receiver writing each decompressed body to ``out_dir`` (NNN-traces.pb ...)."""

    def __init__(self, out_dir: Path) -> None:
        self.out_dir = out_dir
        self.counts: dict[str, int] = {"traces": 0, "logs": 0, "metrics_ignored": 0}
        self.last_request = time.monotonic()
        self._lock = threading.Lock()
        self._seq = 0
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> Capture:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def wait_quiet(self, seconds: float = QUIET_SECONDS, limit: float = 15.0) -> None:
        """Wait until no body arrived for ``seconds`` (late exports), at most ``limit``."""
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline and time.monotonic() - self.last_request < seconds:
            time.sleep(0.1)

    def _store(self, signal: str, body: bytes, json_body: bool) -> None:
        with self._lock:
            self._seq += 1
            self.counts[signal] += 1
            suffix = "json" if json_body else "pb"
            (self.out_dir / f"{self._seq:03d}-{signal}.{suffix}").write_bytes(body)
            self.last_request = time.monotonic()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        capture = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = read_body(self)
                encoding = (self.headers.get("Content-Encoding") or "").lower()
                if encoding == "gzip":
                    body = gzip.decompress(body)
                elif encoding == "deflate":
                    body = zlib.decompress(body)
                json_body = "json" in (self.headers.get("Content-Type") or "")
                path = self.path.rstrip("/")
                if path.endswith("/v1/traces"):
                    capture._store("traces", body, json_body)
                elif path.endswith("/v1/logs"):
                    capture._store("logs", body, json_body)
                elif path.endswith("/v1/metrics"):
                    with capture._lock:
                        capture.counts["metrics_ignored"] += 1
                else:
                    self.send_error(404)
                    return
                # An empty Export*ServiceResponse serialises to zero bytes: full success.
                self.send_response(200)
                self.send_header(
                    "Content-Type", "application/json" if json_body else "application/x-protobuf"
                )
                reply = b"{}" if json_body else b""
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

        return Handler


# --------------------------------------------------------------------------- one recording


@dataclass
class Recording:
    """What a recorder's ``record`` function gets: where to send things, and a notebook."""

    recording: str
    library: str
    fake: FakeOpenAI
    capture: Capture
    notes: list[str] = field(default_factory=list)

    @property
    def openai_base_url(self) -> str:
        return self.fake.base_url

    @property
    def otlp_endpoint(self) -> str:
        return self.capture.endpoint

    @property
    def traces_url(self) -> str:
        return self.capture.endpoint + "/v1/traces"

    @property
    def logs_url(self) -> str:
        return self.capture.endpoint + "/v1/logs"

    def note(self, text: str) -> None:
        """Record something the library did differently from the scenario (manifest notes)."""
        self.notes.append(text)


def _pinned_names() -> list[str]:
    path = os.environ.get("INTEROP_REQUIREMENTS")
    if not path:
        return []
    names = []
    for line in Path(path).read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            names.append(re.split(r"[=<>!~\[; ]", line, maxsplit=1)[0])
    return names


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


@contextmanager
def _servers(out_dir: Path) -> Iterator[tuple[FakeOpenAI, Capture]]:
    fake, capture = FakeOpenAI().start(), Capture(out_dir).start()
    try:
        yield fake, capture
    finally:
        fake.stop()
        capture.stop()


def run_one(library: str, name: str, mode: Mode, record: Callable[[Recording], None]) -> None:
    """Record ``name`` in this process (its env must already be set) and write the manifest."""
    out_dir = FIXTURES_DIR / name
    if out_dir.exists():
        shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True)
    with _servers(out_dir) as (fake, capture):
        os.environ["OPENAI_BASE_URL"] = fake.base_url
        os.environ.setdefault("OPENAI_API_KEY", "sk-interop-fake")
        rec = Recording(name, library, fake, capture)
        record(rec)
        capture.wait_quiet()
    installed = {
        d.metadata["Name"]: d.version
        for d in metadata.distributions()
        if d.metadata["Name"] not in ("pip", "setuptools", "wheel")
    }
    manifest = {
        "recording": name,
        "library": library,
        "content_capture": mode.content_capture,
        "env": mode.env,
        "packages": {n: _version(n) for n in _pinned_names()},
        "installed": dict(sorted(installed.items(), key=lambda kv: kv[0].lower())),
        "python": platform.python_version(),
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "bodies": {"traces": capture.counts["traces"], "logs": capture.counts["logs"]},
        "metrics_bodies_ignored": capture.counts["metrics_ignored"],
        "chat_completion_calls": len(fake.calls),
        "turns": len(scenario.TURNS),
        "notes": rec.notes,
    }
    (out_dir / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    print(
        f"{name}: {capture.counts['traces']} trace bodies, {capture.counts['logs']} log bodies, "
        f"{len(fake.calls)} chat calls -> {out_dir}"
    )
    if capture.counts["traces"] == 0:
        raise SystemExit(f"{name}: no trace body arrived")


def main(library: str, modes: dict[str, Mode], record: Callable[[Recording], None]) -> None:
    """CLI of a recorder: ``recorder.py [RECORDING ...]`` (default: every mode).

    Each recording runs in a child process with the mode's env, so switches that libraries read
    at import time take effect; the child (marked by ``INTEROP_CHILD``) records in-process.
    """
    names = sys.argv[1:] or list(modes)
    unknown = [n for n in names if n not in modes]
    if unknown:
        raise SystemExit(f"unknown recording(s) {unknown}; {library} has {list(modes)}")
    if os.environ.get("INTEROP_CHILD") == names[0] and len(names) == 1:
        run_one(library, names[0], modes[names[0]], record)
        return
    for name in names:
        # PYTHONSAFEPATH: a recorder named like its library must not shadow the library.
        env = dict(os.environ, **modes[name].env, INTEROP_CHILD=name, PYTHONSAFEPATH="1")
        if subprocess.run([sys.executable, sys.argv[0], name], env=env).returncode != 0:
            raise SystemExit(f"recording {name} failed")
