"""The review commands read a worker's PostgreSQL store in its ``store_schema``, as the worker
wrote it: with the schema ignored they opened (and migrated) an empty ``public`` store and
reported nothing found."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from spanjudge._core.span_record import SpanRecord
from spanjudge._store.postgres import PostgresStore
from spanjudge.cli.app import cli
from tests.support.stores import POSTGRES_URL, schema_name

TRACE = "5ab1e0000000000000000000000000c1"


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("SPANJUDGE_STORE_URL", raising=False)
    schema = schema_name("cli_schema")
    store = PostgresStore(POSTGRES_URL, schema=schema, max_size=1, timeout=5.0)
    try:
        store.write_spans([SpanRecord(TRACE, "00000000000000aa", "turn", 1, 2)], now=1.0)
    finally:
        store.close()
    path = tmp_path / "worker.toml"
    path.write_text(
        f'store_url = "{POSTGRES_URL}"\nstore_schema = "{schema}"\n'
        'judge_model = "openai/x"\n\n[[rules]]\nmetric = "bias"\ntarget = "agent"\n'
    )
    return path


def test_explain_and_feedback_open_the_worker_s_schema(config: Path) -> None:
    explained = CliRunner().invoke(cli, ["explain", TRACE[:12], "--config", str(config)])
    assert explained.exit_code == 0, explained.output
    assert f"trace {TRACE}" in explained.output
    labelled = CliRunner().invoke(
        cli,
        ["feedback", TRACE[:12], "--metric", "bias", "--label", "fail", "--config", str(config)],
    )
    assert labelled.exit_code == 0, labelled.output
    assert f"bias fail on {TRACE}" in labelled.output
