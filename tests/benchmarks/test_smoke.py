"""Every script in benchmarks/ still runs: its ``--smoke`` mode prints the JSON it documents.

The benchmarks measure; they never pass or fail on their figures, so nothing used to notice when
one stopped running (``reliability.py`` raised ``TypeError`` for a while after the monitor took
a settings object). Here each script runs at tiny sizes in a subprocess with this interpreter,
on loopback only (PostgreSQL on 127.0.0.1, as the suite provisions it), and the test checks the
exit status, that stdout is one JSON document, the top-level keys readers of the JSON rely on,
and the few outcomes that do not depend on the clock (every case scored, nothing lost or
duplicated, no span dropped). A renamed parameter, a moved module or a changed key fails here.

The runs go three at a time: most of their time is process start-up and waiting on loopback
sockets, not CPU, and one after another they take minutes on a shared machine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.support.stores import POSTGRES_URL

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"
# a script that hangs must fail this file, not stall it (the slowest takes about a minute on
# two cores shared with other jobs)
RUN_TIMEOUT = 400
PARALLEL_RUNS = 3


def _check_interop(doc: dict[str, Any]) -> None:
    (row,) = doc["libraries"]
    assert row["recording"] == "spanjudge"
    assert row["scored_right"] == row["evaluations_owed"] == 21
    assert row["duplicates"] == row["evaluated_not_owed"] == row["errors"] == 0


def _check_agents(doc: dict[str, Any]) -> None:
    (row,) = doc["frameworks"]
    assert row["recording"] == "agent-pydantic-ai"
    assert row["scored_right_trajectory"] == row["agent_evaluations_owed"] == 15
    assert all(c["found"] and not c["false_alarms"] for c in row["checks"].values())


def _check_judge_cost(doc: dict[str, Any]) -> None:
    assert doc["cases"] > 0
    assert all(m["errors"] == 0 for m in doc["per_metric"].values())
    passes = {p["pass"]: p for p in doc["backfill_twice"]["passes"]}
    # the judge-result cache answers every question of the renamed rules
    assert passes["second"]["judge_calls"] == 0
    assert passes["first"]["judge_calls"] > 0
    # agents: ours and deepeval's agent metrics on the same recorded turns, none failing
    for row in doc["agents"]["per_metric"].values():
        for side in (row["ours"], row["deepeval"]):
            assert side["errors"] == 0 and side["scored"] > 0
        assert row["ours"]["judge_calls_per_case"] <= row["deepeval"]["judge_calls_per_case"]


def _check_online(doc: dict[str, Any]) -> None:
    assert "sqlite" in doc["store_write"], doc["store_write"]
    (run,) = doc["throughput"]
    assert run["errors"] == 0
    assert run["cases"] > 0
    assert doc["memory"][0]["evaluated"] > 0


def _check_overhead(doc: dict[str, Any]) -> None:
    batch = doc["runs"]["spanjudge_batch"]
    assert batch["status"] == "ok", batch.get("error")
    assert batch["spans_dropped"] == 0
    for kind in ("agent", "llm", "retriever", "tool", "chain"):
        assert doc["ratios"]["batch"][kind]["observe_over_raw_otel"] is not None
    # the call shapes peers/run_spanjudge.py times beside the kinds: by keyword, in conversation()
    shapes = doc["ratios"]["batch"]["shapes"]
    assert set(shapes) == {
        f"{kind}_{how}"
        for kind in ("tool", "retriever")
        for how in ("by_keyword", "in_conversation")
    }
    assert all(shape["observe_over_raw_otel"] is not None for shape in shapes.values())
    assert doc["ratios"]["vs_peers"] == {}  # no peer venvs in a smoke run


PLANNING_RULE_SETS = ("sampled_3.25pct", "every_turn", "sampled_3.25pct_and_conversation_rule")


def _check_ingest(doc: dict[str, Any]) -> None:
    runs = {(r["store"], r["rate"]): r for r in doc["runs"]}
    assert set(runs) == {(s, rate) for s in ("sqlite", "postgres") for rate in (1.0, 0.01)}
    for (_, rate), run in runs.items():
        assert run["spans"] > 0 and run["refused"] == 0
        assert (run["stored_share"] == 1.0) if rate == 1.0 else (run["stored_share"] < 0.2)
    assert doc["model"]["postgres"]["database_cores"] is not None


def _check_planning(doc: dict[str, Any]) -> None:
    for label in PLANNING_RULE_SETS:
        assert doc[label]["traces_planned"] == 200
        assert doc[label]["unplanned_left"] == 0
    assert doc["every_turn"]["jobs_enqueued"] == 200


def _check_reliability(doc: dict[str, Any]) -> None:
    faults = [r["fault"] for r in doc["summary"]]
    assert faults[:3] == [
        "judge 500",
        "judge malformed JSON",
        "SIGKILL of evaluator processes at random moments",
    ]
    # the worker's receiver takes the faults of issues 30 and 41: eight rows at least, each a
    # real worker process (the two of held spans owe the turns of sampled conversations only)
    assert len([f for f in faults[3:] if f.startswith("receiver: ")]) >= 8, faults
    for row in doc["summary"]:
        assert (row["lost"], row["duplicated"]) == (0, 0), row
        held = "held spans" in row["fault"] or "holds" in row["fault"]
        assert row["done"] + row["errored"] == row["expected"], row
        assert (0 < row["expected"] < row["cases"]) if held else (row["expected"] == row["cases"])


def _check_scale(doc: dict[str, Any]) -> None:
    # --smoke asks for 1,300 spans, sent in whole requests of demo turns (their size follows
    # the demo app's spans per turn)
    assert 1300 <= doc["memory"]["spans_received"] < 1300 + 200
    assert doc["memory"]["evaluations"] > 0
    (run,) = doc["scale_out"]
    assert (run["workers"], run["evaluations"], run["errors"]) == (1, 8, 0)
    assert doc["lag"]["evaluations_emitted"] == doc["lag"]["turns"]


def _check_store_write(doc: dict[str, Any]) -> None:
    assert doc["spans"] == 1000
    for store in ("sqlite", "postgresql"):
        assert doc[store]["exporter_spans_per_second"] > 0
        assert doc[store]["write_spans_per_second"] > 0


def _check_worker(doc: dict[str, Any]) -> None:
    for key in ("ingest_sqlite", "ingest_postgres"):
        assert len(doc[key]) == 1 and "spans_per_second" in doc[key][0]
    (lag,) = doc["lag_steady"]
    assert lag["evaluations"] == lag["traces"] == 2
    (run,) = doc["scale_out"]
    assert (run["workers"], run["evaluations"]) == (1, 6)


def _check_summaries(doc: dict[str, Any]) -> None:
    run = doc["postgresql"]
    assert run["results"] == 2000
    assert run["summary_rows"] == 4 * 6  # rules x service versions
    assert set(run["summary_sums_seconds"]) == {"unsplit", "service.version", "model"}
    assert len(run["cli_seconds"]) == 3


def _check_sampling(doc: dict[str, Any]) -> None:
    assert doc["runs"] == 6
    for name in ("budget", "fixed"):
        sampler = doc["samplers"][name]
        assert set(sampler["segments"]) == {"search", "checkout", "billing", "refunds"}
        assert all(s["intervals"] == 12 for s in sampler["segments"].values())
        assert sampler["judge_calls_per_day"] > 0
    # the precision target spends far fewer judge calls than the fixed rate matching it
    assert doc["budget_over_fixed_calls"] < 0.5
    # through the real planner, jobs record the allocation's probabilities once it has sums
    assert doc["through_planner"]["jobs_with_an_allocated_probability"] > 0
    # issue 40's cells, a few replicates each: no zero-width interval, the fold keeps a real
    # "other" apart without touching its input, no day past the budget (a deploy day included)
    cells = doc["cells"]
    assert set(cells) >= {"intervals", "sequential", "traffic", "fold", "done_when"}
    assert cells["done_when"]["zero_width_intervals"] == 0
    assert cells["fold"] == {"real_other_verdicts": 422, "row_named_other_verdicts": 422,
                             "row_named_other_folded": 0, "input_mutated": False}  # fmt: skip
    assert all(cell["days_over_budget"] == 0 for cell in cells["traffic"].values())


def _check_retention(doc: dict[str, Any]) -> None:
    small, large = doc["runs"]
    for run in (small, large):
        # a tenth of the store goes either way: a day dropped whole, the next deleted by rows
        assert (
            run["partitions"]["spans_removed"] == run["rows"]["spans_removed"] == run["spans"] // 10
        )
        assert run["partitions"]["bytes_after"] < run["partitions"]["bytes_before"]


# script -> (extra arguments, top-level keys, outcome checks); the slowest first, so the three
# parallel runs overlap them with the quick ones
SCRIPTS: dict[str, tuple[list[str], set[str], Callable[[dict[str, Any]], None]]] = {
    "scale": ([], {"machine", "judge", "memory", "scale_out", "lag"}, _check_scale),
    "ingest": ([], {"machine", "goal", "runs", "speedup_over_100pct", "model"}, _check_ingest),
    "worker": (
        [],
        {
            "machine",
            "ingest_sqlite",
            "ingest_sqlite_enrich",
            "enrich_ingest_ratio_sqlite_median",
            "ingest_postgres",
            "ingest_postgres_enrich",
            "enrich_ingest_ratio_postgres_median",
            "lag_steady",
            "scale_out",
        },
        _check_worker,
    ),
    "reliability": (
        ["--rows", "judge,process,receiver"],
        {"machine", "rows", "seconds", "summary"},
        _check_reliability,
    ),
    "judge_cost": (
        [],
        {
            "cases",
            "transport",
            "calls_per_case",
            "cases_per_s",
            "bound_cases_per_s",
            "throughput_vs_bound",
            "cpu_ms_per_request",
            "per_metric",
            "geval",
            "backfill_twice",
            "agents",
        },
        _check_judge_cost,
    ),
    "online": (
        [],
        {"machine", "store_write", "throughput", "pipeline_overhead", "memory"},
        _check_online,
    ),
    "interop": ([], {"benchmark", "machine", "judge", "libraries"}, _check_interop),
    "agents": ([], {"benchmark", "machine", "judge", "goal", "frameworks"}, _check_agents),
    "overhead": (
        ["--log-dir", "{tmp}"],
        {"benchmark", "method", "machine", "ratios", "runs"},
        _check_overhead,
    ),
    "planning": (
        [],
        {"commit", "spans", *PLANNING_RULE_SETS},
        _check_planning,
    ),
    "store_write": ([], {"benchmark", "spans", "sqlite", "postgresql"}, _check_store_write),
    "summaries": ([], {"benchmark", "machine", "postgresql"}, _check_summaries),
    "sampling": ([], {"benchmark", "runs", "samplers", "budget_over_fixed_calls"}, _check_sampling),
    "retention": ([], {"benchmark", "machine", "runs"}, _check_retention),
}


def _run(script: str, extra: list[str], tmp: Path) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "SPANJUDGE_TEST_POSTGRES_URL": POSTGRES_URL,
        "SPANJUDGE_BENCH_PG": POSTGRES_URL,
    }
    args = [a.replace("{tmp}", str(tmp)) for a in extra]
    return subprocess.run(
        [sys.executable, str(BENCHMARKS / f"{script}.py"), "--smoke", *args],
        capture_output=True,
        text=True,
        cwd=tmp,
        env=env,
        timeout=RUN_TIMEOUT,
    )


@pytest.fixture(scope="module")
def smoke_runs(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[dict[str, Future[subprocess.CompletedProcess[str]]]]:
    with ThreadPoolExecutor(max_workers=PARALLEL_RUNS) as pool:
        yield {
            script: pool.submit(_run, script, extra, tmp_path_factory.mktemp(script))
            for script, (extra, _, _) in SCRIPTS.items()
        }


def test_every_benchmark_script_has_a_smoke_case() -> None:
    # a module whose name starts with "_" is a part another script imports, not a script
    scripts = {p.stem for p in BENCHMARKS.glob("*.py") if not p.stem.startswith("_")}
    assert scripts == set(SCRIPTS)


# a part -> the script whose smoke run drives it, and the key of that run's JSON it fills (its
# check above asserts on it): a part nobody's smoke run imports would stop working unseen
PARTS = {
    "_judge_cost_agents": ("judge_cost", "agents"),
    "_reliability_receiver": ("reliability", "rows"),
}


def test_every_benchmark_part_is_driven_by_a_smoke_run() -> None:
    parts = {p.stem for p in BENCHMARKS.glob("_*.py")}
    assert parts == set(PARTS)
    for part, (script, key) in PARTS.items():
        source = (BENCHMARKS / f"{script}.py").read_text(encoding="utf-8")
        assert f"from {part} import" in source, (part, script)
        assert key in SCRIPTS[script][1], (part, key)


@pytest.mark.timeout(RUN_TIMEOUT + 60)
@pytest.mark.parametrize("script", list(SCRIPTS))
def test_smoke_mode_prints_its_json(
    script: str, smoke_runs: dict[str, Future[subprocess.CompletedProcess[str]]]
) -> None:
    done = smoke_runs[script].result()
    assert done.returncode == 0, f"{script}.py --smoke failed:\n{done.stderr[-3000:]}"
    doc = json.loads(done.stdout)
    _, keys, check = SCRIPTS[script]
    assert keys <= set(doc), f"missing keys: {sorted(keys - set(doc))}"
    check(doc)
