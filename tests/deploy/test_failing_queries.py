"""docs/seeing-scores.md gives, for Jaeger, Tempo, Phoenix and Loki, the one query that lists
failing evaluations (issue 30 item 12), each naming what spanjudge really writes.

The Jaeger and TraceQL blocks are checked with every other block of the page in
test_docs_queries.py, the LogQL here with the Loki checker of test_loki.py; the Phoenix query
runs in a real Phoenix in tests/worker/test_phoenix.py."""

from __future__ import annotations

import re

from tests.deploy.promql import ROOT
from tests.deploy.test_loki import event_names, logql_problems

DOC = ROOT / "docs" / "seeing-scores.md"
SECTION = "## Failing evaluations, one query per backend"


def section() -> str:
    text = DOC.read_text(encoding="utf-8")
    start = text.index(SECTION)
    end = text.find("\n## ", start + len(SECTION))
    return text[start : end if end >= 0 else len(text)]


def test_each_backend_has_one_query_for_failing_evaluations() -> None:
    blocks = re.findall(r"```(\w+)\n(.*?)```", section(), re.S)
    assert sorted(language for language, _ in blocks) == ["jaeger", "logql", "phoenix", "traceql"]
    for _, query in blocks:
        assert "fail" in query  # the verdict's label, the one thing every form carries


def test_the_logql_on_the_page_names_what_loki_keeps_of_the_event() -> None:
    queries = re.findall(r"```logql\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
    assert queries
    for query in queries:
        assert logql_problems(query, event_names()) == []
