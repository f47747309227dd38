"""Regression tests for what the security suite found (issue 8): each failed before its fix."""

# ruff: noqa: F811  (pytest fixtures imported by name)

from __future__ import annotations

import pytest

from spanjudge._core.urls import redact_url as _safe_url
from spanjudge._demo.judge import start_offline_judge
from spanjudge.evaluators._judge.metrics.bias import BiasMetric
from spanjudge.evaluators._loop.config import MonitorConfig
from spanjudge.evaluators._loop.monitor import Monitor
from spanjudge.evaluators._plan.rules import Rule
from tests.evaluators.online.spans import Trace
from tests.exporters.store.conftest import StoreFactory, backend, store_factory  # noqa: F401


@pytest.mark.parametrize(
    "conversation_id", ["chat\x00-1", "chat\ud800-1"], ids=["nul", "surrogate"]
)
def test_one_hostile_conversation_id_does_not_stall_every_trace(
    store_factory: StoreFactory,
    conversation_id: str,
) -> None:
    judge = start_offline_judge()
    try:
        db = store_factory()
        bad, good = Trace(), Trace()
        bad.agent(conversation_id=conversation_id)
        good.agent(user="Is it raining?", answer="Yes")
        db.write_spans(bad.spans, now=100.0)
        db.write_spans(good.spans, now=101.0)
        monitor = Monitor(
            [Rule(BiasMetric(model=judge.judge()), target="agent")],
            store=db,
            clock=lambda: 200.0,
            config=MonitorConfig(retention_seconds=None),
        )
        monitor.tick()  # raises today, every tick
        assert {r.trace_id for r in monitor.results()} >= {good.trace_id}
    finally:
        judge.stop()


@pytest.mark.parametrize("name", ["r\x00", "r\ud800"])
def test_a_rule_name_a_database_cannot_keep_is_refused_up_front(name: str) -> None:
    """Stored as cleaned text, the name would no longer match its rule and the jobs would be
    handed back forever; refuse it when the rule is built, with a clear message."""
    with pytest.raises(ValueError, match=r"Rule\.name: must be valid text without NUL"):
        Rule(BiasMetric(model="openai/x"), target="agent", name=name)


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://u@db:5432/x?password=QSECRET",
        "postgresql://u@db/x?sslmode=require&password=QSECRET",
    ],
)
def test_safe_url_hides_a_password_given_as_a_query_parameter(url: str) -> None:
    assert "QSECRET" not in _safe_url(url)
