"""Kubernetes manifests validate against the Kubernetes OpenAPI schemas (strict: unknown
fields are errors) and hang together: selectors, Secrets, ConfigMap, probes, PDB."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from spanjudge.settings import load_settings
from tests.deploy.promql import DEPLOY

K8S = DEPLOY / "k8s"
MANIFESTS = sorted(p for p in K8S.glob("*.yaml") if p.name != "kustomization.yaml")
VERSION = "1.30.0"


def documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d]


def by_kind() -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for path in MANIFESTS:
        for doc in documents(path):
            out.setdefault(doc["kind"], []).append(doc)
    return out


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
def test_manifest_validates_against_the_kubernetes_schema(path: Path) -> None:
    for doc in documents(path):
        kubernetes_validate.validate(doc, VERSION, strict=True)


def test_strict_validation_rejects_an_unknown_field() -> None:
    [deployment] = by_kind()["Deployment"]
    deployment["spec"]["template"]["spec"]["containers"][0]["livenesProbe"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, VERSION, strict=True)


def test_kustomization_lists_every_manifest_except_the_secret_example() -> None:
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    listed = set(kustomization["resources"])
    assert listed == {p.name for p in MANIFESTS} - {"secret.example.yaml"}


def test_deployment_is_replicated_probed_and_resourced() -> None:
    kinds = by_kind()
    [deployment] = kinds["Deployment"]
    spec = deployment["spec"]
    assert spec["replicas"] >= 2
    [container] = spec["template"]["spec"]["containers"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["resources"]["requests"]["cpu"]
    assert container["resources"]["requests"]["memory"]
    env = {e["name"]: e for e in container["env"]}
    assert env["SPANJUDGE_RECEIVER_HOST"]["value"] == "0.0.0.0"
    # store URL, judge key and the receiver's token (it binds 0.0.0.0) come from Secrets
    secrets = {s["metadata"]["name"]: s for s in kinds["Secret"]}
    for name in ("SPANJUDGE_STORE_URL", "OPENAI_API_KEY", "SPANJUDGE_BEARER_TOKEN"):
        ref = env[name]["valueFrom"]["secretKeyRef"]
        assert ref["key"] in secrets[ref["name"]]["stringData"]


def test_selectors_match_the_pod_labels() -> None:
    kinds = by_kind()
    [deployment] = kinds["Deployment"]
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    selectors = [
        deployment["spec"]["selector"]["matchLabels"],
        kinds["Service"][0]["spec"]["selector"],
        kinds["PodDisruptionBudget"][0]["spec"]["selector"]["matchLabels"],
    ]
    for selector in selectors:
        assert selector.items() <= pod_labels.items()
    pdb = kinds["PodDisruptionBudget"][0]["spec"]
    assert pdb["minAvailable"] < deployment["spec"]["replicas"]  # drains can proceed


def test_configmap_holds_a_worker_config_the_worker_accepts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key in list(__import__("os").environ):
        if key.startswith("SPANJUDGE_"):
            monkeypatch.delenv(key)
    [configmap] = by_kind()["ConfigMap"]
    [deployment] = by_kind()["Deployment"]
    volumes = deployment["spec"]["template"]["spec"]["volumes"]
    assert {"name": "config", "configMap": {"name": configmap["metadata"]["name"]}} in volumes
    # as the Deployment sets it from its Secret: without it a 0.0.0.0 bind is refused
    monkeypatch.setenv("SPANJUDGE_BEARER_TOKEN", "from-the-secret")
    path = tmp_path / "worker.toml"
    path.write_text(configmap["data"]["worker.toml"])
    settings = load_settings(path)
    assert settings.receiver_host == "0.0.0.0"
    assert settings.rules


def test_env_references_point_at_earlier_variables() -> None:
    # Kubernetes expands $(NAME) only for variables defined earlier in the list; a later or
    # missing one stays a literal "$(NAME)" in the pod
    [deployment] = by_kind()["Deployment"]
    for container in deployment["spec"]["template"]["spec"]["containers"]:
        seen: set[str] = set()
        for entry in container["env"]:
            for ref in re.findall(r"\$\((\w+)\)", entry.get("value", "")):
                assert ref in seen, f"{entry['name']} uses $({ref}) before it is defined"
            seen.add(entry["name"])
