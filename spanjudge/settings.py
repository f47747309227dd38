"""Worker settings: a TOML, YAML or JSON file, overridden by ``SPANJUDGE_*`` environment variables.

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
The file is read by pydantic-settings' own TOML, YAML and JSON sources, chosen by its extension.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic_settings import (
    BaseSettings,
    JsonConfigSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
    YamlConfigSettingsSource,
)

from spanjudge.errors import ConfigError as ConfigError

METRIC_NAMES = ("faithfulness", "bias", "topic_adherence")


class RuleConfig(BaseModel):
    """One rule as written in the worker's file."""

    model_config = ConfigDict(extra="forbid")

    # "geval": criteria of your own (params: name, criteria or evaluation_steps, evaluation_params,
    # threshold...); on target "conversation" it is the conversational G-Eval
    metric: Literal["faithfulness", "bias", "topic_adherence", "geval"]
    target: Literal["llm", "agent", "trace", "conversation"] = "llm"
    sample_rate: float = Field(1.0, ge=0.0, le=1.0)
    name: str | None = None
    params: dict[str, Any] = Field(default_factory=dict)
    filter: dict[str, Any] | None = None
    max_per_minute: int | None = Field(None, gt=0)
    max_cost_per_day: float | None = Field(None, gt=0)
    build_case: str | None = None  # "module:function"


def _both_outputs() -> list[Literal["span", "event"]]:
    return ["span", "event"]


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
    # The judge-result cache: a scored result for the same metric (parameters, prompts), judge
    # model and rebuilt case is reused, without a judge call, for this long; false: always judge
    judge_cache: bool = True
    judge_cache_max_age_seconds: float = Field(24 * 3600, gt=0)
    max_hold_seconds: float = Field(120.0, gt=0)
    judge_model: str = "gpt-4o"
    judge_timeout: float = Field(60.0, gt=0)
    judge_max_concurrency: int = Field(8, ge=1)
    judge_options: dict[str, Any] = Field(default_factory=dict)
    # A self-hosted judge: its OpenAI-compatible URL, the NAME of the environment variable that
    # holds its key (never the key), and how JSON is asked for ("auto" negotiates per server).
    judge_base_url: str | None = None
    judge_api_key_env: str | None = None
    judge_structured_output: Literal["auto", "json_schema", "json_object", "tools", "prompt"] = (
        "auto"
    )
    downstream_endpoint: str | None = None  # else OTEL_EXPORTER_OTLP_(TRACES_|LOGS_)ENDPOINT
    # How results leave: "span" (evaluation span under the evaluated span, /v1/traces) and/or
    # "event" (gen_ai.evaluation.result log record on the evaluated span, /v1/logs)
    outputs: list[Literal["span", "event"]] = Field(default_factory=_both_outputs, min_length=1)
    service_name: str = "spanjudge-worker"
    # Judge-human agreement (spanjudge calibration, the spanjudge_judge_agreement gauges, the
    # SpanjudgeJudgeAgreementLow alert): labels of the last agreement_window_seconds count; the
    # alert fires when a rule's Cohen's kappa is under agreement_floor once it has
    # agreement_min_labels labels
    agreement_window_seconds: float = Field(30 * 86400, gt=0)
    agreement_floor: float = Field(0.4, ge=-1.0, le=1.0)
    agreement_min_labels: int = Field(20, ge=1)
    rules: list[RuleConfig] = Field(default_factory=list)
    rules_entrypoint: str | None = None  # "module:function" returning a list of Rule

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Keyword arguments (code) beat the environment, which beats the file: a container
        # overrides one key without editing the file. No .env or secrets directory is read.
        path = _CONFIG_FILE.get()
        if path is None:
            return init_settings, env_settings
        return init_settings, env_settings, _file_source(settings_cls, path)


# The file load_settings() is reading: settings_customise_sources is a classmethod that only
# receives the class, and a per-call subclass would leak into the type of the settings.
_CONFIG_FILE: ContextVar[Path | None] = ContextVar("spanjudge_config_file", default=None)


@contextmanager
def _reading(path: Path | None) -> Iterator[None]:
    token = _CONFIG_FILE.set(path)
    try:
        yield
    finally:
        _CONFIG_FILE.reset(token)


def _checked(kind: str, path: object, read: Callable[[], object]) -> dict[str, Any]:
    """The file's top-level mapping, or a ConfigError naming the file and what is wrong."""
    try:
        data = read()
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror or exc}") from exc
    except Exception as exc:  # each format's parser has its own error class
        raise ConfigError(f"{path}: not valid {kind}: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a table/mapping of keys")
    return data


# The sources skip a missing file and let parser errors (or a list at the top level) escape as
# they are; these subclasses turn every such problem into one ConfigError.
class _TomlFile(TomlConfigSettingsSource):
    def _read_file(self, file_path: Any) -> dict[str, Any]:
        read = super()._read_file
        return _checked("TOML", file_path, lambda: read(file_path))


class _YamlFile(YamlConfigSettingsSource):
    def _read_file(self, file_path: Any) -> dict[str, Any]:
        read = super()._read_file
        return _checked("YAML", file_path, lambda: read(file_path))


class _JsonFile(JsonConfigSettingsSource):
    def _read_file(self, file_path: Any) -> dict[str, Any]:
        read = super()._read_file
        return _checked("JSON", file_path, lambda: read(file_path))


def _file_source(settings_cls: type[BaseSettings], path: Path) -> PydanticBaseSettingsSource:
    if not path.is_file():
        reason = "not a file" if path.exists() else "no such file"
        raise ConfigError(f"cannot read config file {path}: {reason}")
    suffix = path.suffix.lower()
    if suffix in (".yaml", ".yml"):
        return _YamlFile(settings_cls, path)
    if suffix == ".json":
        return _JsonFile(settings_cls, path)
    return _TomlFile(settings_cls, path)  # .toml, and any other name


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
    """Read the file (TOML, YAML or JSON by extension), then apply ``SPANJUDGE_*`` env vars.

    Keyword arguments beat both, for code that configures a worker itself::

        settings = load_settings("worker.toml")
        settings = load_settings(None, store_url="sqlite:///tmp/x.db", rules=[{"metric": "bias"}])

    Raises ConfigError naming every bad key, or the file when it cannot be read or parsed.
    """
    file = None if path is None else Path(path)
    try:
        with _reading(file):
            return WorkerSettings(**overrides)
    except ValidationError as exc:
        source = "environment" if file is None else str(file)
        raise ConfigError(format_validation_error(exc, source)) from None
