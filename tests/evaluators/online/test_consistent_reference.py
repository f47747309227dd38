"""Our consistent sampling decides as OpenTelemetry's JavaScript SDK does, on 1,000,000 ids.

scripts/consistent_reference.py installs the pinned npm package
``@opentelemetry/sampler-composite`` into a temporary directory and runs its
``ComposableProbabilitySampler`` (through ``createCompositeSampler``) over the ids below; this
test compares the thresholds and every decision with
:mod:`~spanjudge.evaluators._plan.consistent`.

The SDK computes the threshold at full precision (all 14 hex digits); the Collector's
``probabilistic_sampler`` rounds it to 4 significant digits by default, and so does
:func:`keeps`. So: at full precision every decision must be equal; at the default precision the
decisions may differ only for ids whose randomness falls between the two thresholds (a sliver
of about 1e-5 of the ids at 10%), and every difference must be one of those.

Needs ``node`` and ``npm`` on the PATH and the npm registry reachable (scripts/test provisions
them where missing).
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from spanjudge.evaluators._plan.consistent import (
    keeps,
    randomness_of,
    threshold_for,
)

SCRIPT = Path(__file__).parents[3] / "scripts" / "consistent_reference.py"
COUNT = 1_000_000
RATES = ["0.01", "0.02", "0.1", "0.3333333333333333"]
# rows with a tracestate: explicit randomness (rv) wins over the trace id, upper case is read,
# a malformed rv falls back to the trace id
TRACESTATE_ROWS = [
    "ffffffffffffffffffffffffffffffff ot=rv:00000000000000",
    "00000000000000000000000000000001 ot=rv:ffffffffffffff",
    "00000000000000000000000000000001 ot=rv:FD70A3D70A3D71",
    "00000000000000000000000000000001 ot=th:8;rv:e6666666666666",
    "ffffffffffffffffffffffffffffffff ot=rv:123",
    "00000000000000000000000000000001 vendor=x,ot=rv:fae147ae147ae2",
]


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[str], dict[str, object]]:
    rng = random.Random(20261128)
    rows = [f"{rng.getrandbits(128):032x}" for _ in range(COUNT)] + TRACESTATE_ROWS
    folder = tmp_path_factory.mktemp("consistent-ref")
    ids = folder / "ids.txt"
    ids.write_text("\n".join(rows) + "\n")
    done = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--ids",
            str(ids),
            "--rates",
            ",".join(RATES),
            "--prefix",
            str(folder / "npm"),
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=900,
    )
    answer: dict[str, object] = json.loads(done.stdout)
    return rows, answer


def _split(row: str) -> tuple[str, str | None]:
    trace_id, _, tracestate = row.partition(" ")
    return trace_id, tracestate or None


def _keeps(row: str, probability: float) -> bool:
    trace_id, tracestate = _split(row)
    return keeps(trace_id, probability, tracestate)


@pytest.fixture(scope="module")
def randomness(reference: tuple[list[str], dict[str, object]]) -> list[int]:
    return [randomness_of(*_split(row)) for row in reference[0]]


def test_thresholds_equal_the_sdk_at_full_precision(
    reference: tuple[list[str], dict[str, object]],
) -> None:
    _, answer = reference
    rates = answer["rates"]
    assert isinstance(rates, dict) and sorted(rates) == sorted(RATES)
    for rate in RATES:
        assert rates[rate]["threshold"] == f"{threshold_for(float(rate), precision=0):014x}"


def test_every_decision_equals_the_sdk(
    reference: tuple[list[str], dict[str, object]], randomness: list[int]
) -> None:
    rows, answer = reference
    rates = answer["rates"]
    assert isinstance(rates, dict)
    for rate in RATES:
        kept = rates[rate]["kept"]
        assert len(kept) == len(rows)
        exact = threshold_for(float(rate), precision=0)
        ours = "".join("1" if r >= exact else "0" for r in randomness)
        assert ours == kept, rate
        # about rate * COUNT kept: the ids are random and the decision is not degenerate
        assert abs(kept[:COUNT].count("1") / COUNT - float(rate)) < 0.003


def test_default_precision_differs_only_between_the_two_thresholds(
    reference: tuple[list[str], dict[str, object]], randomness: list[int]
) -> None:
    rows, answer = reference
    rates = answer["rates"]
    assert isinstance(rates, dict)
    differ = 0
    for rate in RATES:
        p = float(rate)
        default = threshold_for(p)
        low, high = sorted((default, threshold_for(p, precision=0)))
        kept = rates[rate]["kept"]
        for i, (r, sdk) in enumerate(zip(randomness, kept, strict=True)):
            if (r >= default) != (sdk == "1"):
                differ += 1
                assert low <= r < high, (rate, rows[i])
                assert _keeps(rows[i], p) != (sdk == "1")
        # keeps() is that default-precision decision (checked on a slice: it is slower)
        for row, r in zip(rows[:20_000], randomness, strict=False):
            assert _keeps(row, p) == (r >= default)
    assert differ < 100  # a sliver, not a different sampler


def test_tracestate_rows_decide_by_rv(reference: tuple[list[str], dict[str, object]]) -> None:
    _, answer = reference
    rates = answer["rates"]
    assert isinstance(rates, dict)
    tail = {rate: rates[rate]["kept"][COUNT:] for rate in RATES}
    # rv 0 is never kept below 100%, rv ffffffffffffff always; the malformed rv ("123")
    # leaves the all-f trace id deciding: kept
    assert all(t[0] == "0" and t[1] == "1" and t[4] == "1" for t in tail.values())
    assert tail["0.01"][2] == "1"  # rv FD70A3D70A3D71 is exactly the 1% threshold
    assert tail["0.1"][3] == "1" and tail["0.02"][5] == "1"
