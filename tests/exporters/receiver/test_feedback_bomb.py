"""``POST /v1/feedback`` is bounded like the trace receiver: a label is a few hundred bytes, so
the route takes at most 1 MiB of JSON, plain or inflated, and answers 413 naming the limit.

It used to take the receiver's 64 MiB and ``json.loads`` it before the sink could refuse it: a
61 KB gzip body of ``[[],[],...]`` inflated to 60 MiB built about 20 million lists, well over
1 GB. Each bomb here runs in a child process that reads its own peak resident size
(``ru_maxrss``) before and after the request, so the figure is the route's alone.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from spanjudge._receive.feedback_route import MAX_FEEDBACK_BYTES
from spanjudge._receive.receiver import create_receiver_app
from spanjudge.human_feedback import MAX_NOTE_CHARS, feedback_http_sink
from tests.support.stores import sqlite_store

ROOT = Path(__file__).resolve().parents[3]
MiB = 2**20
# the most the child's peak may grow while it answers one bomb (a 1 MiB body loads as 26 MB)
BUDGET_MB = 100

# Posts a body of ``[[],[],...]`` (``inflated`` bytes, gzip or plain) to /v1/feedback of a
# receiver with the worker's default limits and a real feedback sink on SQLite, and prints the
# answer and how far the process's peak resident size grew.
CHILD = """
import gzip, json, resource, sys, zlib
from starlette.testclient import TestClient
from spanjudge._receive.receiver import create_receiver_app
from spanjudge._store import open_store
from spanjudge.human_feedback import MAX_NOTE_CHARS, feedback_http_sink

inflated, compressed, path = int(sys.argv[1]), sys.argv[2] == "gzip", sys.argv[3]
count = (inflated - 2) // 3
if compressed:  # built a piece at a time: the bomb never sits inflated in this process
    deflate = zlib.compressobj(9, zlib.DEFLATED, 31)
    piece = b"[]," * 100_000
    parts = [deflate.compress(b"[")]
    for _ in range(count // 100_000):
        parts.append(deflate.compress(piece))
    parts += [deflate.compress(b"[]]"), deflate.flush()]
    body = b"".join(parts)
else:
    body = b"[" + b"[]," * count + b"[]]"
store = open_store(f"sqlite:///{path}")
app = create_receiver_app(sink=lambda s: None, feedback_sink=feedback_http_sink(store))
client = TestClient(app)
headers = {"Content-Type": "application/json"}
if compressed:
    headers["Content-Encoding"] = "gzip"
# warm up (imports, the first request's allocations), then measure
client.post("/v1/feedback", content=b"{}", headers={"Content-Type": "application/json"})
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
answer = client.post("/v1/feedback", content=body, headers=headers)
grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
print(json.dumps({"status": answer.status_code, "body": answer.json(), "grown_mb": grown,
                  "sent": len(body)}))
"""


def _bomb(tmp_path: Path, inflated: int, encoding: str) -> dict[str, object]:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(inflated), encoding, str(tmp_path / "f.db")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    result: dict[str, object] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


@pytest.mark.parametrize(
    ("inflated", "encoding"),
    [(60 * MiB, "gzip"), (8 * MiB - 64, "identity")],
    ids=["gzip-60MiB", "plain-8MiB"],
)
def test_a_bomb_of_empty_arrays_is_a_413_naming_the_limit_in_bounded_memory(
    tmp_path: Path, inflated: int, encoding: str
) -> None:
    found = _bomb(tmp_path, inflated, encoding)
    assert found["status"] == 413, found
    body = found["body"]
    assert isinstance(body, dict) and body["code"] == 8  # RESOURCE_EXHAUSTED
    assert str(MAX_FEEDBACK_BYTES) in body["message"], body
    grown = found["grown_mb"]
    assert isinstance(grown, float) and grown < BUDGET_MB, found


def test_the_longest_label_is_not_refused_for_its_size(tmp_path: Path) -> None:
    # the longest note, each character escaped as a surrogate pair (12 bytes): 48 KB of JSON
    note = "\U0001f600" * MAX_NOTE_CHARS
    label = {"trace_id": "f" * 32, "metric": "faithfulness", "label": "fail", "note": note}
    body = json.dumps(label, ensure_ascii=True).encode()
    assert 12 * MAX_NOTE_CHARS < len(body) < MAX_FEEDBACK_BYTES
    with sqlite_store(tmp_path / "feedback.db") as store:
        app = create_receiver_app(sink=lambda spans: None, feedback_sink=feedback_http_sink(store))
        answer = TestClient(app).post(
            "/v1/feedback", content=body, headers={"Content-Type": "application/json"}
        )
    # past the size check: the sink looked for the target and did not find it
    assert answer.status_code == 404, answer.text[:300]
