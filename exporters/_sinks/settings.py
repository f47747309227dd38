"""Which URL and key each sink uses: the worker's settings first, then the product's own
environment variables, then the worker's ``downstream_endpoint`` (Phoenix and MLflow take OTLP
on the same base URL as their API).

=========  =====================  ==========================  ===================================
sink       URL setting            then                        key
=========  =====================  ==========================  ===================================
phoenix    ``phoenix_endpoint``   ``PHOENIX_COLLECTOR_        the variable ``phoenix_api_key_env``
                                  ENDPOINT``, downstream      names (``PHOENIX_API_KEY``)
mlflow     ``mlflow_endpoint``    ``MLFLOW_TRACKING_URI``,    the variable ``mlflow_token_env``
                                  downstream                  names (``MLFLOW_TRACKING_TOKEN``);
                                                              ``MLFLOW_TRACKING_USERNAME`` and
                                                              ``_PASSWORD`` for basic auth
=========  =====================  ==========================  ===================================

Example::

    sinks = sinks_from_settings(settings, ["span", "phoenix"])   # {"phoenix": PhoenixSink(...)}
"""

from __future__ import annotations

import logging
import os
from collections.abc import Collection
from typing import Any

from spanjudge._core.kinds import SINKS
from spanjudge.errors import ConfigError
from spanjudge.exporters._sinks.base import HttpSink
from spanjudge.exporters._sinks.mlflow import MlflowSink
from spanjudge.exporters._sinks.phoenix import PhoenixSink

__all__ = ["sink_from_environment", "sinks_from_settings"]

# the products' own variables for their URL, and the suffixes an OTLP URL may carry
URL_VARIABLES = {"phoenix": "PHOENIX_COLLECTOR_ENDPOINT", "mlflow": "MLFLOW_TRACKING_URI"}
KEY_VARIABLES = {"phoenix": "PHOENIX_API_KEY", "mlflow": "MLFLOW_TRACKING_TOKEN"}
PRODUCTS = {"phoenix": "Phoenix", "mlflow": "MLflow"}
OTLP_SUFFIXES = ("/v1/traces", "/v1/logs")
HTTPX_LOG = logging.getLogger("httpx")


def _base(url: str) -> str:
    url = url.rstrip("/")
    for suffix in OTLP_SUFFIXES:
        url = url.removesuffix(suffix)
    return url


def _endpoint(name: str, configured: str | None, downstream: str | None) -> str:
    for candidate in (configured, os.environ.get(URL_VARIABLES[name]), downstream):
        if candidate and candidate.startswith(("http://", "https://")):
            return _base(candidate)
    raise ConfigError(
        f"{name}_endpoint: the {name} output needs the URL of {PRODUCTS[name]}: set"
        f" {name}_endpoint (or {URL_VARIABLES[name]}, or downstream_endpoint)"
    )


def _sink(name: str, endpoint: str, key_variable: str, timeout: float | None) -> HttpSink:
    key = os.environ.get(key_variable) or None
    extra: dict[str, Any] = {} if timeout is None else {"timeout": timeout}
    if name == "phoenix":
        return PhoenixSink(endpoint, api_key=key, **extra)
    user, password = (os.environ.get(f"MLFLOW_TRACKING_{p}") for p in ("USERNAME", "PASSWORD"))
    auth = (user, password) if user and password else None
    return MlflowSink(endpoint, token=key, auth=auth, **extra)


def sink_from_environment(name: str) -> HttpSink:
    """The sink ``name`` from the product's own variables alone (``spanjudge.monitor()`` and a
    :class:`~spanjudge.exporters._emit.emitter.ScoreEmitter` given no sink)."""
    if name not in SINKS:
        raise ConfigError(f"unknown sink {name!r}; known: {', '.join(SINKS)}")
    return _sink(name, _endpoint(name, None, None), KEY_VARIABLES[name], None)


def sinks_from_settings(settings: Any, outputs: Collection[str]) -> dict[str, HttpSink]:
    """The sinks ``outputs`` names, from the worker's settings (module docstring)."""
    out: dict[str, HttpSink] = {}
    if any(name in outputs for name in SINKS) and not HTTPX_LOG.level:
        # httpx says every request at INFO: one line per annotation would flood the worker's
        # log, which has its own lines only at the default level (docs/worker.md, Logs)
        HTTPX_LOG.setLevel(logging.WARNING)
    downstream = getattr(settings, "downstream_endpoint", None)
    for name in SINKS:
        if name not in outputs:
            continue
        endpoint = _endpoint(name, getattr(settings, f"{name}_endpoint", None), downstream)
        key_variable = {"phoenix": "phoenix_api_key_env", "mlflow": "mlflow_token_env"}[name]
        variable = getattr(settings, key_variable, None) or KEY_VARIABLES[name]
        out[name] = _sink(name, endpoint, variable, None)
    return out
