"""Settings declared once: the loop's fields shared by MonitorConfig and the worker, the closed
vocabularies (target types, metric names, statuses, labels) read back from their Literal types,
and docs/reference/settings.md generated from the model."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, get_args, get_type_hints

import pytest

from spanjudge._core import kinds
from spanjudge._core.span_record import EvaluationRecord, FeedbackRecord
from spanjudge.errors import ConfigError
from spanjudge.evaluators._loop.config import LoopSettings, MonitorConfig
from spanjudge.rule_settings import RuleConfig
from spanjudge.settings import OTHER_ENVIRONMENT, WorkerSettings, load_settings

ROOT = Path(__file__).resolve().parent.parent
PACKAGE_DIRS = ("spanjudge", "tracer", "exporters", "evaluators")


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "settings_table", ROOT / "scripts" / "settings_table.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("settings_table", module)
    spec.loader.exec_module(module)
    return module


# ------------------------------------------------------------------------------ one model
def test_the_worker_and_monitor_config_share_every_loop_field_and_default() -> None:
    loop = LoopSettings.model_fields
    assert issubclass(MonitorConfig, LoopSettings)
    assert issubclass(WorkerSettings, LoopSettings)
    assert set(MonitorConfig.model_fields) == set(loop)
    worker = WorkerSettings()
    monitor = MonitorConfig()
    for name in loop:
        assert getattr(worker, name) == getattr(monitor, name), name


def test_interval_has_one_default_the_documented_five_seconds() -> None:
    assert MonitorConfig().interval_seconds == 5.0
    assert WorkerSettings().interval_seconds == 5.0


def test_monitor_config_from_worker_settings_takes_every_loop_value(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SPANJUDGE_INTERVAL_SECONDS", "7")
    monkeypatch.setenv("SPANJUDGE_JUDGE_CACHE", "false")
    monkeypatch.setenv("SPANJUDGE_BATCH_SIZE", "3")
    settings = load_settings(None, retention_seconds=None, max_attempts=1)
    config = settings.monitor_config()
    assert type(config) is MonitorConfig
    assert (config.interval_seconds, config.judge_cache, config.batch_size) == (7.0, False, 3)
    assert (config.retention_seconds, config.max_attempts) == (None, 1)
    assert config == MonitorConfig(
        interval_seconds=7,
        judge_cache=False,
        batch_size=3,
        retention_seconds=None,
        max_attempts=1,
    )


def test_the_worker_runs_its_loop_with_its_settings(tmp_path: Path) -> None:
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from spanjudge.worker.service import Worker
    from tests.worker.rules_module import NO_JUDGE

    settings = load_settings(
        None,
        store_url=f"sqlite:///{tmp_path}/w.db",
        rules=[{"metric": "bias", "target": "agent"}],
        interval_seconds=9,
        settle_seconds=1,
        concurrency=3,
        judge_cache=False,
    )
    worker = Worker(settings, judge=NO_JUDGE, span_exporter=InMemorySpanExporter())
    try:
        assert worker.monitor.config == settings.monitor_config()
        assert worker.monitor.config.concurrency == 3
    finally:
        worker.shutdown(1)


def test_monitor_config_is_frozen_and_takes_keywords() -> None:
    config = MonitorConfig(interval_seconds=10, settle_seconds=5, concurrency=4)
    assert (config.interval_seconds, config.settle_seconds, config.concurrency) == (10, 5, 4)
    with pytest.raises(ValueError):
        config.concurrency = 2  # type: ignore[misc]


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"interval_seconds": 0}, "MonitorConfig.interval_seconds: Input should be greater than 0"),
        ({"concurrency": 0}, "MonitorConfig.concurrency: Input should be greater than or equal"),
        ({"concurrency": True}, "MonitorConfig.concurrency: expected a number"),
        ({"concurrency": 2.5}, "MonitorConfig.concurrency: Input should be a valid integer"),
        ({"settle_seconds": -1}, "MonitorConfig.settle_seconds"),
        ({"settle_seconds": float("nan")}, "MonitorConfig.settle_seconds: Input should be"),
        ({"lease_seconds": float("inf")}, "MonitorConfig.lease_seconds"),
        ({"retention_seconds": 0}, "MonitorConfig.retention_seconds"),
        ({"judge_cache": 1}, "MonitorConfig.judge_cache: expected true or false"),
        ({"judge_cache_max_age_seconds": 0}, "MonitorConfig.judge_cache_max_age_seconds"),
        ({"intervall_seconds": 5}, "MonitorConfig.intervall_seconds: unknown key"),
    ],
)
def test_bad_monitor_config_is_one_line_naming_the_key(
    kwargs: dict[str, Any], fragment: str
) -> None:
    with pytest.raises(ConfigError) as info:
        MonitorConfig(**kwargs)
    message = str(info.value)
    assert fragment in message
    assert "\n" not in message
    assert isinstance(info.value, ValueError)  # code that caught ValueError still does


def test_retention_may_be_none_and_numbers_may_be_given_as_ints() -> None:
    config = MonitorConfig(retention_seconds=None, interval_seconds=1)
    assert config.retention_seconds is None
    assert config.interval_seconds == 1.0


# ------------------------------------------------------------------------------ vocabularies
def test_each_vocabulary_tuple_is_its_literal_type() -> None:
    pairs = [
        (kinds.TargetType, kinds.TARGET_TYPES),
        (kinds.MetricName, kinds.METRIC_NAMES),
        (kinds.Status, kinds.STATUSES),
        (kinds.Label, kinds.LABELS),
        (kinds.Outcome, kinds.OUTCOMES),
        (kinds.Output, kinds.OUTPUTS),
        (kinds.FeedbackSource, kinds.FEEDBACK_SOURCES),
    ]
    for literal, values in pairs:
        assert values == get_args(literal)
    assert "geval" in kinds.METRIC_NAMES
    assert "geval" not in kinds.NAMED_METRICS
    assert set(kinds.OUTCOMES) == set(kinds.LABELS) | {"error", "skipped"}


def test_records_rules_and_settings_are_annotated_with_the_vocabularies() -> None:
    from spanjudge.evaluators._plan.rules import Rule
    from spanjudge.evaluators._rebuild.targets import Target

    record = get_type_hints(EvaluationRecord)
    assert record["target_type"] == kinds.TargetType
    assert record["status"] == kinds.Status
    assert record["label"] == kinds.Label | None
    feedback = get_type_hints(FeedbackRecord)
    assert (feedback["label"], feedback["source"]) == (kinds.Label, kinds.FeedbackSource)
    assert get_type_hints(Rule)["target"] == kinds.TargetType
    assert get_type_hints(Target)["target_type"] == kinds.TargetType
    assert RuleConfig.model_fields["target"].annotation == kinds.TargetType
    assert RuleConfig.model_fields["metric"].annotation == kinds.MetricName


def test_rule_refuses_an_unknown_target_naming_every_valid_one() -> None:
    from spanjudge.evaluators._judge.metrics.bias import BiasMetric
    from spanjudge.evaluators._plan.rules import Rule

    with pytest.raises(ValueError) as info:
        Rule(BiasMetric(model="openai/never-called"), target="llmm")  # type: ignore[arg-type]
    assert "llmm" in str(info.value)
    for target in kinds.TARGET_TYPES:
        assert target in str(info.value)


def test_every_rule_metric_name_builds_a_metric_class() -> None:
    from spanjudge.worker.rule_config import metric_class

    for metric in kinds.METRIC_NAMES:
        for target in kinds.TARGET_TYPES:
            assert isinstance(metric_class(RuleConfig(metric=metric, target=target)), type)


def test_worker_rules_refuse_an_unknown_metric_listing_the_known_ones() -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(None, rules=[{"metric": "toxicity"}])
    for metric in kinds.METRIC_NAMES:
        assert repr(metric) in str(info.value)


# ------------------------------------------------------------------------------ the page
def test_settings_page_is_what_the_model_declares() -> None:
    page = (ROOT / "docs" / "reference" / "settings.md").read_text()
    assert page == _script().render(), "run: python scripts/settings_table.py"


def test_the_page_check_fails_when_the_page_is_stale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = _script()
    stale = tmp_path / "settings.md"
    stale.write_text(script.render().replace("SPANJUDGE_CONCURRENCY", "SPANJUDGE_CONCURENCY"))
    monkeypatch.setattr(script, "PAGE", stale)
    assert script.main(["--check"]) == 1
    assert script.main([]) == 0  # rewrites it
    assert script.main(["--check"]) == 0


def test_every_setting_has_a_description_and_a_row() -> None:
    page = _script().render()
    for model in (WorkerSettings, RuleConfig):
        for name, field in model.model_fields.items():
            assert field.description, f"{model.__name__}.{name} has no description"
            assert f"| `{name}` |" in page, name
    for name in WorkerSettings.model_fields:
        assert f"`SPANJUDGE_{name.upper()}`" in page


def test_every_environment_variable_the_package_reads_is_in_the_table() -> None:
    literal = re.compile(r"[\"']((?:SPANJUDGE|OTEL|LITELLM|OPENAI|XDG)_[A-Z0-9_]+)[\"']")
    read = set()
    for folder in PACKAGE_DIRS:
        for path in (ROOT / folder).rglob("*.py"):
            read |= set(literal.findall(path.read_text()))
    assert "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT" in read  # the scan finds them
    settings_vars = {f"SPANJUDGE_{name.upper()}" for name in WorkerSettings.model_fields}
    others = {variable for variable, _, _ in OTHER_ENVIRONMENT}
    assert read - settings_vars - others == set()
