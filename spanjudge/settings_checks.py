"""Checks of worker settings that a type alone does not make, and how a failed check is reported.

Each check is an annotated type that :mod:`spanjudge.settings` gives a field, so the field stays
declared once and its check runs wherever settings are read (file, ``SPANJUDGE_*`` variables,
keyword arguments). A failed check is one line naming the key and what to write instead; the
value itself is never echoed, as it may hold a password::

    from pydantic import TypeAdapter
    from spanjudge.settings_checks import StoreUrl

    TypeAdapter(StoreUrl).validate_python("mysql://db/spans")
    # ValidationError: unsupported scheme 'mysql': use sqlite:///path/to/file.db or
    # postgresql://user@host/db

Checks that need the network or the disk (the store opens, the port is free, the judge answers)
run when the worker starts: :mod:`spanjudge.worker.preflight`.
"""

from __future__ import annotations

import difflib
import inspect
import os
import re
from typing import Annotated, Any
from urllib.parse import urlsplit

from pydantic import AfterValidator, ValidationError, ValidationInfo
from pydantic_core import PydanticCustomError
from pydantic_settings import SettingsError

from spanjudge._core.checked_model import error_lines
from spanjudge.errors import ConfigError

__all__ = [
    "ENV_PREFIX",
    "HttpUrl",
    "JudgeModel",
    "JudgeOptions",
    "ReceiverHost",
    "StoreSchema",
    "StoreUrl",
    "environment_error",
    "format_validation_error",
    "is_postgres_url",
    "unknown_judge_options",
]

ENV_PREFIX = "SPANJUDGE_"


def _fail(message: str, **context: Any) -> PydanticCustomError:
    # a custom error type keeps pydantic's "Value error, " out of the line the operator reads
    return PydanticCustomError("setting", message, context)


# ------------------------------------------------------------------------------ text
def _not_blank(value: str) -> str:
    if not value.strip():
        raise _fail("is empty")
    return value


JudgeModel = Annotated[str, AfterValidator(_not_blank)]
"""A litellm model name: not empty (an unset template variable gives "")."""


def _host(value: str) -> str:
    if not value.strip():
        raise _fail("is empty (127.0.0.1 serves this machine only, 0.0.0.0 every interface)")
    if "://" in value or "/" in value:
        raise _fail("is a host name or an IP address, not a URL (e.g. 0.0.0.0)")
    return value


ReceiverHost = Annotated[str, AfterValidator(_host)]


def _http_url(value: str) -> str:
    parts = urlsplit(value.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise _fail("expected an http:// or https:// URL with a host, e.g. http://collector:4318")
    try:
        parts.port  # noqa: B018  # raises on a port that is not a number or out of range
    except ValueError:
        raise _fail("the URL's port is not a number from 0 to 65535") from None
    return value


HttpUrl = Annotated[str, AfterValidator(_http_url)]
"""An http(s) URL with a host: ``"not a url"`` and ``"localhost:4318"`` are refused."""


# ------------------------------------------------------------------------------ the store
_STORE_SCHEMES = ("sqlite", "postgresql", "postgres", "postgresql+psycopg")
# a libpq "key=value ..." string: open_store would take it for a SQLite file name
_CONNINFO = re.compile(r"\b(host|dbname|user|port|password|sslmode)\s*=", re.IGNORECASE)


def _store_url(value: str) -> str:
    url = value.strip()
    if not url:
        raise _fail("is empty (e.g. sqlite:///./spanjudge.db or postgresql://user@host/db)")
    if "://" in url:
        scheme = url.split("://", 1)[0].lower()
        if scheme not in _STORE_SCHEMES:
            raise _fail(
                "unsupported scheme {scheme}: use sqlite:///path/to/file.db or "
                "postgresql://user@host/db",
                scheme=repr(scheme[:20]),
            )
    elif _CONNINFO.search(url):
        raise _fail("looks like a libpq key=value string: write it as postgresql://user@host/db")
    return value


StoreUrl = Annotated[str, AfterValidator(_store_url)]


def is_postgres_url(url: str) -> bool:
    """Whether a store URL names a PostgreSQL store (else it is SQLite)."""
    return url.strip().lower().startswith(("postgresql://", "postgres://", "postgresql+"))


def _schema_needs_postgres(value: str, info: ValidationInfo) -> str:
    url = info.data.get("store_url")
    if url is not None and not is_postgres_url(url):
        raise _fail("only a PostgreSQL store_url has schemas (remove it for SQLite)")
    if not value.strip():
        raise _fail("is empty (remove it to use PostgreSQL's search_path)")
    return value


StoreSchema = Annotated[str, AfterValidator(_schema_needs_postgres)]
"""A PostgreSQL schema name; set with a SQLite ``store_url`` it is an error, not ignored."""


# ------------------------------------------------------------------------------ judge_options
# keys with a setting of their own: given in judge_options they would clash with it
_OWN_SETTING = {
    "model": "judge_model",
    "timeout": "judge_timeout",
    "max_concurrency": "judge_max_concurrency",
    "structured_output": "judge_structured_output",
    "api_key_env": "judge_api_key_env",
}
# keyword arguments litellm.completion takes for every provider (OpenAI's chat parameters and
# litellm's own). Others are provider-specific (vertex_project, aws_region_name...) and pass
# through with a warning at start; a near miss of one of these is a typo and an error.
COMMON_LITELLM_OPTIONS = frozenset(
    {
        "api_base", "base_url", "api_key", "api_version", "organization", "deployment_id",
        "extra_headers", "extra_body", "default_headers", "custom_llm_provider", "drop_params",
        "temperature", "top_p", "n", "stop", "max_tokens", "max_completion_tokens",
        "presence_penalty", "frequency_penalty", "logit_bias", "user", "seed", "logprobs",
        "top_logprobs", "reasoning_effort", "thinking", "service_tier", "verbosity",
        "parallel_tool_calls", "metadata", "num_retries", "mock_response",
    }
)  # fmt: skip


def _judge_parameters() -> frozenset[str]:
    from spanjudge.evaluators._judge.judges.litellm_judge import LiteLLMJudge

    params = inspect.signature(LiteLLMJudge).parameters.values()
    return frozenset(p.name for p in params if p.kind is p.KEYWORD_ONLY)


def known_judge_options() -> frozenset[str]:
    """The option names judge_options takes without a warning."""
    return (COMMON_LITELLM_OPTIONS | _judge_parameters()) - set(_OWN_SETTING)


def _judge_options(options: dict[str, Any]) -> dict[str, Any]:
    known = known_judge_options()
    for key in options:
        if key in _OWN_SETTING:
            raise _fail(
                "{key} has a setting of its own: set {setting} instead",
                key=repr(key),
                setting=_OWN_SETTING[key],
            )
        if key not in known:
            near = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.8)
            if near:
                raise _fail(
                    "unknown option {key} (did you mean {near}?)",
                    key=repr(key[:40]),
                    near=repr(near[0]),
                )
    return options


JudgeOptions = Annotated[dict[str, Any], AfterValidator(_judge_options)]
"""More keyword arguments of the judge; a misspelt common option (``temprature``) is refused."""


def unknown_judge_options(options: dict[str, Any]) -> list[str]:
    """The keys of ``options`` spanjudge does not know (provider-specific, or a typo too far from
    any known option to be caught), which the worker warns about at start."""
    known = known_judge_options()
    return sorted(key for key in options if key not in known)


# ------------------------------------------------------------------------------ reporting
def _env_note(line: str) -> str:
    """`` (from SPANJUDGE_X)`` when the line's top-level key is set in the environment, which
    wins over the file: the operator then knows where to look."""
    top = line.split(":", 1)[0].split(".", 1)[0].strip()
    variable = ENV_PREFIX + top.upper()
    return f" (from {variable})" if top and variable in os.environ else ""


def format_validation_error(exc: ValidationError, source: str) -> str:
    """What is wrong, naming each bad key: one line for one error, else a heading naming the
    source and one ``key: what is wrong`` line per bad key."""
    lines = [line + _env_note(line) for line in error_lines(exc)]
    if len(lines) == 1:
        return f"invalid worker configuration ({source}): {lines[0]}"
    return "\n".join([f"invalid worker configuration ({source}):"] + [f"  {x}" for x in lines])


def environment_error(exc: SettingsError) -> ConfigError:
    """A ``SPANJUDGE_*`` variable pydantic-settings could not parse (lists and tables come from
    the environment as JSON), as a ConfigError naming the variable."""
    found = re.search(r'field "(\w+)"', str(exc))
    if found is None:
        return ConfigError(f"invalid worker configuration (environment): {exc}")
    variable = ENV_PREFIX + found.group(1).upper()
    return ConfigError(
        f"{variable}: not valid JSON (lists and tables come from the environment as JSON, "
        f"e.g. {ENV_PREFIX}OUTPUTS='[\"span\"]')"
    )
