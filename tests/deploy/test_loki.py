"""Loki and its Grafana wiring are coherent: Loki keeps OTLP attributes (structured metadata)
and listens where the Collector and Grafana point, trace-to-logs filters on the ids Loki keeps,
and every name in the shipped LogQL is the Loki form of a name the evaluation event carries.

No Loki binary, logcli or LogQL parser is installable here (Debian's ``loki`` package is an
unrelated genetics tool; Grafana's is not packaged), so these are structural checks, like the
Collector's. How Loki names OTLP data is taken from its ingestion code: attribute names get
every character other than ``[A-Za-z0-9_]`` replaced by ``_``; the record's ids become
``trace_id``/``span_id``; resource ``service.name`` becomes the stream label ``service_name``.
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any

import pytest
import yaml

from spanjudge.tracer import _attributes as attrs
from tests.deploy.promql import DASHBOARDS, DEPLOY

GRAFANA = DEPLOY / "grafana"
LOKI_CONFIG = DEPLOY / "compose" / "loki.yaml"
README = DEPLOY / "README.md"
# what Loki itself derives from an OTLP log record (besides the attributes)
LOKI_FIELDS = {"trace_id", "span_id", "severity_text", "severity_number", "scope_name"}
STREAM_LABELS = {"service_name"}  # the default index label our worker's resource gives


def stored(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", name)


def event_names() -> set[str]:
    """Loki names of the attributes a gen_ai.evaluation.result event carries."""
    keys = {
        attrs.GEN_AI_EVALUATION_NAME,
        attrs.GEN_AI_EVALUATION_SCORE_VALUE,
        attrs.GEN_AI_EVALUATION_SCORE_LABEL,
        attrs.GEN_AI_EVALUATION_EXPLANATION,
        attrs.GEN_AI_RESPONSE_ID,
        attrs.ERROR_TYPE,
    }
    keys |= {v for k, v in vars(attrs).items() if k.startswith("SPANJUDGE_EVAL_")}
    return {stored(k) for k in keys} | LOKI_FIELDS


def datasources() -> dict[str, dict[str, Any]]:
    path = GRAFANA / "provisioning" / "datasources" / "datasources.yaml"
    return {d["uid"]: d for d in yaml.safe_load(path.read_text())["datasources"]}


def compose() -> dict[str, Any]:
    return dict(yaml.safe_load((DEPLOY / "compose" / "compose.yaml").read_text()))


def trace_to_logs_query() -> str:
    # `$$` is how a provisioning file writes a literal `$`
    return str(datasources()["tempo"]["jsonData"]["tracesToLogsV2"]["query"]).replace("$$", "$")


def readme_logql() -> list[str]:
    return re.findall(r"```logql\n(.*?)```", README.read_text(encoding="utf-8"), re.S)


def dashboard_logql() -> list[str]:
    out = []
    for path in DASHBOARDS:
        for panel in json.loads(path.read_text(encoding="utf-8"))["panels"]:
            out += [t["expr"] for t in panel.get("targets", []) if t["datasource"]["uid"] == "loki"]
    return out


def all_logql() -> list[str]:
    return readme_logql() + dashboard_logql() + [trace_to_logs_query()]


_STREAM = re.compile(r"^\{([^}]*)\}")
# names as written, dots included, so a dotted (OTLP-style) name is caught rather than skipped
_FILTER = re.compile(r"\|\s*([A-Za-z_][\w.]*)\s*(?:=~|!~|!=|=|>=|<=|>|<)")
_TEMPLATE = re.compile(r"\{\{\s*\.([^\s}]+)\s*\}\}")


def logql_problems(query: str, known: set[str]) -> list[str]:
    """Names ``query`` uses that Loki would not have for an evaluation event."""
    query = query.strip()
    stream = _STREAM.match(query)
    if stream is None:
        return ["no stream selector"]
    problems = []
    for label in re.findall(r"([A-Za-z_]\w*)\s*(?:=~|!~|!=|=)", stream.group(1)):
        if label not in STREAM_LABELS:
            problems.append(f"stream label {label}")
    pipeline = query[stream.end() :]
    for name in _FILTER.findall(pipeline) + _TEMPLATE.findall(pipeline):
        if name not in known:
            problems.append(f"unknown name {name}")
    if "| json" in pipeline or "| logfmt" in pipeline:
        problems.append("parser stage: the events' fields are structured metadata, not the line")
    return problems


def test_shipped_logql_is_found() -> None:
    assert len(readme_logql()) >= 2
    assert len(dashboard_logql()) == 1
    assert "trace_id=" in trace_to_logs_query()


@pytest.mark.parametrize("query", all_logql(), ids=lambda q: re.sub(r"\W+", "_", q)[:60])
def test_logql_uses_only_names_loki_keeps_for_the_event(query: str) -> None:
    assert logql_problems(query, event_names()) == []


def test_checker_flags_a_dotted_name_a_parser_and_a_wrong_stream_label() -> None:
    known = event_names()
    assert logql_problems('{service_name="x"} | gen_ai_evaluation_score_label="fail"', known) == []
    assert logql_problems('{service_name="x"} | gen_ai_evaluation_scores_label="fail"', known)
    assert logql_problems('{job="x"} | gen_ai_evaluation_name="bias"', known)
    assert logql_problems('{service_name="x"} | json | gen_ai_evaluation_name="bias"', known)
    assert logql_problems('{service_name="x"} | line_format `{{.gen_ai.evaluation.name}}`', known)
    assert logql_problems('{service_name="x"} | gen_ai.evaluation.name="bias"', known)


def test_readme_query_for_failing_faithfulness() -> None:
    faithfulness = [q for q in readme_logql() if '"faithfulness"' in q]
    assert faithfulness
    query = faithfulness[0]
    assert f'{stored(attrs.GEN_AI_EVALUATION_NAME)}="faithfulness"' in query
    assert f'{stored(attrs.GEN_AI_EVALUATION_SCORE_LABEL)}="fail"' in query


def test_queries_select_the_workers_service() -> None:
    service = compose()["services"]["worker"]["environment"]["SPANJUDGE_SERVICE_NAME"]
    for query in [*readme_logql(), trace_to_logs_query()]:
        assert query.startswith(f'{{service_name="{service}"}}'), query
    # the dashboard selects it through its eval_service variable, whose default is the same
    board = json.loads(DASHBOARDS[0].read_text(encoding="utf-8"))
    [var] = [v for v in board["templating"]["list"] if v["name"] == "eval_service"]
    assert var["query"] == service
    assert all(q.startswith('{service_name="$eval_service"}') for q in dashboard_logql())


def test_trace_to_logs_jumps_from_a_span_to_its_events() -> None:
    to_logs = datasources()["tempo"]["jsonData"]["tracesToLogsV2"]
    assert to_logs["datasourceUid"] == "loki" and datasources()["loki"]["type"] == "loki"
    # the ids are structured metadata: the built-in line filters (|= "<id>") would miss them
    assert to_logs["customQuery"] is True
    query = trace_to_logs_query()
    assert 'trace_id="${__span.traceId}"' in query
    assert 'span_id="${__span.spanId}"' in query
    # events come after the span: settle time plus judging
    assert to_logs["spanEndTimeShift"].endswith("h")


def test_events_link_back_to_the_trace() -> None:
    [field] = datasources()["loki"]["jsonData"]["derivedFields"]
    assert field["matcherType"] == "label" and field["matcherRegex"] == "trace_id"
    assert field["datasourceUid"] == "tempo"


def test_loki_config_keeps_otlp_attributes() -> None:
    config = yaml.safe_load(LOKI_CONFIG.read_text(encoding="utf-8"))
    assert config["limits_config"]["allow_structured_metadata"] is True
    # structured metadata needs schema v13 on the tsdb index
    [period] = config["schema_config"]["configs"]
    assert (period["schema"], period["store"]) == ("v13", "tsdb")
    assert config["auth_enabled"] is False  # single tenant: the Collector sends no org id
    if config["compactor"].get("retention_enabled"):
        assert config["compactor"]["delete_request_store"]  # Loki 3 refuses to start without


def test_loki_listens_where_the_collector_and_grafana_point() -> None:
    port = yaml.safe_load(LOKI_CONFIG.read_text(encoding="utf-8"))["server"]["http_listen_port"]
    assert datasources()["loki"]["url"] == f"http://loki:{port}"
    loki = compose()["services"]["loki"]
    assert str(port) in loki["expose"]
    assert "./loki.yaml:/etc/loki/loki.yaml:ro" in loki["volumes"]
    assert "-config.file=/etc/loki/loki.yaml" in loki["command"]
    for mode in ("child-span", "enrich"):
        collector = yaml.safe_load((DEPLOY / "collector" / f"{mode}.yaml").read_text())
        assert collector["exporters"]["otlphttp/loki"]["endpoint"] == f"http://loki:{port}/otlp"


if __name__ == "__main__":  # pragma: no cover - print the LogQL for a parser run by hand
    json.dump(all_logql(), sys.stdout, indent=2)
