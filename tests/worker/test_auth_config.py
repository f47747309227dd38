"""Authentication is never turned off by accident: an empty bearer token is a configuration
error, and a receiver reachable from other machines needs a token or an explicit opt-in."""

from __future__ import annotations

from pathlib import Path

import pytest

from spanjudge.errors import ConfigError
from spanjudge.settings import load_settings


@pytest.fixture(autouse=True)
def _no_spanjudge_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in list(__import__("os").environ):
        if key.startswith("SPANJUDGE_"):
            monkeypatch.delenv(key)


def error_of(text: str, tmp_path: Path) -> str:
    path = tmp_path / "w.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_settings(path)
    return str(caught.value)


@pytest.mark.parametrize("token", ["", "   ", "\t\n"])
def test_an_empty_or_blank_bearer_token_is_an_error_naming_the_key(
    token: str, tmp_path: Path
) -> None:
    message = error_of(f"bearer_token = {token!r}\n".replace("'", '"'), tmp_path)
    assert "bearer_token: " in message and "empty" in message


def test_an_empty_token_from_an_unset_template_variable_is_an_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SPANJUDGE_BEARER_TOKEN", "")
    with pytest.raises(ConfigError, match=r"bearer_token: .*empty"):
        load_settings(None)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "[::]", "10.1.2.3", "worker.example"])
def test_a_non_loopback_bind_without_a_token_needs_the_opt_in(host: str, tmp_path: Path) -> None:
    message = error_of(f'receiver_host = "{host}"\n', tmp_path)
    assert "allow_unauthenticated: " in message
    assert f"receiver_host {host}" in message and "bearer_token" in message
    assert message.count("\n") == 0  # one error, one line


def test_the_opt_in_or_a_token_lets_a_non_loopback_bind_start(tmp_path: Path) -> None:
    opted_in = tmp_path / "open.toml"
    opted_in.write_text('receiver_host = "0.0.0.0"\nallow_unauthenticated = true\n')
    assert load_settings(opted_in).bearer_token is None
    with_token = tmp_path / "token.toml"
    with_token.write_text('receiver_host = "0.0.0.0"\nbearer_token = "t0ken"\n')
    assert load_settings(with_token).bearer_token == "t0ken"


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "[::1]", "localhost"])
def test_a_loopback_bind_runs_without_a_token(host: str, tmp_path: Path) -> None:
    path = tmp_path / "w.toml"
    path.write_text(f'receiver_host = "{host}"\n')
    settings = load_settings(path)
    assert settings.bearer_token is None and not settings.allow_unauthenticated


def test_an_empty_token_is_reported_once_not_also_as_a_missing_one(tmp_path: Path) -> None:
    message = error_of('receiver_host = "0.0.0.0"\nbearer_token = ""\n', tmp_path)
    assert "bearer_token: " in message and "allow_unauthenticated" not in message
