"""The worker's setup checks in process (the fast lane's share of test_setup_mistakes.py): each
refused setting names its key in one line, and the start-up checks tell "change the settings"
(ConfigError) from "not available now" (StoreError, UnavailableError)."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest

from spanjudge.errors import ConfigError, StoreError
from spanjudge.settings import load_settings
from spanjudge.settings_checks import known_judge_options
from spanjudge.worker.preflight import (
    UnavailableError,
    bind_receiver,
    judge_unreachable,
    open_worker_store,
    start_warnings,
)
from spanjudge.worker.rule_config import make_judge
from tests.support.ports import closed_port


def error_of(**settings: Any) -> str:
    with pytest.raises(ConfigError) as info:
        load_settings(None, **settings)
    return str(info.value)


@pytest.mark.parametrize(
    ("settings", "line"),
    [
        ({"store_url": ""}, "store_url: is empty"),
        ({"store_url": "mysql://db/spans"}, "store_url: unsupported scheme 'mysql'"),
        ({"store_url": "host=db dbname=spans"}, "store_url: looks like a libpq key=value"),
        ({"store_schema": "spans"}, "store_schema: only a PostgreSQL store_url has schemas"),
        ({"judge_model": " "}, "judge_model: is empty"),
        ({"downstream_endpoint": "not a url"}, "downstream_endpoint: expected an http://"),
        ({"downstream_endpoint": "http://collector:99999"}, "downstream_endpoint: the URL's port"),
        ({"judge_base_url": "localhost:8000/v1"}, "judge_base_url: expected an http://"),
        ({"receiver_host": "http://0.0.0.0"}, "receiver_host: is a host name or an IP address"),
        ({"judge_options": {"temprature": 0}}, "did you mean 'temperature'?"),
        ({"judge_options": {"max_token": 9}}, "did you mean 'max_tokens'?"),
        ({"judge_options": {"timeout": 5}}, "set judge_timeout instead"),
        ({"judge_options": {"model": "x"}}, "set judge_model instead"),
        ({"settle_seconds": 1e308}, "settle_seconds: Input should be less than or equal to 86400"),
        ({"judge_timeout": float("inf")}, "judge_timeout: Input should be"),
        ({"agreement_window_seconds": float("nan")}, "agreement_window_seconds: Input should be"),
        ({"max_hold_seconds": 1e308}, "max_hold_seconds: Input should be less than or equal"),
        ({"batch_size": 2**70}, "batch_size: Input should be less than or equal to 10000"),
    ],
)
def test_a_refused_setting_is_one_line_naming_its_key(settings: dict[str, Any], line: str) -> None:
    message = error_of(**settings)
    assert line in message
    assert "\n" not in message
    assert message.startswith("invalid worker configuration (environment): ")


def test_good_values_of_the_checked_settings_pass() -> None:
    settings = load_settings(
        None,
        store_url="postgresql+psycopg://app@db/spans",
        store_schema="spans",
        downstream_endpoint="https://collector.example:4318/v1/traces",
        judge_base_url="http://[::1]:8000/v1",
        receiver_host="::1",
        judge_options={"temperature": 0, "api_base": "http://x:1/v1", "vertex_project": "p"},
        retention_seconds=None,
    )
    assert settings.store_schema == "spans"
    assert load_settings(None, store_url="./spans.db").store_url == "./spans.db"  # a plain path


def test_several_bad_keys_are_a_heading_and_a_line_each() -> None:
    heading, *lines = error_of(store_url="", judge_model="").splitlines()
    assert heading == "invalid worker configuration (environment):"
    assert [line.split(":")[0].strip() for line in lines] == ["store_url", "judge_model"]


def test_a_key_from_the_environment_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "w.toml"
    path.write_text("receiver_port = 4318\n", encoding="utf-8")
    monkeypatch.setenv("SPANJUDGE_RECEIVER_PORT", "many")
    with pytest.raises(ConfigError, match=r"receiver_port: .*\(from SPANJUDGE_RECEIVER_PORT\)"):
        load_settings(path)


@pytest.mark.parametrize("variable", ["SPANJUDGE_RULES", "SPANJUDGE_JUDGE_OPTIONS"])
def test_a_variable_that_is_not_json_names_the_variable(
    variable: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(variable, "{not json")
    with pytest.raises(ConfigError, match=f"^{variable}: not valid JSON"):
        load_settings(None)


def test_the_known_judge_options_include_the_judges_own_keywords() -> None:
    known = known_judge_options()
    assert {"max_output_tokens", "transport", "temperature", "api_base"} <= known
    assert not {"timeout", "model", "max_concurrency"} & known  # settings of their own


def test_an_unset_key_variable_and_an_openai_model_without_a_key_name_judge_api_key_env(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_API_BASE", "OPENAI_BASE_URL", "NO_SUCH_KEY"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ConfigError, match=r"^judge_api_key_env: the variable NO_SUCH_KEY"):
        make_judge(load_settings(None, judge_api_key_env="NO_SUCH_KEY"))
    with pytest.raises(ConfigError, match=r"^judge_api_key_env: .*OPENAI_API_KEY is not set"):
        make_judge(load_settings(None, judge_model="gpt-4o-mini"))
    with pytest.raises(ConfigError, match=r"^judge_api_key_env: .*OPENAI_API_KEY is not set"):
        make_judge(load_settings(None, judge_model="openai/gpt-4o-mini"))
    # a server of your own, another provider, or a key: no complaint
    make_judge(load_settings(None, judge_model="openai/q", judge_base_url="http://h:1/v1"))
    make_judge(load_settings(None, judge_model="anthropic/claude-3-5-haiku-latest"))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    make_judge(load_settings(None, judge_model="gpt-4o-mini"))


def test_a_taken_port_is_unavailable_and_a_foreign_host_is_a_config_error() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(UnavailableError, match=rf"^receiver_port: 127.0.0.1:{port} is already"):
            bind_receiver("127.0.0.1", port)
    with pytest.raises(ConfigError, match=r"^receiver_host: 192.0.2.1 is not an address"):
        bind_receiver("192.0.2.1", 0)
    with pytest.raises(ConfigError, match=r"^receiver_host: cannot resolve"):
        bind_receiver("no-such-host.invalid", 0)


def test_bound_sockets_listen_on_the_port_the_system_chose() -> None:
    sockets = bind_receiver("127.0.0.1", 0)
    try:
        port = sockets[0].getsockname()[1]
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass
    finally:
        for sock in sockets:
            sock.close()


def test_store_errors_name_store_url_and_tell_fix_from_retry(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("not a database", encoding="utf-8")
    for url in (f"sqlite:///{tmp_path}/a-file/x.db", f"sqlite:///{tmp_path}/a-file"):
        with pytest.raises(ConfigError, match=r"^store_url: "):
            open_worker_store(load_settings(None, store_url=url))
    down = f"postgresql://app:pg-secret@127.0.0.1:{closed_port()}/spans"
    with pytest.raises(StoreError, match=r"^store_url: PostgreSQL at ") as info:
        open_worker_store(load_settings(None, store_url=down))
    assert "pg-secret" not in str(info.value) and "\n" not in str(info.value)


def test_start_warnings_name_an_unreachable_judge_and_unknown_options() -> None:
    port = closed_port()
    settings = load_settings(
        None,
        judge_model="openai/q",
        judge_base_url=f"http://127.0.0.1:{port}/v1",
        judge_options={"vertex_project": "p"},
    )
    first, second = start_warnings(settings, make_judge(settings))
    assert first.startswith(f"judge_base_url: the judge at http://127.0.0.1:{port}/v1 does not")
    assert second.startswith("judge_options: vertex_project not options spanjudge knows")
    with socket.socket() as judge:
        judge.bind(("127.0.0.1", 0))
        judge.listen()
        assert judge_unreachable(f"http://127.0.0.1:{judge.getsockname()[1]}/v1") is None
