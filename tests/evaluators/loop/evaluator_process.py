"""A monitor in its own process, for the kill tests (argv: STORE JUDGE_URL SINK_URL OFFSET)."""

from __future__ import annotations

import sys
import time

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

from spanjudge.evaluators._judge.judges.litellm_judge import LiteLLMJudge
from spanjudge.evaluators._judge.metrics.bias import BiasMetric
from spanjudge.evaluators._judge.metrics.faithfulness import FaithfulnessMetric
from spanjudge.evaluators._loop.config import MonitorConfig
from spanjudge.evaluators._loop.monitor import Monitor
from spanjudge.evaluators._plan.rules import Rule
from spanjudge.exporters._emit.emitter import ScoreEmitter


def main() -> None:
    store_url, judge_url, sink_url, offset = (
        sys.argv[1],
        sys.argv[2],
        sys.argv[3],
        float(sys.argv[4]),
    )
    judge = LiteLLMJudge("openai/scripted-judge", api_base=judge_url, api_key="x", timeout=60)
    monitor = Monitor(
        [
            Rule(FaithfulnessMetric(model=judge), target="llm"),
            Rule(BiasMetric(model=judge), target="agent"),
        ],
        store=store_url,
        emitter=ScoreEmitter(span_exporter=OTLPSpanExporter(endpoint=sink_url)),
        clock=lambda: time.time() + offset,
        config=MonitorConfig(settle_seconds=10, lease_seconds=2, retention_seconds=None),
    )
    print("ready", flush=True)
    while True:
        monitor.tick()
        time.sleep(0.1)


if __name__ == "__main__":
    main()
