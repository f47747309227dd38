"""Commands that take a trace id accept the shortened id the demo prints (its first 12
characters) when exactly one stored trace starts with it; none or several is a usage error."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from spanjudge._core.span_record import SpanRecord
from spanjudge._store import open_store
from spanjudge.cli.app import cli
from spanjudge.cli.common import EXIT_USAGE

ALONE = "4bf92f3577b34da6a3ce929d0e0e4736"
TWIN_A = "7c0ffee0000000000000000000000001"
TWIN_B = "7c0ffee0000000000000000000000002"


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args))


@pytest.fixture
def store_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.delenv("SPANJUDGE_STORE_URL", raising=False)
    url = f"sqlite:///{tmp_path / 'spans.db'}"
    with open_store(url) as store:
        store.write_spans(
            [SpanRecord(t, "00000000000000aa", "turn", 1, 2) for t in (ALONE, TWIN_A, TWIN_B)],
            now=1.0,
        )
    return url


def test_explain_takes_the_12_characters_the_demo_prints(store_url: str) -> None:
    result = run("explain", ALONE[:12], "--store", store_url)
    assert result.exit_code == 0, result.output
    assert f"trace {ALONE}" in result.output


def test_feedback_takes_a_unique_prefix_and_labels_the_whole_id(store_url: str) -> None:
    result = run("feedback", ALONE[:8], "--metric", "bias", "--label", "pass", "--store", store_url)
    assert result.exit_code == 0, result.output
    assert f"bias pass on {ALONE}" in result.output
    with open_store(store_url) as store:
        assert [f.trace_id for f in store.feedback()] == [ALONE]


@pytest.mark.parametrize(
    "command", [["explain"], ["feedback", "--metric", "bias", "--label", "pass"]]
)
def test_a_prefix_of_several_traces_is_a_usage_error_listing_them(
    store_url: str, command: list[str]
) -> None:
    result = run(command[0], "7c0ffee", *command[1:], "--store", store_url)
    assert result.exit_code == EXIT_USAGE, result.output
    assert "several traces start with 7c0ffee" in result.stderr
    assert TWIN_A in result.stderr and TWIN_B in result.stderr
    with open_store(store_url) as store:
        assert store.feedback() == []


@pytest.mark.parametrize(
    "command", [["explain"], ["feedback", "--metric", "bias", "--label", "pass"]]
)
def test_a_prefix_of_no_trace_is_a_usage_error(store_url: str, command: list[str]) -> None:
    result = run(command[0], "deadbeef", *command[1:], "--store", store_url)
    assert result.exit_code == EXIT_USAGE, result.output
    assert "no trace starting with 'deadbeef'" in result.stderr
    assert "Traceback" not in result.output
