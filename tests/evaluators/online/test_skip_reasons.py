"""Every skip reason the planner can count is one the telemetry pre-creates at zero.

``SKIP_REASONS`` primes the ``spanjudge.sampler.skipped`` series, so a dashboard reads 0, not
"no data", before the first skip. A reason missing from it is a series that appears from
nowhere. Two checks: every refusal a budget can give (driven, not read), and every reason
written into the code where a skip is counted (read from the source, so a new call site with
a new reason fails here).
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

from spanjudge._core.telemetry import SKIP_REASONS
from spanjudge.evaluators._plan.sampler import Budget

ROOT = Path(__file__).resolve().parents[3]
PACKAGES = ("spanjudge", "evaluators", "exporters")
# (call name, index of its reason argument)
SKIP_CALLS = {"skip": 1, "record_skip": 1, "count_skip": 0}
# Local names a reason passes through: a budget's refusal (checked by driving every budget
# below) and the parameter of the counting helpers themselves.
PASSED_THROUGH = {"refused", "reason"}


@pytest.mark.parametrize(
    "budget",
    [
        Budget(max_per_minute=1),
        Budget(max_per_day=1),
        Budget(max_cost_per_day=0.01),
    ],
    ids=["per_minute", "per_day", "cost_per_day"],
)
def test_every_budget_refusal_is_a_known_skip_reason(budget: Budget) -> None:
    now = 1_700_000_000.0
    assert budget.allow(now) is None
    budget.record(1.0, now)
    refused = budget.allow(now + 1)
    assert refused is not None
    assert refused in SKIP_REASONS


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    if parts[0] != "spanjudge":  # the top-level stage folders import under spanjudge
        parts = ("spanjudge", *parts)
    return ".".join(p for p in parts if p != "__init__")


def _reasons_in_source() -> dict[str, str]:
    """Every reason argument of a skip-counting call, resolved: {reason: where}."""
    found: dict[str, str] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
                    continue
                index = SKIP_CALLS.get(node.func.attr)
                if index is None or len(node.args) <= index:
                    continue
                arg = node.args[index]
                where = f"{path.relative_to(ROOT)}:{node.lineno}"
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    found[arg.value] = where
                elif isinstance(arg, ast.Name) and arg.id in PASSED_THROUGH:
                    continue
                elif isinstance(arg, (ast.Name, ast.Attribute)):
                    module = importlib.import_module(_module_name(path))
                    value = eval(ast.unparse(arg), vars(module))  # a constant it imports
                    assert isinstance(value, str), where
                    found[value] = where
                else:
                    pytest.fail(f"{where}: a skip reason the check cannot read")
    return found


def test_every_skip_reason_in_the_code_is_pre_created() -> None:
    found = _reasons_in_source()
    # the check reads the planner's calls (it would pass vacuously on an empty scan)
    assert {"not_sampled", "filtered"} <= set(found)
    missing = {reason: where for reason, where in found.items() if reason not in SKIP_REASONS}
    assert not missing
