"""Reading across worker groups (issue 31 item 3, issue 29): ``scores --summary``, ``compare``
and ``calibration`` given ``--store`` once per group add the groups' sums up exactly, so two
SQLite stores and a schema of a PostgreSQL server answer what one store holding every result
answers; and the numbers' windows, alpha and cap are worker settings the CLI and the worker's
gauges use."""

from __future__ import annotations

import json
import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from spanjudge._core.span_record import EvaluationRecord, FeedbackRecord
from spanjudge._store import open_store
from spanjudge._store.models import JobSpec
from spanjudge._store.sql import SpanStore
from spanjudge.cli.app import cli
from spanjudge.errors import ConfigError
from spanjudge.settings import load_settings
from spanjudge.worker.numbers import NumbersConfig
from tests.support.stores import POSTGRES_URL, drop_schema, open_postgres, schema_name

NOW = time.time()


def run(*args: str) -> Any:
    return CliRunner().invoke(cli, list(args))


def records(version: str, rate: float, n: int, seed: int, weight: float) -> list[EvaluationRecord]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        passed = rng.random() < rate
        out.append(
            EvaluationRecord(
                "faith", "faithfulness", "llm", f"{version}-{seed}-{i}", f"{seed:08x}{i:024x}",
                f"{i:016x}", score=0.9 if passed else 0.2, label="pass" if passed else "fail",
                success=passed, sample_rate=1 / weight, service_name="shop",
                segments={"service": "shop", "service.version": version},
            )
        )  # fmt: skip
    return out


def write(store: SpanStore, batch: list[EvaluationRecord], at: float = NOW) -> None:
    store.enqueue_jobs(
        [JobSpec(r.rule, "llm", r.target_id, r.trace_id, r.span_id) for r in batch], now=at
    )
    jobs = store.claim_jobs(owner="w", limit=len(batch), lease_seconds=60, now=at)
    by_id = {r.target_id: r for r in batch}
    for job in jobs:
        assert store.complete_job(job.job_id, owner="w", record=by_id[job.target_id], now=at)


def label(store: SpanStore, batch: list[EvaluationRecord], every: int) -> None:
    for r in batch[::every]:
        store.add_feedback(
            [FeedbackRecord(metric="faithfulness", label="fail", trace_id=r.trace_id)], now=NOW
        )


@pytest.fixture
def groups(tmp_path: Path) -> Iterator[tuple[list[str], str]]:
    """Three worker groups' stores (two SQLite files, a PostgreSQL schema) as --store URLs,
    and one SQLite store holding every one of their results."""
    schema = schema_name()
    batches = [
        records("1.0", 0.92, 300, 1, 1.0) + records("1.1", 0.80, 40, 2, 1.0),
        records("1.0", 0.90, 120, 3, 4.0) + records("1.1", 0.78, 200, 4, 4.0),
        records("1.0", 0.95, 80, 5, 20.0) + records("1.1", 0.70, 60, 6, 2.0),
    ]
    urls = [f"sqlite:///{tmp_path / 'a.db'}", f"sqlite:///{tmp_path / 'b.db'}"]
    stores: list[SpanStore] = [open_store(url) for url in urls] + [open_postgres(schema)]
    everything = open_store(f"sqlite:///{tmp_path / 'all.db'}")
    try:
        for store, batch in zip(stores, batches, strict=True):
            write(store, batch)
            write(everything, batch)
            label(store, batch, 7)
            label(everything, batch, 7)
        yield [*urls, f"{POSTGRES_URL}?schema={schema}"], f"sqlite:///{tmp_path / 'all.db'}"
    finally:
        for store in [*stores, everything]:
            store.close()
        drop_schema(schema)


def same(a: Any, b: Any) -> bool:
    """Equal JSON, floats to 1e-9 (sums added in another order differ in the last bits)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and isinstance(b, float):
        return a == pytest.approx(b, rel=1e-9, abs=1e-12)
    return bool(a == b)


def as_json(*args: str) -> Any:
    done = run(*args, "--json")
    assert done.exit_code == 0, done.output
    return json.loads(done.output)


def test_summary_across_stores_is_the_summary_of_one_store_holding_everything(
    groups: tuple[list[str], str],
) -> None:
    urls, everything = groups
    many = [a for url in urls for a in ("--store", url)]
    merged = as_json("scores", "--summary", "--by", "service.version", *many)
    single = as_json("scores", "--summary", "--by", "service.version", "--store", everything)
    assert [row["segment"] for row in merged] == ["1.0", "1.1"]
    assert same(merged, single)  # exact sums: the same rows
    assert merged[0]["scored"] == 500
    # averaging the groups' rates instead would not be this: the weights differ by group
    alone = [as_json("scores", "--summary", "--by", "service.version", "--store", u) for u in urls]
    mean_of_rates = sum(rows[0]["pass_rate"]["value"] for rows in alone) / len(alone)
    assert abs(mean_of_rates - merged[0]["pass_rate"]["value"]) > 1e-3


def test_compare_across_stores_is_compare_on_one_store(groups: tuple[list[str], str]) -> None:
    urls, everything = groups
    many = [a for url in urls for a in ("--store", url)]
    merged = as_json("compare", "--by", "service.version", "1.0", "1.1", *many)
    single = as_json("compare", "--by", "service.version", "1.0", "1.1", "--store", everything)
    assert same(merged, single)
    assert merged[0]["pass_rate"]["decision"] == "worse"


def test_calibration_across_stores_counts_every_groups_labels(
    groups: tuple[list[str], str],
) -> None:
    urls, everything = groups
    many = [a for url in urls for a in ("--store", url)]
    merged = as_json("calibration", *many)
    assert same(merged, as_json("calibration", "--store", everything))
    assert merged and merged[0]["labels"] == sum(
        row["labels"] for url in urls for row in as_json("calibration", "--store", url)
    )


def test_a_store_given_twice_or_a_schema_on_sqlite_is_a_usage_error(
    groups: tuple[list[str], str],
) -> None:
    urls, _everything = groups
    done = run("scores", "--summary", "--store", urls[0], "--store", urls[0])
    assert done.exit_code == 2 and "given twice" in done.output
    done = run("compare", "--by", "service.version", "1.0", "1.1", "--store", urls[0] + "?schema=x")
    assert done.exit_code == 2 and "schema" in done.output
    done = run("scores", "--store", urls[0], "--store", urls[1])
    assert done.exit_code == 2 and "--summary" in done.output


# ------------------------------------------------------------------ the numbers' settings
def test_the_windows_alpha_and_cap_are_settings_the_cli_uses(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    store = open_store(url)
    write(store, records("1.0", 0.9, 50, 1, 1.0) + records("1.1", 0.9, 30, 2, 1.0))
    write(store, records("0.9", 0.9, 30, 3, 1.0), at=NOW - 3 * 3600)  # outside a 1 h window
    store.close()
    config = tmp_path / "worker.toml"
    config.write_text(
        f'store_url = "{url}"\ninterval_window_seconds = 3600\nsegment_cap = 1\n'
        "regression_window_seconds = 7200\nregression_alpha = 0.01\n",
        "utf-8",
    )
    rows = as_json("scores", "--summary", "--by", "service.version", "--config", str(config))
    assert [(r["segment"], r["scored"], r["folded"]) for r in rows] == [
        ("1.0", 50, 0),
        ("other", 30, 1),
    ]
    wide = as_json("scores", "--summary", "--by", "service.version", "--since", "1d", "--cap",
                   "5", "--config", str(config))  # fmt: skip
    assert {r["segment"] for r in wide} == {"0.9", "1.0", "1.1"}
    [row] = as_json("compare", "--by", "service.version", "0.9", "1.0", "--config", str(config))
    assert row["pass_rate"]["alpha"] == 0.01
    assert row["pass_rate"]["baseline"]["value"] is None  # 0.9 is outside the 2 h window
    numbers = NumbersConfig.from_settings(load_settings(str(config)))
    assert (numbers.interval_window_seconds, numbers.regression_window_seconds) == (3600, 7200)
    assert (numbers.segment_cap, numbers.regression_alpha) == (1, 0.01)


@pytest.mark.parametrize(
    ("key", "value"),
    [("regression_alpha", 0.5), ("regression_alpha", 0), ("segment_cap", 0),
     ("interval_window_seconds", 1), ("regression_window_seconds", 1e9)],
)  # fmt: skip
def test_a_bad_numbers_setting_is_an_error_naming_it(key: str, value: float) -> None:
    with pytest.raises(ConfigError, match=key):
        load_settings(None, **{key: value})
