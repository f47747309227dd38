"""Result sinks: each result written as the product's own annotation, beside the OTLP outputs.

The OTLP outputs (:mod:`spanjudge.exporters._emit`) put a result into the trace as an
evaluation span and an event, which every backend stores but no LLM-observability UI reads as a
score. A sink writes the same result through the product's own HTTP API, so its score chips,
list columns and filters show it:

* ``"phoenix"`` (:mod:`.phoenix`): a span annotation on the judged span (llm and agent
  targets), a trace annotation on the judged trace (trace and conversation targets), and a
  session annotation where Phoenix knows the conversation as a session;
* ``"mlflow"`` (:mod:`.mlflow`): feedback assessments on the MLflow trace the OTLP trace became.

A sink is an output of the score emitter like ``span`` and ``event``: a bounded queue and a
writer thread (:class:`~spanjudge.exporters._emit.channel.Channel`), confirmed per result,
delivered again after a crash (:mod:`spanjudge.exporters._delivery`). Every write is idempotent
(Phoenix: an upsert by the result's id; MLflow: a lookup before the write), so a result sent
twice is one annotation. What the product refuses for good (a bad key, a trace it never got, a
request it cannot read) is settled: one WARNING per reason and the emitter's
``spanjudge_emitter_dropped_spans_total{reason="refused"}`` counter, never a stuck backlog.

Example::

    sink = PhoenixSink("http://phoenix:6006")
    emitter = ScoreEmitter(outputs=["span", "phoenix"], sinks={"phoenix": sink})
"""

from __future__ import annotations

from spanjudge.exporters._sinks.base import (
    REFUSED,
    UNKNOWN_TARGET_GRACE_SECONDS,
    ResultSink,
    SinkItem,
)
from spanjudge.exporters._sinks.mlflow import MlflowSink
from spanjudge.exporters._sinks.phoenix import PhoenixSink
from spanjudge.exporters._sinks.settings import sink_from_environment, sinks_from_settings

__all__ = [
    "REFUSED",
    "UNKNOWN_TARGET_GRACE_SECONDS",
    "MlflowSink",
    "PhoenixSink",
    "ResultSink",
    "SinkItem",
    "sink_from_environment",
    "sinks_from_settings",
]
