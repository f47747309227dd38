"""The compose file validates against the Compose specification schema and is coherent:
pinned images, health checks, files it mounts exist, every variable documented, no secrets."""

from __future__ import annotations

import json
import re
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from spanjudge.settings import load_settings
from tests.deploy.promql import DEPLOY

COMPOSE_DIR = DEPLOY / "compose"
COMPOSE_FILE = COMPOSE_DIR / "compose.yaml"
MODES = ("child-span", "enrich")
_VAR = re.compile(r"\$\{([A-Z_][A-Z0-9_]*)(?::?[-?][^}]*)?\}")


def with_defaults(text: str) -> str:
    """Interpolate ``${VAR:-default}`` the way compose does with VAR unset."""
    return re.sub(r"\$\{[A-Z_][A-Z0-9_]*:-([^}]*)\}", r"\1", text)


def compose_schema() -> dict[str, Any]:
    # The compose-spec JSON schema as vendored (and pinned by hash) in check-jsonschema.
    text = resources.files("check_jsonschema.builtin_schemas.vendor") / "compose-spec.json"
    return dict(json.loads(text.read_text(encoding="utf-8")))


def schema_errors(doc: dict[str, Any]) -> list[str]:
    schema = compose_schema()
    validator = jsonschema.validators.validator_for(schema)(schema)
    return [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(doc)]


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return dict(yaml.safe_load(COMPOSE_FILE.read_text(encoding="utf-8")))


def test_compose_file_matches_the_compose_spec_schema(compose: dict[str, Any]) -> None:
    assert schema_errors(compose) == []


def test_schema_rejects_a_misspelled_key(compose: dict[str, Any]) -> None:
    broken = json.loads(json.dumps(compose))
    broken["services"]["worker"]["helthcheck"] = broken["services"]["worker"].pop("healthcheck")
    assert any("helthcheck" in e for e in schema_errors(broken))


def test_the_whole_picture_is_there(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert {
        "collector",
        "worker",
        "jaeger",
        "tempo",
        "loki",
        "prometheus",
        "grafana",
        "postgres",
        "demo",
    } <= set(services)
    assert services["demo"]["profiles"] == ["demo"]  # optional traffic
    assert services["collector"]["image"].startswith("otel/opentelemetry-collector-contrib:")
    assert services["jaeger"]["image"].startswith("jaegertracing/jaeger:2.")
    assert services["loki"]["image"].startswith("grafana/loki:3.")  # native OTLP ingestion


def test_images_are_pinned(compose: dict[str, Any]) -> None:
    for name, service in compose["services"].items():
        image = with_defaults(service["image"])
        repo, _, tag = image.rpartition(":")
        assert repo and tag and tag != "latest", f"{name}: {image} is not pinned"
        # our own image is built locally (tag from .env); every upstream one carries a full
        # version (x.y.z, or x.y for PostgreSQL)
        assert re.fullmatch(r"v?\d+\.\d+(\.\d+)?[\w.-]*", tag) or repo == "spanjudge", image


def test_stateful_services_have_volumes_and_probed_ones_health_checks(
    compose: dict[str, Any],
) -> None:
    services = compose["services"]
    for name in ("postgres", "tempo", "loki", "prometheus", "grafana"):
        assert any(":/" in v and not v.startswith(".") for v in services[name]["volumes"]), name
    for name in ("postgres", "worker", "loki", "prometheus", "grafana"):
        assert services[name]["healthcheck"]["test"], name
    # the worker starts after the database is healthy; the Collector after the worker
    assert services["worker"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert services["collector"]["depends_on"]["worker"]["condition"] == "service_healthy"


def test_worker_health_check_probes_readyz_on_the_receiver_port(compose: dict[str, Any]) -> None:
    worker = compose["services"]["worker"]
    assert "127.0.0.1:4318/readyz" in " ".join(worker["healthcheck"]["test"])
    assert worker["environment"]["SPANJUDGE_RECEIVER_HOST"] == "0.0.0.0"


def test_no_secret_values_in_the_compose_file(compose: dict[str, Any]) -> None:
    for name, service in compose["services"].items():
        for key, value in (service.get("environment") or {}).items():
            if re.search(r"PASSWORD|API_KEY|TOKEN|SECRET", key):
                assert str(value).startswith("${"), f"{name}.{key} holds a literal secret"
        store_url = (service.get("environment") or {}).get("SPANJUDGE_STORE_URL", "")
        if store_url:
            assert "${POSTGRES_PASSWORD" in store_url


def test_every_variable_is_documented_in_env_example() -> None:
    used = set(_VAR.findall(COMPOSE_FILE.read_text(encoding="utf-8")))
    example = (COMPOSE_DIR / ".env.example").read_text(encoding="utf-8")
    documented = {
        line.split("=", 1)[0] for line in example.splitlines() if line and not line.startswith("#")
    }
    assert used - documented == set()
    assert re.search(r"^OPENAI_API_KEY=$", example, re.M)  # the example holds no key


@pytest.mark.parametrize("mode", MODES)
def test_mounted_files_exist_in_both_modes(compose: dict[str, Any], mode: str) -> None:
    for name, service in compose["services"].items():
        for volume in service.get("volumes", []):
            source = volume.replace("${SPANJUDGE_MODE:-child-span}", mode).split(":", 1)[0]
            if source.startswith("."):
                assert (COMPOSE_DIR / source).exists(), f"{name}: {source}"
        build = service.get("build")
        if build:
            context = COMPOSE_DIR / build["context"]
            assert (context / build["dockerfile"]).is_file()
            assert (context / "pyproject.toml").is_file()


def test_worker_config_file_is_accepted_by_the_worker_settings(monkeypatch: Any) -> None:
    for key in list(__import__("os").environ):
        if key.startswith("SPANJUDGE_"):
            monkeypatch.delenv(key)
    settings = load_settings(COMPOSE_DIR / "worker.toml")
    assert {r.metric for r in settings.rules} == {"faithfulness", "bias", "topic_adherence"}


def test_worker_sends_scores_to_a_collector_receiver_that_skips_the_worker(
    compose: dict[str, Any],
) -> None:
    endpoint = compose["services"]["worker"]["environment"]["OTEL_EXPORTER_OTLP_ENDPOINT"]
    port = int(endpoint.rsplit(":", 1)[1])
    for mode in MODES:
        config = yaml.safe_load((DEPLOY / "collector" / f"{mode}.yaml").read_text())
        receivers = [
            n
            for n, r in config["receivers"].items()
            if any(str(p.get("endpoint", "")).endswith(f":{port}") for p in r["protocols"].values())
        ]
        assert len(receivers) == 1, mode
        for pipeline in config["service"]["pipelines"].values():
            if receivers[0] in pipeline["receivers"]:
                assert "otlphttp/spanjudge" not in pipeline["exporters"], mode


def test_dockerfile_copies_every_package_folder() -> None:
    """The package is src/spanjudge -> spanjudge/, whose tracer/exporters/evaluators are links to
    top-level folders: the image needs every folder a link points into, and the links."""
    dockerfile = (COMPOSE_DIR / "Dockerfile").read_text(encoding="utf-8")
    root = COMPOSE_DIR.parents[1]
    entries = [*(root / "src").iterdir(), *(root / "spanjudge").iterdir()]
    links = [p for p in entries if p.is_symlink()]
    folders = {"src"} | {p.resolve().relative_to(root).parts[0] for p in links}
    assert folders >= {"src", "spanjudge", "tracer", "exporters", "evaluators"}, folders
    for folder in folders:
        assert re.search(rf"^COPY {folder} \./{folder}$", dockerfile, re.M), folder
    assert Path(COMPOSE_DIR.parents[1] / "README.md").exists()
