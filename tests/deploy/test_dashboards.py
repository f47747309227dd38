"""The Grafana dashboard is the output of deploy/grafana/generate.py, built with the
grafana-foundation-sdk builders, and is well-formed Grafana JSON: unique ids, a sane grid, data
sources that the provisioning defines, every variable it uses declared, every query present,
every series name taken from metric_names.py."""

from __future__ import annotations

import ast
import importlib.util
import json
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from tests.deploy.promql import DASHBOARDS, DEPLOY

GRAFANA = DEPLOY / "grafana"
BUILTIN_VARS = {"__rate_interval", "__interval", "__range", "__from", "__to", "__field", "__all"}


def generator() -> ModuleType:
    # generate.py imports its sibling dashboard_queries.py, as it does when run as a script
    if str(GRAFANA) not in sys.path:
        sys.path.insert(0, str(GRAFANA))
    spec = importlib.util.spec_from_file_location(
        "deploy_grafana_generate", GRAFANA / "generate.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def provisioned_uids() -> dict[str, str]:
    path = GRAFANA / "provisioning" / "datasources" / "datasources.yaml"
    doc = yaml.safe_load(path.read_text())
    return {d["uid"]: d["type"] for d in doc["datasources"]}


def all_panels(board: dict[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for panel in board["panels"]:
        out.append(panel)
        out.extend(panel.get("panels", []))
    return out


@pytest.fixture(scope="module")
def board() -> dict[str, Any]:
    [path] = DASHBOARDS
    return dict(json.loads(path.read_text(encoding="utf-8")))


def test_checked_in_json_is_what_the_generator_produces() -> None:
    module = generator()
    assert module.OUTPUT.read_text(encoding="utf-8") == module.render()
    assert module.main(["--check"]) == 0


def test_generator_check_detects_a_stale_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = generator()
    stale = tmp_path / "spanjudge.json"
    stale.write_text("{}\n")
    monkeypatch.setattr(module, "OUTPUT", stale)
    assert module.main(["--check"]) == 1


def test_dashboard_provider_points_at_the_mounted_dashboards() -> None:
    provider = yaml.safe_load(
        (GRAFANA / "provisioning" / "dashboards" / "dashboards.yaml").read_text()
    )["providers"][0]
    compose = yaml.safe_load((DEPLOY / "compose" / "compose.yaml").read_text())
    mounts = compose["services"]["grafana"]["volumes"]
    assert f"../grafana/dashboards:{provider['options']['path']}:ro" in mounts


def test_top_level_fields(board: dict[str, Any]) -> None:
    assert board["uid"] and len(board["uid"]) <= 40
    assert isinstance(board["schemaVersion"], int) and board["schemaVersion"] >= 36
    assert board["title"] == "spanjudge"
    assert board["time"]["from"].startswith("now-")


def test_panels_have_unique_ids_and_fit_the_grid(board: dict[str, Any]) -> None:
    panels = all_panels(board)
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids))
    cells: set[tuple[int, int]] = set()
    for p in panels:
        pos = p["gridPos"]
        assert pos["x"] >= 0 and pos["w"] > 0 and pos["x"] + pos["w"] <= 24, p["title"]
        mine = {
            (x, y)
            for x in range(pos["x"], pos["x"] + pos["w"])
            for y in range(pos["y"], pos["y"] + pos["h"])
        }
        assert not mine & cells, f"{p['title']} overlaps another panel"
        cells |= mine


def test_queries_use_provisioned_datasources(board: dict[str, Any]) -> None:
    uids = provisioned_uids()
    for p in all_panels(board):
        if p["type"] in ("row", "text"):
            continue
        assert p["datasource"]["uid"] in uids, p["title"]
        assert p["targets"], f"{p['title']} has no query"
        for t in p["targets"]:
            ds = t["datasource"]
            assert uids[ds["uid"]] == ds["type"], p["title"]
            key = "expr" if ds["type"] in ("prometheus", "loki") else "query"
            assert t[key].strip(), p["title"]
            assert t["refId"]


def test_required_views_are_present(board: dict[str, Any]) -> None:
    titles = " | ".join(p["title"].lower() for p in all_panels(board))
    for words in (
        "mean score",
        "distribution",
        "pass rate",
        "evaluations per minute",
        "errors per minute",
        "tokens",
        "cost",
        "backlog",
        "lag",
        "low scores",
        "latest failing evaluations",
        "95% interval",
        "regression check",
    ):
        assert words in titles, words
    kinds = {p["type"] for p in all_panels(board)}
    assert {"timeseries", "heatmap", "stat", "table", "row", "logs"} <= kinds


def test_every_variable_used_is_declared(board: dict[str, Any]) -> None:
    declared = {v["name"] for v in board["templating"]["list"]} | BUILTIN_VARS
    text = json.dumps(board)
    used = set(re.findall(r"\$\{?([A-Za-z_]\w*)", text))
    assert used - declared == set()


def test_low_scores_link_to_traces(board: dict[str, Any]) -> None:
    tempo_queries = [
        t["query"]
        for p in all_panels(board)
        for t in p.get("targets", [])
        if t["datasource"]["type"] == "tempo"
    ]
    assert any("gen_ai.evaluation.score.value < $low_score" in q for q in tempo_queries)
    links = [
        link["url"]
        for p in all_panels(board)
        if "fieldConfig" in p
        for link in p["fieldConfig"]["defaults"].get("links", [])
    ]
    assert any(u.startswith("/explore?") and "traceql" in u for u in links)
    assert any("${jaeger_url}/search?" in u for u in links)


def test_variable_queries_read_existing_labels(board: dict[str, Any]) -> None:
    queries = [v["query"]["query"] for v in board["templating"]["list"] if v["type"] == "query"]
    assert queries
    for query in queries:
        assert re.fullmatch(r"label_values\(spanjudge_\w+, \w+\)", query)


def test_the_generator_builds_with_the_foundation_sdk() -> None:
    from grafana_foundation_sdk.models.dashboard import Dashboard, RowPanel

    model = generator().build()
    assert isinstance(model, Dashboard)
    panels = model.panels or []
    assert sum(isinstance(p, RowPanel) for p in panels) == 9
    assert all(type(p).__module__.startswith("grafana_foundation_sdk.") for p in panels)


def code_strings(path: Path) -> list[str]:
    """The string literals of a module's code, docstrings left out."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.FunctionDef | ast.ClassDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
    }
    return [
        n.value
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docstrings
    ]


@pytest.mark.parametrize("name", ["generate.py", "dashboard_queries.py"])
def test_no_series_or_attribute_name_is_spelled_in_the_generator(name: str) -> None:
    # series come from metric_names.py and attributes from tracer/attributes.py; a literal
    # here would survive a rename there and leave a panel empty
    strings = code_strings(GRAFANA / name)
    assert strings  # the scan sees the module's literals
    for text in strings:
        assert not re.search(r"spanjudge_[a-z]|gen_ai\.|spanjudge\.[a-z_]+\.", text), text


def test_spelling_check_sees_a_literal_series_name(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text('"""doc spanjudge_x"""\nQ = "rate(spanjudge_backlog[5m])"\n')
    assert code_strings(module) == ["rate(spanjudge_backlog[5m])"]


def dropped_fields(ours: Any, decoded: Any, path: str = "") -> set[str]:
    """Keys of ``ours`` that are missing after decoding with Grafana's typed models."""
    out: set[str] = set()
    if isinstance(ours, dict) and isinstance(decoded, dict):
        for key, value in ours.items():
            where = f"{path}.{key}" if path else key
            if key not in decoded:
                out.add(where)
            else:
                out |= dropped_fields(value, decoded[key], where)
    elif isinstance(ours, list) and isinstance(decoded, list):
        if len(ours) != len(decoded):
            out.add(f"{path}[] (items)")
        for a, b in zip(ours, decoded, strict=False):
            out |= dropped_fields(a, b, f"{path}[]")
    return out


def decode_with_grafana_models(board: dict[str, Any]) -> dict[str, Any]:
    # grafana-foundation-sdk: Grafana's own dashboard, panel and query types, generated from
    # Grafana's schemas; a key they do not know is dropped on decoding
    from grafana_foundation_sdk.cog.encoder import JSONEncoder
    from grafana_foundation_sdk.cog.plugins import register_default_plugins
    from grafana_foundation_sdk.models.dashboard import Dashboard

    register_default_plugins()
    decoded = Dashboard.from_json(board)
    return dict(json.loads(json.dumps(decoded, cls=JSONEncoder)))


def test_every_field_is_known_to_grafanas_dashboard_types(board: dict[str, Any]) -> None:
    decoded = decode_with_grafana_models(board)
    assert dropped_fields(board, decoded) == set()
    assert len(decoded["panels"]) == len(board["panels"])


def test_grafana_types_catch_a_misspelled_field(board: dict[str, Any]) -> None:
    broken = json.loads(json.dumps(board))
    broken["panels"][1]["targets"][0]["legendFromat"] = "{{metric}}"
    broken["panels"][1]["gridpos"] = broken["panels"][1].pop("gridPos")
    dropped = dropped_fields(broken, decode_with_grafana_models(broken))
    assert {"panels[].targets[].legendFromat", "panels[].gridpos"} <= dropped
