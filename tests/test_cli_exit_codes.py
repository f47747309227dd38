"""One failure convention for every ``spanjudge`` command: 0 done, 1 the command ran and failed,
2 usage or configuration error (docs/reference/cli.md, spanjudge/cli/common.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from spanjudge.cli.app import cli
from spanjudge.cli.common import EXIT_FAILED, EXIT_USAGE
from spanjudge.errors import StoreError

ROOT = Path(__file__).resolve().parent.parent
TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args))


@pytest.fixture
def bad_config(tmp_path: Path) -> str:
    path = tmp_path / "bad.toml"
    path.write_text('receiver_port = "not-a-port"\n', encoding="utf-8")
    return str(path)


@pytest.fixture
def empty_store(tmp_path: Path) -> str:
    from spanjudge._store import open_store

    url = f"sqlite:///{tmp_path / 'spans.db'}"
    open_store(url).close()
    return url


def test_an_unknown_command_or_option_is_a_usage_error() -> None:
    assert run("no-such-command").exit_code == EXIT_USAGE
    assert run("scores", "--no-such-option").exit_code == EXIT_USAGE


@pytest.mark.parametrize("command", [["worker"], ["backfill", "--since", "1h"], ["explain", TRACE]])
def test_invalid_settings_are_a_usage_error_in_every_command(
    command: list[str], bad_config: str
) -> None:
    result = run(*command, "--config", bad_config)
    assert result.exit_code == EXIT_USAGE, result.output
    assert "error: " in result.stderr and "receiver_port" in result.stderr
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    "command",
    [["explain", TRACE], ["scores"], ["calibration"], ["export", "-o", "out.json"]],
)
def test_a_store_file_that_is_not_there_is_a_usage_error(
    command: list[str], tmp_path: Path
) -> None:
    result = run(*command, "--store", str(tmp_path / "missing.db"))
    assert result.exit_code == EXIT_USAGE, result.output
    assert "no span store at" in result.stderr
    assert not (tmp_path / "missing.db").exists()  # not created by looking


@pytest.mark.parametrize(
    "command", [["backfill"], ["scores"], ["calibration"], ["export", "-o", "x"]]
)
def test_a_bad_since_is_a_usage_error(command: list[str], empty_store: str) -> None:
    args = [*command, "--since", "soon"]
    if command[0] != "backfill":
        args += ["--store", empty_store]
    result = run(*args)
    assert result.exit_code == EXIT_USAGE, result.output
    assert "--since 'soon'" in result.stderr


def test_a_refused_label_and_an_unknown_trace_are_usage_errors(empty_store: str) -> None:
    refused = run(
        "feedback", TRACE, "--metric", "nonsense", "--label", "pass", "--store", empty_store
    )
    assert refused.exit_code == EXIT_USAGE, refused.output
    assert "error: " in refused.stderr and "metric" in refused.stderr
    unknown = run("explain", TRACE, "--store", empty_store)
    assert unknown.exit_code == EXIT_USAGE, unknown.output
    assert f"trace {TRACE} is not in the store" in unknown.stderr


def test_a_command_that_runs_and_fails_exits_1_with_the_message(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def fail(settings: object) -> int:
        raise StoreError("PostgreSQL store unreachable (postgresql://app:***@db/spans)")

    monkeypatch.setattr("spanjudge.worker.service.run_worker", fail)
    config = tmp_path / "worker.toml"
    config.write_text("", encoding="utf-8")
    result = run("worker", "--config", str(config))
    assert result.exit_code == EXIT_FAILED, result.output
    assert result.stderr.startswith("error: PostgreSQL store unreachable")
    assert "Traceback" not in result.output


def test_the_help_and_the_reference_page_state_the_convention() -> None:
    help_text = run("--help").output
    assert re.search(r"0\s+done", help_text)
    assert re.search(r"1\s+the command ran and failed", help_text)
    assert re.search(r"2\s+usage or configuration error", help_text)
    page = (ROOT / "docs" / "reference" / "cli.md").read_text()
    for code in ("| 0 |", "| 1 |", "| 2 |"):
        assert code in page
    # every command of the group has its section on the page
    for name in cli.commands:
        assert f"## `spanjudge {name}`" in page, name
