"""deepeval-as-rules fixtures: the cache suite's loop (hand-built spans in a store, the real
Monitor, an OTLP sink) on SQLite, and a scripted judge answering deepeval 4.3.1's schemas.

What deepeval 4.3.1 sends through ``as_deepeval_model`` (recorded with the scripted server;
the server matches the pydantic class name of each request's JSON schema):

* AnswerRelevancyMetric: ``Statements`` -> ``Verdicts`` (one per statement) ->
  ``AnswerRelevancyScoreReason``;
* BiasMetric: ``Opinions`` -> ``Verdicts`` (only when there are opinions) -> ``BiasScoreReason``;
* TurnRelevancyMetric: ``TurnRelevancyVerdict`` once per assistant turn (a sliding window of
  the turns before it) -> ``TurnRelevancyScoreReason``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from spanjudge._store.sql import SpanStore
from spanjudge._store.sqlite import SQLiteStore
from tests.evaluators.cache.conftest import clock, loop, sink

__all__ = ["clock", "loop", "sink"]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SpanStore]:
    opened = SQLiteStore(tmp_path / "spans.db")
    yield opened
    opened.close()
