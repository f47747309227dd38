"""Replay of the recorded interop fixtures through a real ``spanjudge worker`` receiver.

:func:`replay` POSTs a recording's bodies, unchanged (protobuf, in arrival order: traces to
``/v1/traces``, logs to ``/v1/logs``), to an in-process :class:`~spanjudge.worker.service.Worker`
served by uvicorn on 127.0.0.1, with a SQLite store and the offline demo judge, then lets the traces
settle and the conversation go idle on a controlled clock and runs the monitor's ticks. It
returns what the worker stored and the cases it rebuilds, keyed by scenario turn. Used by
``test_conformance.py`` and ``benchmarks/interop.py``::

    judge = start_offline_judge()
    done = replay("openinference", tmp_dir, judge)
    done.results  # every EvaluationRecord the worker stored
"""

from __future__ import annotations

import contextlib
import json
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from spanjudge._core.span_record import EvaluationRecord, SpanRecord
from spanjudge._demo.judge import start_offline_judge
from spanjudge.evaluators._rebuild.cases import build_case
from spanjudge.evaluators._rebuild.loading import load_conversation, load_trace
from spanjudge.evaluators._rebuild.targets import Skip, conversation_target, find_targets
from spanjudge.settings import load_settings
from spanjudge.testing import ScriptedJudgeServer
from spanjudge.tracer import _attributes as attrs
from spanjudge.worker.service import Worker
from tests.support.clock import Clock
from tests.support.otlp_sink import OtlpSink

FIXTURES = Path(__file__).parent / "fixtures"
sys.path.insert(0, str(Path(__file__).parent / "record"))
# the stdlib-only scenario the recorders share; re-exported for the tests and the benchmark
import scenario as scenario  # noqa: E402

BASELINE = "spanjudge"
CONTENT_ON = (
    "openinference",
    "openllmetry",
    "otel-genai-span",
    "otel-genai-event",
    "pydantic-ai",
    "langchain-openinference",
    "langchain-openllmetry",
    "openlit",
    "litellm-otel",
    "vercel-ai",
    BASELINE,
)
# content-off recording -> the capture setting a skip reason must name
CONTENT_OFF = {
    "openinference-hidden": "OPENINFERENCE_HIDE",
    "openllmetry-nocontent": "TRACELOOP_TRACE_CONTENT",
    "otel-genai-nocontent": "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT",
    "pydantic-ai-nocontent": "include_content",
}
# every recording under fixtures/, content on or off
RECORDINGS = tuple(sorted(p.name for p in FIXTURES.iterdir() if (p / "manifest.json").exists()))
RELEVANT_TOPICS = ["returns, shipping and payments of an online shop"]
SPAN_RULES = {
    "faith-llm": ("faithfulness", "llm"),
    "bias-llm": ("bias", "llm"),
    "faith-agent": ("faithfulness", "agent"),
    "bias-agent": ("bias", "agent"),
}
TOPICS = "topics"
SETTLE, IDLE = 0.3, 0.5


def worker_config(judge: ScriptedJudgeServer, store_url: str, downstream: str) -> dict[str, Any]:
    """Faithfulness and bias on ``llm`` and on ``agent``, topic adherence on ``conversation``."""
    rules: list[dict[str, Any]] = [
        {"metric": metric, "target": target, "name": name}
        for name, (metric, target) in SPAN_RULES.items()
    ]
    rules.append(
        {
            "metric": "topic_adherence",
            "target": "conversation",
            "name": TOPICS,
            "params": {"relevant_topics": RELEVANT_TOPICS},
        }
    )
    return config_with(rules, judge, store_url, downstream)


def config_with(
    rules: list[dict[str, Any]], judge: ScriptedJudgeServer, store_url: str, downstream: str
) -> dict[str, Any]:
    """A worker's settings for replaying recordings: ``rules``, the scripted judge, short
    timings, scores out as spans to ``downstream``."""
    return {
        "store_url": store_url,
        "downstream_endpoint": downstream,
        "outputs": ["span"],
        "judge_model": "openai/scripted-judge",
        "judge_options": {"api_base": judge.base_url, "api_key": "x"},
        "settle_seconds": SETTLE,
        "idle_seconds": IDLE,
        "retention_seconds": None,
        "rules": rules,
    }


@dataclass
class Replayed:
    """What the worker made of one recording.

    ``turn_of_trace``: trace id -> scenario turn number (traces in start order: one per turn);
    ``roots``: trace id -> its root span (the scenario's agent turn); ``cases``: (rule name,
    target id) -> the case :func:`build_case` rebuilds from the stored spans (or its Skip);
    ``spans``: trace id -> the stored spans (when the read-back keeps them);
    ``evaluation_spans``: (rule name, evaluated span id) of what reached the downstream.
    """

    recording: str
    manifest: dict[str, Any]
    results: list[EvaluationRecord]
    turn_of_trace: dict[str, int]
    roots: dict[str, SpanRecord]
    cases: dict[tuple[str, str], Any]
    evaluation_spans: list[tuple[str, str | None]] = field(default_factory=list)
    statuses: list[int] = field(default_factory=list)
    spans: dict[str, list[SpanRecord]] = field(default_factory=dict)  # trace id -> its spans

    def of_rule(self, rule: str) -> list[EvaluationRecord]:
        return [r for r in self.results if r.rule == rule]

    def turn(self, result: EvaluationRecord) -> int | None:
        return self.turn_of_trace.get(result.trace_id or "")


def bodies(recording: str) -> list[tuple[str, bytes]]:
    """(signal, raw protobuf body) in recorded arrival order."""
    out = []
    for path in sorted((FIXTURES / recording).glob("*.pb")):
        signal = "logs" if path.name.endswith("-logs.pb") else "traces"
        out.append((signal, path.read_bytes()))
    return out


@contextlib.contextmanager
def served(app: Any) -> Iterator[str]:
    """``app`` on a free 127.0.0.1 port for the duration of the block; yields its base URL."""
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("receiver did not start")
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


def replay(
    recording: str,
    tmp: Path,
    judge: ScriptedJudgeServer,
    *,
    config: Callable[[ScriptedJudgeServer, str, str], dict[str, Any]] | None = None,
    read_back: Callable[[Worker, Replayed], None] | None = None,
) -> Replayed:
    """Send one recording through the worker and read back results and rebuilt cases.

    ``recording``: a folder under ``fixtures/`` (``agents/agent-strands`` for an agent
    recording); ``config``/``read_back``: the worker's settings and what is read back after the
    run (default: the scenario's rules, :func:`worker_config`, and its cases)."""
    manifest = json.loads((FIXTURES / recording / "manifest.json").read_text(encoding="utf-8"))
    clock = Clock(time.time())
    with OtlpSink() as sink:
        store_url = f"sqlite:///{tmp}/{recording.replace('/', '-')}.db"
        settings = (config or worker_config)(judge, store_url, sink.endpoint)
        worker = Worker(load_settings(None, **settings), clock=clock)
        try:
            statuses = []
            with served(worker.app) as url:
                for signal, body in bodies(recording):
                    response = httpx.post(
                        f"{url}/v1/{signal}",
                        content=body,
                        headers={"Content-Type": "application/x-protobuf"},
                        timeout=30,
                    )
                    statuses.append(response.status_code)
            clock.now += SETTLE + 1
            worker.monitor.tick()
            clock.now += IDLE + 1
            worker.monitor.tick()  # the conversation has gone idle
            assert worker.emitter.force_flush(10)
            results = worker.store.results(limit=10_000)
            done = Replayed(recording, manifest, results, {}, {}, {}, statuses=statuses)
            (read_back or _read_back)(worker, done)
            spans = sink.wait_for(lambda got: _evaluations(got) >= len(results), timeout=20)
            done.evaluation_spans = [
                (str(s.attributes.get(attrs.SPANJUDGE_EVAL_RULE)), s.parent_span_id)
                for s in spans
                if attrs.GEN_AI_EVALUATION_NAME in s.attributes
            ]
        finally:
            with contextlib.suppress(Exception):
                worker.emitter.shutdown(5)
            with contextlib.suppress(Exception):
                worker.store.close()
    return done


def _evaluations(spans: list[Any]) -> int:
    return sum(1 for s in spans if attrs.GEN_AI_EVALUATION_NAME in s.attributes)


def _read_back(worker: Worker, done: Replayed) -> None:
    """Turns by trace start order, and every case the rules rebuild from the stored spans."""
    store = worker.store
    # every trace the receiver stored, whether or not a rule produced a result in it
    trace_ids, _ = store.targets_since(since=0.0, until=worker.clock() + 1)
    traces = {tid: load_trace(store, tid) for tid in trace_ids}
    ordered = sorted(traces, key=lambda tid: min(s.start_time_unix_nano for s in traces[tid]))
    done.turn_of_trace = {tid: n for n, tid in enumerate(ordered, start=1)}
    done.roots = {tid: next(s for s in traces[tid] if s.is_root) for tid in ordered}
    rules = {rule.name: rule for rule in worker.rules}
    for spans in traces.values():
        for name in SPAN_RULES:
            for target in find_targets(rules[name], spans):
                done.cases[(name, target.target_id)] = build_case(rules[name], target, spans)
    conversations = {
        r.target_id for r in done.results if r.rule == TOPICS and r.target_type == "conversation"
    }
    for conversation_id in conversations | {scenario.SESSION_ID}:
        turns = load_conversation(store, conversation_id)
        found = conversation_target(conversation_id, turns)
        done.cases[(TOPICS, conversation_id)] = (
            build_case(rules[TOPICS], found, turns)
            if found is not None
            else Skip(f"no conversation {conversation_id!r} in the store")
        )


@pytest.fixture(scope="session")
def offline_judge() -> Iterator[ScriptedJudgeServer]:
    server = start_offline_judge()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def replays(tmp_path_factory: pytest.TempPathFactory, offline_judge: ScriptedJudgeServer) -> Any:
    """``replays(recording)``: each recording replayed once per session, then shared."""
    cache: dict[str, Replayed] = {}

    def get(recording: str) -> Replayed:
        if recording not in cache:
            cache[recording] = replay(recording, tmp_path_factory.mktemp(recording), offline_judge)
        return cache[recording]

    return get
