"""Worker settings: a TOML or YAML file, overridden by ``SPANJUDGE_*`` environment variables.

::

    # worker.toml
    store_url = "postgresql://spanjudge@db:5432/spanjudge"
    receiver_host = "0.0.0.0"
    judge_model = "gpt-4o-mini"

    [[rules]]
    metric = "faithfulness"
    target = "llm"
    sample_rate = 0.2
    params = { threshold = 0.7 }
    filter = { service = "support-bot" }

Every key can also come from the environment: ``SPANJUDGE_STORE_URL``, ``SPANJUDGE_MODE``,
``SPANJUDGE_RECEIVER_PORT``... (rules only from the file or an entry point). Errors name the key.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

METRIC_NAMES = ("faithfulness", "bias", "topic_adherence")


class ConfigError(ValueError):
    """The worker configuration is invalid; the message names every bad key."""


class RuleConfig(BaseModel):
    """One rule as written in the worker's file."""

    model_config = ConfigDict(extra="forbid")

    metric: Literal["faithfulness", "bias", "topic_adherence"]
    target: Literal["llm", "agent", "trace", "conversation"] = "llm"
    sample_rate: float = Field(1.0, ge=0.0, le=1.0)
    name: str | None = None
    params: dict[str, Any] = Field(default_factory=dict)
    filter: dict[str, Any] | None = None
    max_per_minute: int | None = Field(None, gt=0)
    max_cost_per_day: float | None = Field(None, gt=0)
    build_case: str | None = None  # "module:function"


class WorkerSettings(BaseSettings):
    """Everything ``spanjudge worker`` needs; see the module docstring for the file format."""

    model_config = SettingsConfigDict(env_prefix="SPANJUDGE_", extra="forbid")

    store_url: str = "sqlite:///./spanjudge.db"
    store_schema: str | None = None  # PostgreSQL: keep the tables in this schema
    mode: Literal["child-span", "enrich"] = "child-span"
    receiver_host: str = "127.0.0.1"
    receiver_port: int = Field(4318, ge=0, le=65535)
    bearer_token: str | None = None
    max_body_bytes: int = Field(8 * 2**20, gt=0)
    max_decompressed_bytes: int = Field(64 * 2**20, gt=0)
    # The receiver answers 503 + Retry-After once this many spans wait for the store.
    max_pending_spans: int = Field(50_000, gt=0)
    interval_seconds: float = Field(5.0, gt=0)
    settle_seconds: float = Field(10.0, ge=0)
    idle_seconds: float = Field(300.0, ge=0)
    concurrency: int = Field(8, ge=1)
    lease_seconds: float = Field(300.0, gt=0)
    max_attempts: int = Field(3, ge=1)
    retention_seconds: float | None = Field(7 * 24 * 3600, gt=0)
    max_hold_seconds: float = Field(120.0, gt=0)
    judge_model: str = "gpt-4o"
    judge_timeout: float = Field(60.0, gt=0)
    judge_max_concurrency: int = Field(8, ge=1)
    judge_options: dict[str, Any] = Field(default_factory=dict)
    downstream_endpoint: str | None = None  # else OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT
    service_name: str = "spanjudge-worker"
    rules: list[RuleConfig] = Field(default_factory=list)
    rules_entrypoint: str | None = None  # "module:function" returning a list of Rule

    @classmethod
    def settings_customise_sources(  # type: ignore[override]
        cls,
        settings_cls: Any,
        init_settings: Any,
        env_settings: Any,
        dotenv_settings: Any,
        file_secret_settings: Any,
    ) -> tuple[Any, ...]:
        # environment beats the file: a container overrides one key without editing the file
        return env_settings, init_settings


def _read_file(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from exc
    try:
        if path.suffix in (".yaml", ".yml"):
            import yaml

            data = yaml.safe_load(text) or {}
        elif path.suffix == ".json":
            data = json.loads(text)
        else:
            try:
                import tomllib
            except ImportError:  # Python 3.10
                import tomli as tomllib  # type: ignore[no-redef,import-not-found,unused-ignore]

            data = tomllib.loads(text)
    except Exception as exc:
        raise ConfigError(f"{path}: not valid {path.suffix.lstrip('.') or 'TOML'}: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a table/mapping of keys")
    return data


def format_validation_error(exc: ValidationError, source: str) -> str:
    lines = [f"invalid worker configuration ({source}):"]
    for err in exc.errors():
        key = ".".join(str(p) for p in err["loc"]) or "(top level)"
        if err["type"] == "extra_forbidden":
            lines.append(f"  {key}: unknown key")
        else:
            lines.append(f"  {key}: {err['msg']}")
    return "\n".join(lines)


def load_settings(path: str | os.PathLike[str] | None = None, **overrides: Any) -> WorkerSettings:
    """Read the file (TOML, YAML or JSON by extension), then apply ``SPANJUDGE_*`` env vars."""
    data: dict[str, Any] = {}
    source = "environment"
    if path is not None:
        data = _read_file(Path(path))
        source = str(path)
    data.update(overrides)
    try:
        return WorkerSettings(**data)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, source)) from None
