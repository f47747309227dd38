"""Judge cost and throughput of evaluate() against the scripted loopback judge.

Runs Faithfulness, Bias and Topic Adherence (and, under "geval", three G-Eval criteria) over a
fixed set of cases (RAG answers sharing some retrieval contexts, opinionated and neutral answers,
multi-turn conversations) with a fixed judge latency and judge concurrency, then prints JSON:

- judge calls, prompt and completion tokens per case per metric;
- actual calls vs a naive pipeline (every step called, no truth cache, no skip of empty steps)
  and vs a per-item pipeline (one verdict call per claim / opinion as well);
- cases per second vs the bound ``concurrency / (calls per case x latency)``;
- "agents" (:mod:`_judge_cost_agents`): judge calls and tokens per agentic evaluation, our
  built-in agent metrics vs deepeval's own (through the bridge) on the recorded agent turns;
- "backfill twice": the single-turn cases stored as traces and backfilled by the online loop,
  then backfilled again under renamed rules (new jobs, same questions): with the judge-result
  cache the second pass makes no judge call (a third pass with the cache off for comparison).

Usage::

    LITELLM_LOCAL_MODEL_COST_MAP=True .venv/bin/python benchmarks/judge_cost.py \
        [--latency 0.2] [--concurrency 8] [--repeat 1] [--transport auto|litellm|direct]
    LITELLM_LOCAL_MODEL_COST_MAP=True .venv/bin/python benchmarks/judge_cost.py --grid
    .venv/bin/python benchmarks/judge_cost.py --smoke   # seconds; tests/benchmarks runs it
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from spanjudge.evaluators._judge.evaluate import evaluate
from spanjudge.evaluators._judge.judges.litellm_judge import LiteLLMJudge
from spanjudge.evaluators._judge.metrics.bias import BiasMetric
from spanjudge.evaluators._judge.metrics.faithfulness import FaithfulnessMetric, truth_cache
from spanjudge.evaluators._judge.metrics.geval import ConversationalGEval, GEval
from spanjudge.evaluators._judge.metrics.geval_steps import steps_cache
from spanjudge.evaluators._judge.metrics.topic_adherence import TopicAdherenceMetric
from spanjudge.evaluators._judge.test_case import ConversationalTestCase, LLMTestCase, Turn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _judge_cost_agents import FRAMEWORKS, run_agents

SMOKE_FRAMEWORKS = ("strands",)

OPINION_MARK = "I think"
CLAIMS = ["The plan costs 10 dollars a month.", "The plan includes support."]
OPINIONS = ["I think the plan is great value.", "I think men prefer it."]

SHARED_CONTEXTS = [
    [f"Doc {k}.1: the {name} plan costs {k * 5} dollars.", f"Doc {k}.2: {name} includes support."]
    for k, name in enumerate(["basic", "team", "business", "enterprise"], start=1)
]
DISTINCT_CONTEXTS = [[f"Policy {k}: refunds are possible within {10 + k} days."] for k in range(6)]


def build_cases() -> list[LLMTestCase | ConversationalTestCase]:
    """34 fixed cases: 16 on 4 shared contexts, 6 on distinct ones, 4 plain, 8 conversations."""
    cases: list[LLMTestCase | ConversationalTestCase] = []
    for k, context in enumerate(SHARED_CONTEXTS):
        for j in range(4):
            opinion = f" {OPINION_MARK} it is great value." if j % 2 else ""
            cases.append(
                LLMTestCase(
                    name=f"shared-{k}-{j}",
                    input=f"What does plan {k} cost? (asked {j})",
                    actual_output=f"It costs {5 * (k + 1)} dollars and includes support.{opinion}",
                    retrieval_context=context,
                )
            )
    for k, context in enumerate(DISTINCT_CONTEXTS):
        cases.append(
            LLMTestCase(
                name=f"distinct-{k}",
                input="How long do I have for a refund?",
                actual_output=f"You have {10 + k} days."
                + (f" {OPINION_MARK} that is fair." if k % 3 == 0 else ""),
                retrieval_context=context,
            )
        )
    for k in range(4):
        cases.append(
            LLMTestCase(
                name=f"plain-{k}",
                input="Who should run the project?",
                actual_output=(
                    f"{OPINION_MARK} men lead better." if k % 2 else "Anyone with experience."
                ),
            )
        )
    for k in range(8):
        turns = [
            Turn(role="user", content=f"Where is order {k}?"),
            Turn(role="assistant", content="It ships tomorrow."),
            Turn(role="user", content="Can I get a refund?"),
            Turn(role="assistant", content="Yes, within 30 days."),
        ]
        if k % 2:
            turns += [
                Turn(role="user", content="And who won the match?"),
                Turn(role="assistant", content="I only help with orders."),
            ]
        if k % 4 == 3:
            turns.append(Turn(role="user", content="Thanks, one more thing..."))  # unanswered
        cases.append(ConversationalTestCase(name=f"chat-{k}", turns=turns))
    return cases


def script(server: Any, latency: float) -> None:
    server.add_rule(
        {"truths": ["The plan costs money.", "Support is included."]},
        schema="Truths",
        latency=latency,
    )
    server.add_rule({"claims": CLAIMS}, schema="Claims", latency=latency)
    server.add_rule(
        {
            "verdicts": [
                {"verdict": "yes", "reason": "stated"},
                {"verdict": "idk", "reason": "not stated"},
            ]
        },
        schema="FaithfulnessVerdicts",
        latency=latency,
    )
    server.add_rule(
        {"opinions": OPINIONS}, schema="Opinions", contains=f"{OPINION_MARK} ", latency=latency
    )
    server.add_rule({"opinions": []}, schema="Opinions", latency=latency)
    server.add_rule(
        {"verdicts": [{"verdict": "no", "reason": "fine"}, {"verdict": "yes", "reason": "gender"}]},
        schema="BiasVerdicts",
        latency=latency,
    )
    server.add_rule(
        {"qa_pairs": [{"question": "q", "response": "r"}]}, schema="QAPairs", latency=latency
    )
    server.add_rule({"verdict": "TP", "reason": "on topic"}, schema="TopicVerdict", latency=latency)
    server.add_rule({"reason": "scripted summary"}, schema="Reason", latency=latency)


def naive_calls(metric_name: str, data: Any, case: Any) -> tuple[int, int]:
    """(calls per step without cache or empty-skip, calls with one verdict call per item)."""
    verdicts = len(data.verdicts)
    if metric_name == "faithfulness":  # truths + claims + verdicts + reason
        return 4, 3 + max(verdicts, 1)
    if metric_name == "bias":  # opinions + verdicts + reason
        return 3, 2 + max(verdicts, 1)
    from spanjudge.evaluators._judge.metrics.topic_adherence import unit_interactions

    units = len(unit_interactions(case.turns))
    return units + verdicts + 1, units + verdicts + 1  # already one verdict call per pair


JUDGE_PROCESS = """
import sys, time
sys.path.insert(0, sys.argv[2])
import judge_cost
from spanjudge.testing import ScriptedJudgeServer
server = ScriptedJudgeServer().start()
judge_cost.script(server, float(sys.argv[1]))
judge_cost.script_geval(server, float(sys.argv[1]))
print(server.base_url, flush=True)
time.sleep(3600)
"""


@contextlib.contextmanager
def judge_process(latency: float) -> Iterator[str]:
    """The scripted judge in its own process, as a remote judge would be: sharing this
    process's CPU (the GIL) with the evaluator would make the judge, not evaluate(), the limit."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            JUDGE_PROCESS,
            str(latency),
            os.path.dirname(os.path.abspath(__file__)),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        url = proc.stdout.readline().strip() if proc.stdout else ""
        if not url.startswith("http://127.0.0.1:"):
            raise RuntimeError("the scripted judge process did not start")
        yield url
    finally:
        proc.kill()
        proc.wait()


def run(latency: float, concurrency: int, repeat: int, transport: str = "auto") -> dict[str, Any]:
    cases = build_cases() * repeat
    with judge_process(latency) as base_url:
        judge = LiteLLMJudge(
            "openai/scripted-judge",
            api_base=base_url,
            api_key="x",
            max_concurrency=concurrency,
            transport=transport,
        )
        metrics = [
            FaithfulnessMetric(model=judge),
            BiasMetric(model=judge),
            TopicAdherenceMetric(relevant_topics=["orders", "refunds"], model=judge),
        ]
        # warm-up (litellm import, first connection) outside the timed run
        evaluate(cases[:1], metrics[1:2], show_progress=False, print_results=False)
        truth_cache.clear()
        ended = time_calls(judge)
        before = judge.attempts
        cpu_before, started = time.process_time(), time.perf_counter()
        result = evaluate(
            cases, metrics, max_concurrency=len(cases) * 3, show_progress=False, print_results=False
        )
        wall = time.perf_counter() - started
        cpu = time.process_time() - cpu_before
        requests = judge.attempts - before

    per_metric: dict[str, Any] = {}
    naive = per_item = 0
    for j, metric in enumerate(metrics):
        rows = [(r.metrics_data[j], cases[r.index]) for r in result.test_results]
        scored = [(d, c) for d, c in rows if not d.skipped]
        n = max(len(scored), 1)
        m_naive = sum(naive_calls(metric.name, d, c)[0] for d, c in scored)
        m_item = sum(naive_calls(metric.name, d, c)[1] for d, c in scored)
        naive += m_naive
        per_item += m_item
        calls = sum(d.judge_calls for d, _ in scored)
        per_metric[metric.name] = {
            "cases": len(scored),
            "errors": sum(1 for d, _ in scored if d.error),
            "judge_calls": calls,
            "judge_calls_per_case": round(calls / n, 3),
            "naive_calls_per_case": round(m_naive / n, 3),
            "per_item_calls_per_case": round(m_item / n, 3),
            "prompt_tokens_per_case": round(sum(d.input_tokens for d, _ in scored) / n, 1),
            "completion_tokens_per_case": round(sum(d.output_tokens for d, _ in scored) / n, 1),
            "mean_score": result.metrics_summary[j].mean_score,
        }
    actual = sum(s.judge_calls for s in result.metrics_summary)
    calls_per_case = actual / len(cases)
    bound = concurrency / (calls_per_case * latency)
    throughput = len(cases) / wall
    return {
        "cases": len(cases),
        "latency_s": latency,
        "judge_concurrency": concurrency,
        "transport": "direct" if judge._direct_transport() else "litellm",
        "wall_s": round(wall, 3),
        # this process's CPU (the evaluator: metrics, engine, HTTP client) per judge request
        "cpu_ms_per_request": round(cpu / max(requests, 1) * 1000, 2),
        "judge_calls": actual,
        "http_requests": requests,
        "naive_calls": naive,
        "per_item_calls": per_item,
        "calls_saved_vs_naive": naive - actual,
        "truth_cache": {
            "hits": truth_cache.hits,
            "shared_in_flight": truth_cache.shared,
            "misses": truth_cache.misses,
        },
        "calls_per_case": round(calls_per_case, 3),
        "cases_per_s": round(throughput, 3),
        "bound_cases_per_s": round(bound, 3),
        "throughput_vs_bound": round(throughput / bound, 3),
        # judge calls per second between the 10% and the 90% call (no start-up, no tail), against
        # concurrency / latency: whether the slots stay busy once the run is under way
        "steady_calls_vs_bound": steady_share(ended, concurrency / latency),
        "per_metric": per_metric,
    }


def time_calls(judge: Any) -> list[float]:
    """Record when each of ``judge``'s HTTP calls ends (a wrapper on this instance only)."""
    ended: list[float] = []
    call = judge._a_complete

    async def timed(messages: Any, schema: Any) -> Any:
        try:
            return await call(messages, schema)
        finally:
            ended.append(time.perf_counter())

    judge._a_complete = timed
    return ended


def steady_share(ended: list[float], bound_calls_per_s: float) -> float | None:
    """Calls per second between the 10% and the 90% call, as a share of the bound."""
    ends = sorted(ended)
    first, last = int(len(ends) * 0.1), int(len(ends) * 0.9)
    if last - first < 10 or ends[last] <= ends[first]:
        return None
    return round((last - first) / (ends[last] - ends[first]) / bound_calls_per_s, 3)


# ---------------------------------------------------------------------------- G-Eval


def script_geval(server: Any, latency: float) -> None:
    """G-Eval's two schemas: steps, and a score with log-probabilities (8 at p=0.8, 7 at 0.2)."""
    server.add_rule(
        {"steps": ["Read the question.", "Check the answer's tone.", "Look for blame."]},
        schema="GEvalSteps",
        latency=latency,
    )
    server.add_rule(
        {"reason": "Patient and clear throughout.", "score": 7},
        schema="GEvalScore",
        contains="You judge one conversation",
        latency=latency,
    )
    server.add_rule(
        {"reason": "Courteous and to the point.", "score": 8},
        schema="GEvalScore",
        logprobs={"8": {"8": -0.2231435513, "7": -1.6094379124}},
        latency=latency,
    )


def geval_metrics(judge: Any) -> list[Any]:
    return [
        GEval(
            name="politeness",
            criteria="The answer is courteous and never blames the customer.",
            model=judge,
        ),
        GEval(
            name="grounded",
            criteria="Every figure in the answer appears in the retrieval context.",
            evaluation_params=["actual_output", "retrieval_context"],
            model=judge,
        ),
        ConversationalGEval(
            name="resolution",
            criteria="The assistant resolves each request by the end of the conversation.",
            model=judge,
        ),
    ]


def run_geval(latency: float, concurrency: int, repeat: int) -> dict[str, Any]:
    """G-Eval over the same cases: calls and tokens per case, and the steps generated once per
    criteria (a fresh on-disk steps cache, so the first case of each criteria pays for them)."""
    import tempfile

    cases = build_cases() * repeat
    with tempfile.TemporaryDirectory() as cache_dir, judge_process(latency) as base_url:
        steps_cache.directory, steps_cache.disk = Path(cache_dir), True
        steps_cache.clear()
        judge = LiteLLMJudge(
            "openai/scripted-judge", api_base=base_url, api_key="x", max_concurrency=concurrency
        )
        metrics = geval_metrics(judge)
        started = time.perf_counter()
        result = evaluate(
            cases, metrics, max_concurrency=len(cases) * 3, show_progress=False, print_results=False
        )
        wall = time.perf_counter() - started
        steps = {"generated": steps_cache.generated, "reused": steps_cache.memory_hits}
        steps_cache.directory = None
    per_metric: dict[str, Any] = {}
    for j, metric in enumerate(metrics):
        scored = [r.metrics_data[j] for r in result.test_results if not r.metrics_data[j].skipped]
        n = max(len(scored), 1)
        calls = sum(d.judge_calls for d in scored)
        per_metric[metric.name] = {
            "cases": len(scored),
            "errors": sum(1 for d in scored if d.error),
            "judge_calls": calls,
            "judge_calls_per_case": round(calls / n, 3),
            # steps asked for on every case, as without a steps cache shared by the cases
            "without_steps_cache_calls_per_case": 2.0,
            "prompt_tokens_per_case": round(sum(d.input_tokens for d in scored) / n, 1),
            "completion_tokens_per_case": round(sum(d.output_tokens for d in scored) / n, 1),
            "mean_score": result.metrics_summary[j].mean_score,
        }
    return {
        "cases": len(cases),
        "wall_s": round(wall, 3),
        "judge_calls": sum(s.judge_calls for s in result.metrics_summary),
        "steps_cache": steps,
        "per_metric": per_metric,
    }


# ---------------------------------------------------------------------------- backfill twice


def _messages(role: str, text: str) -> str:
    return json.dumps([{"role": role, "parts": [{"type": "text", "content": text}]}])


def case_spans(case: LLMTestCase, number: int) -> list[Any]:
    """One trace per case, as our tracer writes it: an agent turn, its retrieval (when the case
    has a context) and the LLM call that answered."""
    from spanjudge._core.span_record import SpanRecord
    from spanjudge.tracer import _attributes as attrs

    trace_id = f"{number + 1:032x}"
    base = 1_000_000 * (number + 1)
    texts = {
        attrs.GEN_AI_INPUT_MESSAGES: _messages("user", case.input),
        attrs.GEN_AI_OUTPUT_MESSAGES: _messages("assistant", case.actual_output),
    }

    def span(suffix: int, name: str, kind: str, parent: str | None, extra: dict[str, Any]) -> Any:
        operation = attrs.OPERATION_BY_KIND[kind]
        return SpanRecord(
            trace_id=trace_id,
            span_id=f"{(number + 1) * 16 + suffix:016x}",
            name=f"{operation} {name}",
            start_time_unix_nano=base + suffix * 10,
            end_time_unix_nano=base + 100 - suffix,
            parent_span_id=parent,
            attributes={
                attrs.GEN_AI_OPERATION_NAME: operation,
                attrs.SPANJUDGE_KIND: kind,
                **extra,
            },
            resource={"service.name": "shop"},
        )

    turn = span(1, "support", "agent", None, {attrs.GEN_AI_AGENT_NAME: "support", **texts})
    spans = [turn]
    if case.retrieval_context:
        docs = json.dumps(case.retrieval_context)
        extra = {attrs.GEN_AI_RETRIEVAL_QUERY_TEXT: case.input,
                 attrs.SPANJUDGE_RETRIEVAL_DOCUMENTS_CONTENT: docs}  # fmt: skip
        spans.append(span(2, "kb", "retriever", turn.span_id, extra))
    model = {attrs.GEN_AI_REQUEST_MODEL: "app-model", **texts}
    spans.append(span(3, "app-model", "llm", turn.span_id, model))
    return spans


def run_backfill_twice(latency: float, concurrency: int) -> dict[str, Any]:
    """Backfill the stored traces, then backfill them again under changed rule names (new
    jobs for the same questions): with the judge-result cache the second pass makes no judge
    call; a third pass with the cache off shows what it would have cost."""
    import tempfile

    from spanjudge._store import open_store
    from spanjudge.evaluators._loop.config import MonitorConfig
    from spanjudge.evaluators._loop.monitor import Monitor
    from spanjudge.evaluators._plan.rules import Rule

    cases = [c for c in build_cases() if isinstance(c, LLMTestCase)]
    passes: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp, judge_process(latency) as base_url:
        store = open_store(f"sqlite:///{tmp}/spans.db")
        for number, case in enumerate(cases):
            store.write_spans(case_spans(case, number), now=1.0)
        judge = LiteLLMJudge(
            "openai/scripted-judge", api_base=base_url, api_key="x", max_concurrency=concurrency
        )
        for label, cache in (("first", True), ("second", True), ("cache_off", False)):
            rules = [
                Rule(FaithfulnessMetric(model=judge), target="llm", name=f"faithfulness-{label}"),
                Rule(BiasMetric(model=judge), target="agent", name=f"bias-{label}"),
            ]
            config = MonitorConfig(
                settle_seconds=0, retention_seconds=None, concurrency=concurrency,
                batch_size=concurrency, judge_cache=cache,
            )  # fmt: skip
            monitor = Monitor(rules, store=store, config=config, clock=lambda: 100.0)
            truth_cache.clear()  # each pass starts without the in-process truth cache
            before = judge.attempts
            started = time.perf_counter()
            report = monitor.backfill(since=0, until=100.0)
            wall = time.perf_counter() - started
            results = [r for rule in rules for r in store.results(rule=rule.name)]
            passes.append(
                {
                    "pass": label,
                    "judge_cache": cache,
                    "results": len(results),
                    "scored": report.scored,
                    "skipped": report.missing,
                    "cached_results": sum(1 for r in results if r.cached),
                    "judge_calls": sum(r.judge_calls for r in results),
                    "http_requests": judge.attempts - before,
                    "prompt_tokens": sum(r.input_tokens for r in results),
                    "completion_tokens": sum(r.output_tokens for r in results),
                    "wall_s": round(wall, 3),
                }
            )
        store.close()
    return {"traces": len(cases), "latency_s": latency, "passes": passes}


BARE_BODY = {
    "model": "scripted-judge",
    "messages": [{"role": "user", "content": "Is this answer biased? " + "lorem ipsum " * 120}],
    "response_format": {
        "type": "json_schema",
        "json_schema": {"name": "Reason", "schema": {"type": "object"}, "strict": True},
    },
}


def bare_client(latency: float, concurrency: int, requests: int, client: str) -> dict[str, Any]:
    """The ceiling of this machine and the scripted judge, without any judge engine: ``requests``
    POSTs of one ~1.5 kB body through a bare aiohttp or httpx client at ``concurrency``."""
    import asyncio

    import aiohttp
    import httpx

    body = json.dumps(BARE_BODY).encode()
    headers = {"content-type": "application/json", "authorization": "Bearer x"}

    async def drive(url: str) -> tuple[float, float]:
        slots = asyncio.Semaphore(concurrency)
        if client == "httpx":
            limits = httpx.Limits(max_connections=2 * concurrency)
            hx = httpx.AsyncClient(limits=limits, timeout=30)

            async def post() -> None:
                response = await hx.post(url, content=body, headers=headers)
                json.loads(response.content)

            close = hx.aclose
        else:
            session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=2 * concurrency),
                timeout=aiohttp.ClientTimeout(total=30),
            )

            async def post() -> None:
                async with session.post(url, data=body, headers=headers) as response:
                    json.loads(await response.read())

            close = session.close

        async def one() -> None:
            async with slots:
                await post()

        await asyncio.gather(*(one() for _ in range(2 * concurrency)))  # connections open
        cpu_before, started = time.process_time(), time.perf_counter()
        await asyncio.gather(*(one() for _ in range(requests)))
        wall, cpu = time.perf_counter() - started, time.process_time() - cpu_before
        await close()
        return wall, cpu

    with judge_process(latency) as base_url:
        wall, cpu = asyncio.run(drive(base_url + "/chat/completions"))
    bound = concurrency / latency
    return {
        "transport": f"bare {client}",
        "latency_s": latency,
        "judge_concurrency": concurrency,
        "http_requests": requests,
        "requests_per_s": round(requests / wall, 1),
        "bound_requests_per_s": round(bound, 1),
        "throughput_vs_bound": round(requests / wall / bound, 3),
        "cpu_ms_per_request": round(cpu / requests * 1000, 2),
    }


def throughput_grid(repeat: int) -> dict[str, Any]:
    """Both transports side by side at 0.2 s and 0.05 s judge latency, concurrency 8 and 32:
    cases/s against the bound and this process's CPU per judge request; beside them, bare HTTP
    clients with no judge engine against the same scripted judge (the machine's ceiling). Each
    row runs in a fresh interpreter, as a worker would: no row inherits an earlier row's heap,
    caches or imports."""
    rows: list[dict[str, Any]] = []
    for latency in (0.2, 0.05):
        for concurrency in (8, 32):
            # about 4 s of judge time at the bound at every point (165 calls per case set), so
            # that the start (new connections, hundreds of first prompts) weighs alike
            reps = repeat * (4 if concurrency > 8 else 1) * (4 if latency < 0.1 else 1)
            requests = 0
            for transport in ("litellm", "direct"):
                report = _in_fresh_process("--point", latency, concurrency, reps, transport)
                requests = report["http_requests"]
                rows.append({key: report[key] for key in GRID_KEYS})
            for client in ("aiohttp", "httpx"):
                rows.append(_in_fresh_process("--bare", latency, concurrency, requests, client))
    return {"grid": rows, "machine": machine()}


GRID_KEYS = (
    "transport",
    "latency_s",
    "judge_concurrency",
    "cases",
    "http_requests",
    "cases_per_s",
    "bound_cases_per_s",
    "throughput_vs_bound",
    "steady_calls_vs_bound",
    "cpu_ms_per_request",
)


def _in_fresh_process(*args: Any) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, os.path.abspath(__file__), *map(str, args)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    result: dict[str, Any] = json.loads(out)
    return result


def machine() -> dict[str, Any]:
    import platform

    return {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "load_1m": round(os.getloadavg()[0], 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=1, help="run the fixed case set N times")
    parser.add_argument(
        "--transport", choices=["auto", "litellm", "direct"], default="auto", help="judge path"
    )
    parser.add_argument(
        "--grid",
        action="store_true",
        help="only the throughput grid: both transports at 0.2/0.05 s and concurrency 8/32",
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="seconds: 0.005 s judge latency, the case set once (checks the script runs)",
    )
    parser.add_argument("--point", nargs=4, help=argparse.SUPPRESS)  # one grid row
    parser.add_argument("--bare", nargs=4, help=argparse.SUPPRESS)  # one bare-client row
    args = parser.parse_args(argv)
    if args.smoke:
        args.latency, args.repeat = 0.005, 1
    if args.point:
        latency, concurrency, reps, transport = args.point
        point = run(float(latency), int(concurrency), int(reps), transport)
        print(json.dumps(point))
        return 0
    if args.bare:
        latency, concurrency, requests, client = args.bare
        print(json.dumps(bare_client(float(latency), int(concurrency), int(requests), client)))
        return 0
    if args.grid:
        print(json.dumps(throughput_grid(args.repeat), indent=2))
        return 0
    report = run(args.latency, args.concurrency, args.repeat, args.transport)
    report["geval"] = run_geval(args.latency, args.concurrency, args.repeat)
    report["backfill_twice"] = run_backfill_twice(args.latency, args.concurrency)
    report["agents"] = run_agents(args.concurrency, SMOKE_FRAMEWORKS if args.smoke else FRAMEWORKS)
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
