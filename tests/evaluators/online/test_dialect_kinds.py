"""``kind_of`` (the cheap path the receiver uses in enrich mode) agrees with the full reading on
every span of every recorded library, and never parses what it does not need."""

from __future__ import annotations

from pathlib import Path

import pytest

from spanjudge._core.span_record import SpanRecord
from spanjudge._receive.decode import PROTOBUF, decode_traces
from spanjudge.evaluators._rebuild.dialects import kind_of, read_span
from spanjudge.evaluators._rebuild.scope import SpanTree

FIXTURES = Path(__file__).parents[2] / "interop" / "fixtures"
RECORDINGS = sorted(p.name for p in FIXTURES.iterdir() if (p / "manifest.json").exists())


def _spans(recording: str) -> list[SpanRecord]:
    spans: list[SpanRecord] = []
    for body in sorted((FIXTURES / recording).glob("*-traces.pb")):
        spans.extend(decode_traces(body.read_bytes(), PROTOBUF))
    return spans


def test_recordings_are_there() -> None:
    assert len(RECORDINGS) >= 10


@pytest.mark.parametrize("recording", RECORDINGS)
def test_kind_of_agrees_with_the_full_reading(recording: str) -> None:
    spans = _spans(recording)
    assert spans
    fresh = [kind_of(s) for s in spans]  # before any view is cached
    assert fresh == [read_span(s).kind for s in spans]
    assert "llm" in fresh, fresh
    # a turn in every trace: marked by the library, or inferred from the tree (issue 27)
    tree = SpanTree(spans)
    for trace_id in {s.trace_id for s in spans}:
        assert any(tree.kind(s) == "agent" for s in spans if s.trace_id == trace_id), trace_id
