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
``SPANJUDGE_RECEIVER_PORT``... (lists and tables as JSON). Errors name the key. The loop's keys
(``interval_seconds``, ``concurrency``...) are the fields of ``LoopSettings``
(evaluators/_loop/config.py), shared with ``MonitorConfig``. ``docs/reference/settings.md``
lists every key and variable (``python scripts/settings_table.py`` writes it from them).
The file is read by pydantic-settings' own TOML, YAML and JSON sources, chosen by its extension
(:mod:`spanjudge.settings_files`); checks a type alone does not make (URLs, judge options, a
schema without PostgreSQL) are in :mod:`spanjudge.settings_checks`.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, ValidationInfo, field_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
)

from spanjudge._core.kinds import OUTPUTS, Output, Sink
from spanjudge._receive.limits import (
    MAX_BODY_BYTES,
    MAX_DECOMPRESSED_BYTES,
    MAX_INFLIGHT_BYTES,
)
from spanjudge._store import DEFAULT_STORE_URL
from spanjudge.errors import ConfigError
from spanjudge.evaluators._enrich import MAX_HOLD_SECONDS
from spanjudge.evaluators._judge.judges.litellm_judge import DEFAULT_MODEL
from spanjudge.evaluators._judge.judges.structured import StructuredOutput
from spanjudge.evaluators._loop.config import LoopSettings, Number
from spanjudge.evaluators._rebuild.dialects.declared import Reader
from spanjudge.rule_settings import RuleConfig
from spanjudge.settings_checks import (
    HttpUrl,
    JudgeModel,
    JudgeOptions,
    ReceiverHost,
    StoreSchema,
    StoreUrl,
    environment_error,
    format_validation_error,
)
from spanjudge.settings_files import file_source, file_warnings


def _all_outputs() -> list[Output | Sink]:
    return list(OUTPUTS)


class WorkerSettings(LoopSettings, BaseSettings):
    """Everything ``spanjudge worker`` needs; see the module docstring for the file format.

    The loop's settings (``interval_seconds``, ``settle_seconds``, ``concurrency``...) are
    :class:`~spanjudge.evaluators._loop.config.LoopSettings`' fields, inherited, so the
    worker and ``spanjudge.monitor()`` share their defaults and checks.
    """

    model_config = SettingsConfigDict(env_prefix="SPANJUDGE_", extra="forbid")

    store_url: StoreUrl = Field(
        default=DEFAULT_STORE_URL,
        description="Where spans, jobs and results are kept (SQLite or PostgreSQL).",
    )
    store_schema: StoreSchema | None = Field(
        default=None, description="PostgreSQL: keep the tables in this schema."
    )
    mode: Literal["child-span", "enrich"] = Field(
        default="child-span",
        description="child-span: scores go out as evaluation spans; enrich: the worker forwards "
        "every span it receives and holds evaluated ones until their scores are on them.",
    )
    receiver_host: ReceiverHost = Field(
        default="127.0.0.1", description="Address the OTLP/HTTP receiver binds."
    )
    receiver_port: int = Field(
        default=4318, ge=0, le=65535, description="Port of the OTLP/HTTP receiver."
    )
    receiver_max_connections: int = Field(
        default=1000,
        ge=1,
        le=1_000_000,
        description="Connections open at once, at most half the open-file limit; past it a new "
        "one closes the one longest waiting for its headers, or gets 503 + Retry-After.",
    )
    receiver_header_timeout_seconds: Number = Field(
        default=10.0,
        gt=0,
        le=3600,
        description="A connection is closed when its request headers take longer than this.",
    )
    receiver_body_timeout_seconds: Number = Field(
        default=60.0,
        gt=0,
        le=3600,
        description="A request whose body takes longer than this gets 408.",
    )
    shutdown_grace_seconds: Number = Field(
        default=25.0,
        gt=0,
        le=3600,
        description="On SIGTERM the worker exits within this: judge calls still running then "
        "are cancelled and their jobs left for the next start (under Kubernetes' 30 s).",
    )
    bearer_token: str | None = Field(
        default=None, description="When set, clients must send Authorization: Bearer <token>."
    )
    annotator_tokens: dict[str, str] = Field(
        default_factory=dict,
        description="POST /v1/feedback: one token per annotator ({name = token}); when set, a "
        "label's annotator is the one its token belongs to and bearer_token is not accepted.",
    )
    allow_unauthenticated: bool = Field(
        default=False,
        validate_default=True,  # its validator checks the bind even when the key is unset
        description="Serve a non-loopback receiver_host without bearer_token: anyone may write.",
    )
    max_body_bytes: int = Field(
        default=MAX_BODY_BYTES, gt=0, description="Largest request body accepted."
    )
    max_decompressed_bytes: int = Field(
        default=MAX_DECOMPRESSED_BYTES,
        gt=0,
        description="Largest request body once decompressed.",
    )
    max_inflight_bytes: int = Field(
        default=MAX_INFLIGHT_BYTES,
        gt=0,
        description="Request bodies (as sent, and inflated) held at once by requests being "
        "read, decoded or stored; past it the receiver answers 503 + Retry-After.",
    )
    max_pending_spans: int = Field(
        default=50_000,
        gt=0,
        description="The receiver answers 503 + Retry-After once this many spans wait for the "
        "store.",
    )
    max_hold_seconds: Number = Field(
        default=MAX_HOLD_SECONDS,
        gt=0,
        le=86400,
        description="Enrich mode: the longest a span waits for its scores.",
    )
    ingest_hold_max_spans: int = Field(
        default=100_000,
        gt=0,
        description="Rules sampling by conversation: spans held in the store (written before "
        "the answer) until their trace names its conversation; past it the traces held "
        "longest are dropped (counted, WARNING).",
    )
    ingest_hold_max_bytes: int = Field(
        default=256 * 2**20,
        gt=0,
        description="The same bound in bytes (the held spans' text and attributes).",
    )
    ingest_hold_seconds: Number = Field(
        default=60.0,
        gt=0,
        le=86400,
        description="Rules sampling by conversation: held spans that waited this long for the "
        "span naming their conversation are counted as expired; they stay held (a root that "
        "comes later still finds them) until the hold's bounds or retention_seconds remove "
        "them.",
    )
    # the worker's numbers (spanjudge/worker/numbers.py) and the review CLI's defaults
    interval_window_seconds: Number = Field(
        default=86400.0,
        ge=60,
        le=366 * 86400,
        description="The period the interval gauges and `scores --summary` sum results over.",
    )
    regression_window_seconds: Number = Field(
        default=7 * 86400.0,
        ge=60,
        le=366 * 86400,
        description="The period the regression check and `compare` sum results over.",
    )
    regression_alpha: float = Field(
        default=0.05,
        gt=0,
        lt=0.5,
        description="Error rate of each regression decision over its whole life (the "
        "confidence sequences are 1 - alpha).",
    )
    segment_cap: int = Field(
        default=10,
        ge=1,
        le=1000,
        description="Segments per rule in the interval gauges and `scores --summary`; the "
        "rest are folded into 'other' (Prometheus series stay bounded).",
    )
    judge_model: JudgeModel = Field(
        default=DEFAULT_MODEL, description="The judge: any litellm model name."
    )
    judge_timeout: Number = Field(
        default=60.0, gt=0, le=3600, description="Seconds one judge call may take."
    )
    judge_max_concurrency: int = Field(
        default=8, ge=1, le=1024, description="Judge calls in flight at once."
    )
    judge_options: JudgeOptions = Field(
        default_factory=dict, description="More keyword arguments for the litellm judge."
    )
    judge_base_url: HttpUrl | None = Field(
        default=None, description="A self-hosted judge's OpenAI-compatible URL."
    )
    judge_api_key_env: str | None = Field(
        default=None,
        description="The NAME of the environment variable that holds the judge's key (never "
        "the key itself).",
    )
    judge_structured_output: StructuredOutput = Field(
        default="auto",
        description="How JSON is asked of the judge; auto negotiates per server.",
    )
    downstream_endpoint: HttpUrl | None = Field(
        default=None,
        description="Where scores (and, in enrich mode, spans) go over OTLP/HTTP; unset: "
        "OTEL_EXPORTER_OTLP_(TRACES_|LOGS_)ENDPOINT.",
    )
    outputs: list[Output | Sink] = Field(
        default_factory=_all_outputs,
        min_length=1,
        description="How results leave: span (evaluation span, /v1/traces), event "
        "(gen_ai.evaluation.result log record, /v1/logs), phoenix (Phoenix annotations), "
        "mlflow (MLflow feedback assessments); docs/backends.md.",
    )
    evaluation_status: Literal["judge-errors", "unset", "failing"] = Field(
        default="judge-errors",
        description="Which evaluation spans get status ERROR: judge-errors (an evaluation "
        "that could not score; a failing verdict stays unset, so the app's error rates are "
        "left alone), unset (none) or failing (also every failing verdict).",
    )
    evaluation_service: Literal["auto", "judged", "worker"] = Field(
        default="auto",
        description="Whose service.name evaluation spans carry: judged (the judged span's), "
        "worker (service_name), auto (judged when the spans go to MLflow, which tags a trace "
        "with the last batch's service, else worker).",
    )
    phoenix_endpoint: HttpUrl | None = Field(
        default=None,
        description="Phoenix's URL for the phoenix output; unset: PHOENIX_COLLECTOR_ENDPOINT, "
        "then downstream_endpoint.",
    )
    phoenix_api_key_env: str = Field(
        default="PHOENIX_API_KEY",
        description="The NAME of the variable holding Phoenix's API key (sent when set).",
    )
    mlflow_endpoint: HttpUrl | None = Field(
        default=None,
        description="MLflow's tracking server URL for the mlflow output; unset: "
        "MLFLOW_TRACKING_URI, then downstream_endpoint.",
    )
    mlflow_token_env: str = Field(
        default="MLFLOW_TRACKING_TOKEN",
        description="The NAME of the variable holding MLflow's token (sent when set; "
        "MLFLOW_TRACKING_USERNAME and _PASSWORD give basic auth).",
    )
    service_name: str = Field(
        default="spanjudge-worker", description="service.name of the worker's own telemetry."
    )
    # Judge-human agreement: spanjudge calibration, the spanjudge_judge_agreement gauges and the
    # SpanjudgeJudgeAgreementLow alert read these three
    agreement_window_seconds: Number = Field(
        default=30 * 86400.0,
        gt=0,
        le=3650 * 86400,
        description="Human labels of this last stretch of time count.",
    )
    agreement_floor: float = Field(
        default=0.4,
        ge=-1.0,
        le=1.0,
        description="The agreement alert fires when a rule's Cohen's kappa is under this.",
    )
    agreement_min_labels: int = Field(
        default=20, ge=1, description="...once the rule has at least this many labels."
    )
    rules: list[RuleConfig] = Field(
        default_factory=list,
        description="The rules: [[rules]] tables with the keys below (from the environment, "
        "a JSON list of them).",
    )
    rules_entrypoint: str | None = Field(
        default=None, description='"module:function" returning a list of Rule objects.'
    )
    readers: list[Reader] = Field(
        default_factory=list,
        description="Declared readers: [[readers]] tables (name, kind, match, and a source per "
        "field: input, output, context, session, tool_name, arguments, result, error), read "
        "before the built-in dialects (docs/other-libraries.md).",
    )
    log_format: Literal["text", "json"] = Field(
        default="text",
        description='The worker\'s log lines: "text" for people, "json" for log pipelines '
        "(one JSON object a line: time, level, logger, message, and the traceback if any).",
    )

    @field_validator("bearer_token")
    @classmethod
    def _token_not_empty(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():  # as an unset template variable gives
            raise ValueError("is empty (remove the key to run without authentication)")
        return value

    @field_validator("annotator_tokens")
    @classmethod
    def _annotator_tokens_distinct(
        cls, tokens: dict[str, str], info: ValidationInfo
    ) -> dict[str, str]:
        shared = info.data.get("bearer_token")
        seen: dict[str, str] = {}
        for name, token in tokens.items():
            if not name.strip() or not token.strip():
                raise ValueError(f"{name!r}: an annotator name and its token must not be empty")
            if token == shared:
                raise ValueError(f"{name!r}: the same token as bearer_token")
            if token in seen:
                raise ValueError(f"{name!r}: the same token as {seen[token]!r}")
            seen[token] = name
        return tokens

    @field_validator("allow_unauthenticated")
    @classmethod
    def _open_bind_is_explicit(cls, allowed: bool, info: ValidationInfo) -> bool:
        # no bearer_token in info.data: it failed its own check, which is reported already
        host, token = info.data.get("receiver_host"), info.data.get("bearer_token", "")
        if allowed or not host or token is not None or host == "localhost":
            return allowed
        with suppress(ValueError):  # any other host name may resolve to any interface
            if ipaddress.ip_address(host.strip("[]")).is_loopback:
                return allowed
        raise ValueError(f"must be true to serve receiver_host {host} without a bearer_token")

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
        return init_settings, env_settings, file_source(settings_cls, path)


# Environment variables spanjudge reads that are not WorkerSettings keys: (variable, read by,
# what it does). docs/reference/settings.md lists them after the settings, and a test fails when
# the package reads a variable that is in neither list.
OTHER_ENVIRONMENT: tuple[tuple[str, str, str], ...] = (
    (
        "SPANJUDGE_STORE_URL",
        "open_store(), spanjudge.monitor()",
        f"The store used when none is given (default {DEFAULT_STORE_URL}); the worker reads it "
        "as store_url.",
    ),
    (
        "SPANJUDGE_CACHE_DIR",
        "G-Eval",
        "Where the evaluation steps a judge wrote for G-Eval criteria are kept (default "
        "$XDG_CACHE_HOME/spanjudge, else ~/.cache/spanjudge).",
    ),
    ("XDG_CACHE_HOME", "G-Eval", "The cache base directory when SPANJUDGE_CACHE_DIR is unset."),
    (
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "configure(), spanjudge demo, the score exporters",
        "Where traces (and result events) go over OTLP/HTTP when no endpoint is given; a base "
        "URL gets /v1/traces or /v1/logs appended.",
    ),
    (
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "configure(), the score exporters",
        "The same for traces alone; wins over OTEL_EXPORTER_OTLP_ENDPOINT.",
    ),
    (
        "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT",
        "the score exporters (OpenTelemetry SDK)",
        "The same for gen_ai.evaluation.result events alone.",
    ),
    (
        "OTEL_EXPORTER_OTLP_HEADERS",
        "configure(), the score exporters (OpenTelemetry SDK)",
        "Headers sent with every OTLP request, key=value,... URL-encoded: "
        "x-mlflow-experiment-id=1 for MLflow, a backend's token (docs/backends.md).",
    ),
    (
        "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
        "configure(), the score exporters (OpenTelemetry SDK)",
        "The same for traces (evaluation spans) alone; wins over OTEL_EXPORTER_OTLP_HEADERS.",
    ),
    (
        "PHOENIX_COLLECTOR_ENDPOINT",
        "the phoenix output",
        "Phoenix's URL when phoenix_endpoint is unset (Phoenix's own variable).",
    ),
    (
        "MLFLOW_TRACKING_URI",
        "the mlflow output",
        "MLflow's tracking server URL when mlflow_endpoint is unset (MLflow's own variable).",
    ),
    (
        "OTEL_SERVICE_NAME",
        "configure() (OpenTelemetry SDK)",
        "service.name of the traced application when configure() is given none.",
    ),
    (
        "OTEL_RESOURCE_ATTRIBUTES",
        "configure() (OpenTelemetry SDK)",
        "More resource attributes of the traced application (key=value,...).",
    ),
    (
        "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT",
        "the tracer",
        "Whether prompts and answers are recorded on spans (default on; false, 0, no or off: "
        "off); configure(capture_content=...) wins.",
    ),
    (
        "LITELLM_LOCAL_MODEL_COST_MAP",
        "the litellm judge",
        "Set to True when unset, so litellm prices calls from its bundled table instead of "
        "fetching one from the internet.",
    ),
    (
        "OPENAI_API_KEY",
        "the judge",
        "The key of openai/ judge models (read by litellm, or by the direct transport).",
    ),
    (
        "OPENAI_API_BASE",
        "the judge",
        "The endpoint of openai/ judge models without api_base (also OPENAI_BASE_URL).",
    ),
    ("OPENAI_BASE_URL", "the judge", "As OPENAI_API_BASE, when that is unset."),
    (
        "(the name in judge_api_key_env)",
        "the worker's judge",
        "The judge's key, read from the variable the setting names.",
    ),
)


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


def load_settings(path: str | os.PathLike[str] | None = None, **overrides: Any) -> WorkerSettings:
    """Read the file (TOML, YAML or JSON by extension), then apply ``SPANJUDGE_*`` env vars.

    Keyword arguments beat both, for code that configures a worker itself::

        settings = load_settings("worker.toml")
        settings = load_settings(None, store_url="sqlite:///tmp/x.db", rules=[{"metric": "bias"}])

    Raises ConfigError naming every bad key, or the file when it cannot be read or parsed.
    """
    file = None if path is None else Path(path)
    file_warnings()  # what start_warnings says is about this load's file, not an earlier one's
    try:
        with _reading(file):
            return WorkerSettings(**overrides)
    except ValidationError as exc:
        source = "environment" if file is None else str(file)
        raise ConfigError(format_validation_error(exc, source)) from None
    except SettingsError as exc:  # a SPANJUDGE_* variable that is not valid JSON
        raise environment_error(exc) from None
