"""Collector configurations checked structurally: every component a pipeline names is defined
and of a type the contrib distribution ships, nothing defined is left unused, and the two worker
modes route spans the way deploy/README.md describes (no loop back into the worker), and the
worker's evaluation events (OTLP logs) the way to Loki. The pre-sampling example
(sampling.yaml) is what ``spanjudge collector-config`` prints for sampling-rules.toml."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.promql import DEPLOY

COLLECTOR = DEPLOY / "collector"
CONFIGS = sorted(COLLECTOR.glob("*.yaml"))
WORKER_EXPORTER = "otlphttp/spanjudge"
BACKENDS = {"otlp/jaeger", "otlp/tempo"}
LOG_BACKEND = "otlphttp/loki"
WORKER_PORT = 4319  # where the worker sends its scores and events (OTEL_EXPORTER_OTLP_ENDPOINT)
# component types used here, all in otelcol-contrib
KNOWN_TYPES = {
    "receivers": {"otlp"},
    "processors": {"batch", "memory_limiter", "probabilistic_sampler"},
    "exporters": {"otlp", "otlphttp", "debug", "loadbalancing"},
    "extensions": {"health_check"},
}
SIGNALS = {"traces", "metrics", "logs"}


def load(path: Path) -> dict[str, Any]:
    return dict(yaml.safe_load(path.read_text(encoding="utf-8")))


def structural_problems(config: dict[str, Any]) -> list[str]:
    """What a Collector would refuse at start-up (or silently ignore) in ``config``."""
    problems: list[str] = []
    for section, types in KNOWN_TYPES.items():
        for name in config.get(section) or {}:
            if name.split("/", 1)[0] not in types:
                problems.append(f"{section}.{name}: unknown component type")
    service = config["service"]
    used: dict[str, set[str]] = {s: set() for s in ("receivers", "processors", "exporters")}
    for pname, pipeline in service["pipelines"].items():
        if pname.split("/", 1)[0] not in SIGNALS:
            problems.append(f"pipeline {pname}: unknown signal")
        if not pipeline.get("receivers") or not pipeline.get("exporters"):
            problems.append(f"pipeline {pname}: needs receivers and exporters")
        for section in used:
            for name in pipeline.get(section, []):
                used[section].add(name)
                if name not in (config.get(section) or {}):
                    problems.append(f"pipeline {pname}: {section[:-1]} {name} is not defined")
    for section, names in used.items():
        for name in set(config.get(section) or {}) - names:
            problems.append(f"{section}.{name}: defined but in no pipeline")
    for name in service.get("extensions", []):
        if name not in (config.get("extensions") or {}):
            problems.append(f"extension {name} is not defined")
    return problems


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_collector_config_is_structurally_valid(path: Path) -> None:
    assert structural_problems(load(path)) == []


def test_checker_finds_an_undefined_exporter() -> None:
    config = load(COLLECTOR / "child-span.yaml")
    config["service"]["pipelines"]["traces"]["exporters"].append("otlp/zipkin")
    del config["processors"]["batch"]
    problems = structural_problems(config)
    assert "pipeline traces: exporter otlp/zipkin is not defined" in problems
    assert any("processor batch is not defined" in p for p in problems)


def pipelines_from(
    config: dict[str, Any], port: int, signal: str = "traces"
) -> list[dict[str, Any]]:
    """The ``signal`` pipelines fed by the receiver listening on ``port``."""
    receivers = {
        n
        for n, r in config["receivers"].items()
        if any(str(p.get("endpoint", "")).endswith(f":{port}") for p in r["protocols"].values())
    }
    return [
        p
        for name, p in config["service"]["pipelines"].items()
        if name.split("/", 1)[0] == signal and receivers & set(p["receivers"])
    ]


def test_child_span_mode_fans_out_and_scores_skip_the_worker() -> None:
    config = load(COLLECTOR / "child-span.yaml")
    [from_app] = pipelines_from(config, 4318)
    assert set(from_app["exporters"]) == {WORKER_EXPORTER, *BACKENDS}
    [scores] = pipelines_from(config, 4319)
    assert set(scores["exporters"]) == BACKENDS


def test_enrich_mode_puts_the_worker_in_front_of_the_backends() -> None:
    config = load(COLLECTOR / "enrich.yaml")
    [from_app] = pipelines_from(config, 4318)
    assert from_app["exporters"] == [WORKER_EXPORTER]  # backends only get enriched spans
    [from_worker] = pipelines_from(config, 4319)
    assert set(from_worker["exporters"]) == BACKENDS


@pytest.mark.parametrize("name", ["child-span.yaml", "enrich.yaml"])
def test_evaluation_events_and_app_logs_go_to_loki_in_both_modes(name: str) -> None:
    config = load(COLLECTOR / name)
    [events] = pipelines_from(config, WORKER_PORT, "logs")
    assert events["exporters"] == [LOG_BACKEND]  # never back into the worker
    assert "batch" in events["processors"]
    [app_logs] = pipelines_from(config, 4318, "logs")
    assert app_logs["exporters"] == [LOG_BACKEND]
    loki = config["exporters"][LOG_BACKEND]
    # Loki's native OTLP endpoint; otlphttp appends /v1/logs itself
    assert loki["endpoint"] == "http://loki:3100/otlp"
    assert loki["retry_on_failure"]["enabled"] is True
    assert loki["sending_queue"]["queue_size"] > 0


def test_k8s_snippet_sends_worker_events_to_a_log_backend() -> None:
    config = load(COLLECTOR / "k8s-exporter-snippet.yaml")
    [events] = pipelines_from(config, WORKER_PORT, "logs")
    assert WORKER_EXPORTER not in events["exporters"]
    assert all(config["exporters"][e]["endpoint"].endswith("/otlp") for e in events["exporters"])


def test_checker_routing_sees_a_missing_logs_pipeline() -> None:
    config = load(COLLECTOR / "child-span.yaml")
    del config["service"]["pipelines"]["logs"]
    assert pipelines_from(config, WORKER_PORT, "logs") == []
    assert "exporters.otlphttp/loki: defined but in no pipeline" in structural_problems(config)


@pytest.mark.parametrize("name", ["child-span.yaml", "enrich.yaml", "k8s-exporter-snippet.yaml"])
def test_worker_exporter_retries_with_a_bounded_queue(name: str) -> None:
    exporter = load(COLLECTOR / name)["exporters"][WORKER_EXPORTER]
    # the worker answers 503 + Retry-After under pressure; otlphttp retries only if enabled
    assert exporter["retry_on_failure"]["enabled"] is True
    assert exporter["sending_queue"]["enabled"] is True
    assert exporter["sending_queue"]["queue_size"] > 0
    assert exporter["endpoint"].endswith(":4318")  # otlphttp appends /v1/traces itself


def test_compose_hostnames_match_the_services() -> None:
    services = set(yaml.safe_load((DEPLOY / "compose" / "compose.yaml").read_text())["services"])
    for name in ("child-span.yaml", "enrich.yaml"):
        for exporter in load(COLLECTOR / name)["exporters"].values():
            host = exporter["endpoint"].split("://")[-1].split(":")[0]
            assert host in services, (name, host)


# ------------------------------------------------------------------ collector-config
SAMPLING_RULES = COLLECTOR / "sampling-rules.toml"
GROUPS = ["spanjudge-group-a:4317", "spanjudge-group-b:4317"]


def collector_config(*args: str) -> Any:
    from click.testing import CliRunner

    from spanjudge.cli.app import cli

    return CliRunner().invoke(cli, ["collector-config", *args], catch_exceptions=False)


def test_sampling_example_is_what_the_command_prints() -> None:
    run = collector_config("--config", str(SAMPLING_RULES), "--workers", ",".join(GROUPS))
    assert run.exit_code == 0, run.output
    assert run.output == (COLLECTOR / "sampling.yaml").read_text(encoding="utf-8")


def test_sampling_example_presamples_at_the_rules_rate_and_routes_by_trace() -> None:
    from spanjudge.cli.collector import collector_threshold
    from spanjudge.evaluators._plan.consistent import threshold_for

    config = load(COLLECTOR / "sampling.yaml")
    [pipeline] = pipelines_from(config, 4318)
    assert pipeline["processors"] == [
        "memory_limiter",
        "probabilistic_sampler/spanjudge",
        "batch",
    ]
    sampler = config["processors"]["probabilistic_sampler/spanjudge"]
    assert sampler["mode"] == "proportional" and sampler["sampling_precision"] == 4
    assert "hash_seed" not in sampler  # a hash seed would switch the processor to hash mode
    # the highest rule rate (2%), read the way the processor reads it (float32 percent)
    assert collector_threshold(str(sampler["sampling_percentage"])) == threshold_for(0.02)
    balancer = config["exporters"]["loadbalancing/spanjudge"]
    assert balancer["routing_key"] == "traceID"
    assert balancer["resolver"]["static"]["hostnames"] == GROUPS
    assert pipeline["exporters"] == ["loadbalancing/spanjudge"]


def test_rules_that_do_not_sample_by_trace_keep_every_trace() -> None:
    # the compose stack's rules sample by target and judge conversations
    run = collector_config("--config", str(DEPLOY / "compose" / "worker.toml"))
    assert run.exit_code == 0, run.output
    config = yaml.safe_load(run.output)
    assert structural_problems(config) == []
    assert not any(n.startswith("probabilistic_sampler") for n in config["processors"])
    for rule in ("faithfulness-llm", "bias-agent", "topic-adherence-conversation"):
        assert f"#   {rule}: samples by target, not by trace" in run.output
    balancer = config["exporters"]["loadbalancing/spanjudge"]
    # a conversation rule: whole conversations go to one group
    assert balancer["routing_key"] == "attributes"
    assert balancer["routing_attributes"] == ["gen_ai.conversation.id"]
    by_trace = collector_config(
        "--config", str(DEPLOY / "compose" / "worker.toml"), "--route-by", "trace"
    )
    traced = yaml.safe_load(by_trace.output)["exporters"]["loadbalancing/spanjudge"]
    assert traced["routing_key"] == "traceID" and "routing_attributes" not in traced


@pytest.mark.parametrize("workers", ["group-a", "group-a:port", ",", "host:4317,:4317"])
def test_bad_workers_are_a_usage_error(workers: str) -> None:
    run = collector_config("--config", str(SAMPLING_RULES), "--workers", workers)
    assert run.exit_code == 2
    assert "--workers" in run.output


def test_percentages_give_the_collector_the_rules_threshold() -> None:
    import random

    from spanjudge.cli.collector import collector_threshold, percentage
    from spanjudge.evaluators._plan.consistent import MIN_PROBABILITY, threshold_for

    assert [percentage(r) for r in (0.02, 0.01, 0.1, 1 / 3, 1.0)] == [
        "2",
        "1",
        "10",
        "33.333",
        "100",
    ]
    rng = random.Random(7)
    inexact = 0
    for rate in [rng.random() ** 4 for _ in range(5000)] + [MIN_PROBABILITY, 0.9999999]:
        if rate == 0:
            continue
        text = percentage(rate)
        want = threshold_for(max(rate, MIN_PROBABILITY))
        # never a higher threshold than the rules': the Collector keeps every trace they pick
        assert collector_threshold(text) <= want, rate
        inexact += collector_threshold(text) != want
    assert inexact < 10  # only rates within ~1e-7 of 100% miss, by a hair


def test_no_rules_is_a_usage_error(tmp_path: Path) -> None:
    path = tmp_path / "w.toml"
    path.write_text("interval_seconds = 5\n")
    run = collector_config("--config", str(path))
    assert run.exit_code == 2
    assert "no rules configured" in run.output + (getattr(run, "stderr", "") or "")
