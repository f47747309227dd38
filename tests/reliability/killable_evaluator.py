"""A monitor in its own process that stops dead at a named point, for the SIGKILL tests.

argv: STORE_URL SINK_ENDPOINT CLOCK_OFFSET POINT MARKER. The monitor sends both outputs to the
sink (evaluation spans to ``/v1/traces``, ``gen_ai.evaluation.result`` events to ``/v1/logs``).
At POINT the process writes MARKER and sleeps; the parent SIGKILLs it there. Points:

- ``before_claim``: planned, about to claim its first jobs;
- ``mid_judge``: a judge call in flight;
- ``after_complete``: a result stored (``complete_job``), not emitted yet;
- ``mid_emit``: evaluation spans and events exported, neither output marked emitted
  (``mark_emitted``);
- ``span_marked``: both exported, the span output marked, the event output not yet;
- ``event_marked``: both exported, the event output marked, the span output not yet.

The judge is in-process and canned (no HTTP, no litellm import: a child starts in a fraction of
a second); the judge faults themselves are covered through litellm elsewhere.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from pydantic import BaseModel

from spanjudge._store import open_store
from spanjudge.evaluators._judge.judges.base import Judge, Messages, Usage
from spanjudge.evaluators._judge.metrics.bias import BiasMetric
from spanjudge.evaluators._loop.config import MonitorConfig
from spanjudge.evaluators._loop.monitor import Monitor
from spanjudge.evaluators._plan.rules import Rule
from spanjudge.exporters._emit.emitter import ScoreEmitter

POINTS = ("before_claim", "mid_judge", "after_complete", "mid_emit", "span_marked", "event_marked")
# The output a point lets ``mark_emitted`` record before the process dies (None: neither).
MARKED_AT = {"mid_emit": None, "span_marked": "span", "event_marked": "event"}
LEASE = 30.0


class CannedJudge(Judge):
    """Finds no opinion in any answer (Bias 0.0, one call per target); counts its calls."""

    model_name = "canned-judge"

    def _complete(self, messages: Messages, schema: type[BaseModel]) -> tuple[str, Usage]:
        return json.dumps({"opinions": []}), Usage(calls=1)

    async def _a_complete(self, messages: Messages, schema: type[BaseModel]) -> tuple[str, Usage]:
        return self._complete(messages, schema)


def make_monitor(store: Any, sink_endpoint: str, clock: Any, judge: Judge) -> Monitor:
    emitter = ScoreEmitter(
        outputs=["span", "event"],
        span_exporter=OTLPSpanExporter(endpoint=f"{sink_endpoint}/v1/traces", timeout=5),
        log_exporter=OTLPLogExporter(endpoint=f"{sink_endpoint}/v1/logs", timeout=5),
    )
    return Monitor(
        [Rule(BiasMetric(model=judge), target="agent")],
        store=store,
        emitter=emitter,
        clock=clock,
        config=MonitorConfig(settle_seconds=10, lease_seconds=LEASE, retention_seconds=None),
    )


def main() -> None:
    store_url, sink_endpoint, offset, point, marker = sys.argv[1:6]
    if point not in POINTS:
        raise SystemExit(f"unknown point {point!r}")

    def stop_here() -> None:
        Path(marker).write_text(point)
        time.sleep(3600)  # the parent kills us here

    judge = CannedJudge()
    store = open_store(store_url)
    if point == "before_claim":
        claim = store.claim_jobs
        store.claim_jobs = lambda **kw: (stop_here(), claim(**kw))[1]  # type: ignore[method-assign]
    elif point == "mid_judge":

        async def hang(messages: Messages, schema: type[BaseModel]) -> tuple[str, Usage]:
            stop_here()
            raise AssertionError("not reached")

        judge._a_complete = hang  # type: ignore[method-assign]
    elif point == "after_complete":
        complete = store.complete_job

        def complete_then_stop(job_id: int, **kw: Any) -> bool:
            done = complete(job_id, **kw)
            stop_here()
            return done

        store.complete_job = complete_then_stop  # type: ignore[method-assign]
    else:
        mark, keep = store.mark_emitted, MARKED_AT[point]

        def mark_then_stop(job_ids: Any, *, now: float, output: str = "span") -> None:
            # Delivery marks the outputs one after the other, in the order they confirmed:
            # the other output's mark is dropped, as if the process died before making it.
            if output == keep:
                mark(job_ids, now=now, output=output)
                stop_here()
            elif keep is None:
                stop_here()

        store.mark_emitted = mark_then_stop  # type: ignore[method-assign]

    monitor = make_monitor(store, sink_endpoint, lambda: time.time() + float(offset), judge)
    monitor.tick()
    raise SystemExit(f"the point {point} was never reached")


if __name__ == "__main__":
    main()
