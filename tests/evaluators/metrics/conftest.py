"""Metric-test helpers: every judge call goes through litellm to the scripted loopback server.

The ``judge_server`` / ``scripted_judge`` fixtures come from tests/evaluators/conftest.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from spanjudge.evaluators._judge.metrics.faithfulness import truth_cache


@pytest.fixture(autouse=True)
def _fresh_truth_cache() -> Iterator[None]:
    # the cache is process-wide by design; tests must not see each other's truths
    truth_cache.clear()
    yield
    truth_cache.clear()


def schema_names(server: Any) -> list[str | None]:
    """Schema name of every request the server received, in order."""
    return [_field(r, "schema_name") for r in server.requests]


def prompts_for(server: Any, schema: str) -> list[str]:
    return [str(_field(r, "prompt")) for r in server.requests if _field(r, "schema_name") == schema]


def _field(request: Any, name: str) -> Any:
    return request[name] if isinstance(request, dict) else getattr(request, name)
