"""`spanjudge backfill`: stored spans from the past evaluated under the configured rules."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from spanjudge._store import open_store
from spanjudge.cli.app import cli, parse_since
from tests.evaluators.loop.test_monitor_e2e import agent


def test_backfill_evaluates_stored_traces_once(
    app: Any, store: Any, offline_judge: Any, sink: Any, tmp_path: Path, clock: Any
) -> None:
    clock.now = time.time() - 3600  # spans that arrived an hour ago
    for i in range(3):
        agent(f"Question {i}: can I return it?", "Returns are possible within 30 days of delivery.")
    app.flush()
    db = tmp_path / "spans.db"
    config = tmp_path / "worker.toml"
    config.write_text(
        f"""
store_url = "sqlite:///{db}"
judge_model = "openai/scripted-judge"
judge_options = {{ api_base = "{offline_judge.base_url}", api_key = "x" }}
downstream_endpoint = "{sink.endpoint}"

[[rules]]
metric = "bias"
target = "agent"
"""
    )
    result = CliRunner().invoke(cli, ["backfill", "--since", "2h", "--config", str(config)])
    assert result.exit_code == 0, result.output
    assert "3 scored" in result.output
    with open_store(f"sqlite:///{db}") as check:
        assert len(check.results()) == 3
    sink.wait_for(lambda s: len(s) >= 3)

    again = CliRunner().invoke(cli, ["backfill", "--since", "2h", "--config", str(config)])
    assert again.exit_code == 0 and "0 scored" in again.output  # nothing evaluated twice


def test_backfill_rejects_a_bad_since(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["backfill", "--since", "yesterday"])
    assert result.exit_code != 0 and "30m, 6h, 2d" in result.output


def test_parse_since() -> None:
    assert parse_since("90m", now=10_000) == 10_000 - 5400
    assert parse_since("2d", now=1e6) == 1e6 - 172_800
    assert parse_since("1700000000", now=0) == 1_700_000_000
