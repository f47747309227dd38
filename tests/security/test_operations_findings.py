"""Issue 41's Low rows, each a regression test that failed before its fix: a client going away
mid-body, ``export -o`` onto a planted symlink, store files readable by every user, and a
world-readable config file holding a secret."""

from __future__ import annotations

import logging
import os
import socket
import stat
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from spanjudge._receive.receiver import create_receiver_app
from spanjudge._receive.serving import BackgroundServer
from spanjudge._store import open_store
from spanjudge.cli.app import cli
from spanjudge.settings import load_settings
from spanjudge.settings_files import file_warnings
from spanjudge.worker.preflight import start_warnings


def test_a_client_gone_mid_body_is_one_info_line_not_an_error_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    received: list[object] = []
    with (
        caplog.at_level(logging.DEBUG),
        BackgroundServer(create_receiver_app(sink=received.extend)) as server,
    ):
        sock = socket.create_connection((server.host, server.port), timeout=5)
        sock.sendall(
            b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n"
            b"Content-Length: 5000\r\n\r\n" + b"\x0a" * 100
        )
        time.sleep(0.2)
        sock.close()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not any(
            "disconnected after" in r.getMessage() for r in caplog.records
        ):
            time.sleep(0.05)
    lines = [r for r in caplog.records if "disconnected after" in r.getMessage()]
    assert len(lines) == 1, [r.getMessage() for r in caplog.records]
    assert lines[0].levelno == logging.INFO and lines[0].exc_info is None
    assert "100 of 5000 body bytes" in lines[0].getMessage()
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert received == []


def test_export_refuses_to_write_through_a_planted_symlink(tmp_path: Path) -> None:
    db = tmp_path / "store.db"
    open_store(f"sqlite:///{db}").close()
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    link = tmp_path / "failing.json"
    link.symlink_to(victim)

    run = CliRunner().invoke(cli, ["export", "-o", str(link), "--store", f"sqlite:///{db}"])
    assert run.exit_code == 2, run.output
    assert "symbolic link" in run.output
    assert victim.read_text() == "precious\n"
    assert link.is_symlink()

    fresh = tmp_path / "fresh.json"
    run = CliRunner().invoke(cli, ["export", "-o", str(fresh), "--store", f"sqlite:///{db}"])
    assert run.exit_code == 0, run.output
    assert fresh.read_text().strip() == "[]"
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o600  # it holds trace content
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".part")] == []


def test_a_new_sqlite_store_and_its_wal_and_shm_are_the_owners_only(tmp_path: Path) -> None:
    old = os.umask(0o022)  # the usual umask, which gave 0644 before
    try:
        store = open_store(f"sqlite:///{tmp_path / 'new.db'}")
        try:
            store.add_feedback([])  # a write: the -wal and -shm exist
            files = sorted(tmp_path.iterdir())
            modes = {p.name: oct(stat.S_IMODE(p.stat().st_mode)) for p in files}
        finally:
            store.close()
    finally:
        os.umask(old)
    assert {p.name for p in files} >= {"new.db", "new.db-wal", "new.db-shm"}
    assert modes == {p.name: oct(0o600) for p in files}


def test_a_world_readable_config_with_a_secret_is_warned_about_naming_keys_not_values(
    tmp_path: Path,
) -> None:
    config = tmp_path / "worker.toml"
    config.write_text(
        'bearer_token = "s3cret-token"\ninterval_keys = ["service"]\n'
        '[judge_options]\napi_key = "sk-live"\n[[rules]]\nmetric = "bias"\n'
    )
    config.chmod(0o644)
    settings = load_settings(config)
    # the worker says it once it has started (start_warnings), after every check that can
    # refuse the start, so that a setup mistake stays the one line a failed start prints
    [warning] = start_warnings(settings, judge=None)
    assert "every user of this machine can read it" in warning
    assert "bearer_token, judge_options.api_key" in warning  # not interval_keys
    assert "s3cret" not in warning and "sk-live" not in warning

    config.chmod(0o600)
    load_settings(config)
    assert file_warnings() == []

    # a later load says only what its own file calls for: the earlier file's warning, never
    # taken by a start, is not carried into it
    config.chmod(0o644)
    load_settings(config)
    assert start_warnings(load_settings(None), judge=None) == []
