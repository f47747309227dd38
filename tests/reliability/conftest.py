"""Fixtures for the reliability tests: spans of ``@observe`` routed to a processor the test
chooses, a controllable clock, a canned judge, an OTLP sink, telemetry on a Prometheus
registry, and a PostgreSQL schema per test.

The loop fixtures (tests/evaluators/loop/conftest.py) are reused where they fit (Clock); the span
route is our own so that a test can give the store exporter its own queue bound and hooks.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import pytest
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from prometheus_client import CollectorRegistry

from spanjudge._core.telemetry import Telemetry, prometheus_meter_provider
from spanjudge.errors import StoreError
from spanjudge.testing import ScriptedJudgeServer
from tests.reliability.probes import NO_OPINIONS
from tests.support.clock import Clock
from tests.support.otlp_sink import OtlpSink
from tests.support.span_switch import SpanSwitch, install
from tests.support.stores import POSTGRES_URL, open_postgres, schema_name

_ROUTE = SpanSwitch()


@pytest.fixture(scope="session")
def _tracer_provider() -> TracerProvider:
    return install(_ROUTE)


@pytest.fixture
def route_spans(_tracer_provider: TracerProvider) -> Iterator[Callable[[SpanProcessor], None]]:
    """``route_spans(processor)``: spans of the app's ``@observe`` calls go there."""

    def install(processor: SpanProcessor) -> None:
        _ROUTE.target = processor

    yield install
    _ROUTE.target = None


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def healthy_judge_server() -> Iterator[ScriptedJudgeServer]:
    with ScriptedJudgeServer() as server:
        server.add_rule(NO_OPINIONS, schema="Opinions")
        yield server


@pytest.fixture
def sink() -> Iterator[OtlpSink]:
    with OtlpSink() as s:
        yield s


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture
def telemetry(registry: CollectorRegistry) -> Telemetry:
    return Telemetry(prometheus_meter_provider(registry))


@pytest.fixture
def pg_schema() -> Iterator[tuple[str, str]]:
    """(url, schema): a fresh PostgreSQL schema for this test, dropped afterwards."""
    schema = schema_name("spanjudge_rel")
    probe = open_postgres(schema)  # fails clearly when PostgreSQL is unreachable
    yield POSTGRES_URL, schema
    with contextlib.suppress(StoreError):
        probe.drop_schema()
    probe.close()
