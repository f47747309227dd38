"""open_store(): which backend and which file a URL names."""

from __future__ import annotations

from pathlib import Path

import pytest

from spanjudge._core.span_record import SpanRecord
from spanjudge._store import STORE_URL_ENV, open_store
from spanjudge._store.sqlite import SQLiteStore


def _roundtrip(store: object) -> None:
    assert isinstance(store, SQLiteStore)
    store.write_spans([SpanRecord("a" * 32, "b" * 16, "s", 1, 2)], now=1.0)
    assert len(store.trace_spans("a" * 32)) == 1
    store.close()


def test_default_is_spanjudge_db_in_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(STORE_URL_ENV, raising=False)
    _roundtrip(open_store())
    assert (tmp_path / "spanjudge.db").exists()


def test_env_variable_names_the_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(STORE_URL_ENV, f"sqlite:///{tmp_path}/from-env.db")
    _roundtrip(open_store())
    assert (tmp_path / "from-env.db").exists()


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("sqlite:///rel/spans.db", "rel/spans.db"),
        ("sqlite:///./here.db", "here.db"),
        ("plain.db", "plain.db"),
        ("nested/dir/plain.db", "nested/dir/plain.db"),
    ],
)
def test_relative_urls_and_paths(
    url: str, expected: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    _roundtrip(open_store(url))
    assert (tmp_path / expected).exists()


def test_absolute_sqlite_url_has_four_slashes(tmp_path: Path) -> None:
    _roundtrip(open_store(f"sqlite:///{tmp_path / 'abs.db'}"))  # sqlite:////tmp/.../abs.db
    assert (tmp_path / "abs.db").exists()


def test_memory_store_is_private_and_leaves_no_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    _roundtrip(open_store(":memory:"))
    other = open_store(":memory:")
    assert other.trace_spans("a" * 32) == []
    other.close()
    assert list(tmp_path.iterdir()) == []


def test_unknown_scheme_is_refused() -> None:
    with pytest.raises(ValueError, match="mysql"):
        open_store("mysql://localhost/db")


def test_backend_options_pass_through(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "o.db"), busy_timeout=0.25)
    assert isinstance(store, SQLiteStore) and store.busy_timeout == 0.25
    store.close()
