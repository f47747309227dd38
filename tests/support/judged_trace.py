"""One small app trace (an agent turn with its LLM call) and two results of the judge: a
failing faithfulness verdict on the LLM call and a passing bias verdict on the agent turn (the
trace's root, the row of a trace list), fresh ids each time: what the browser tests show in a
product's UI::

    trace = JudgedTrace.make("support-bot", project="browser")
    httpx.post(url + "/v1/traces", content=trace.request.SerializeToString(), ...)
    emitter.emit(trace.result)
    emitter.emit(trace.on_root)

or both at once, as the worker's emitter does: ``trace.deliver(url, "phoenix", sink)``.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

from spanjudge._core.span_record import EvaluationRecord

REASON = "the answer says refunds take 90 days; the policy it was given says 30"


@dataclass(frozen=True)
class JudgedTrace:
    request: Any  # ExportTraceServiceRequest
    trace_id: str
    llm_span_id: str
    result: EvaluationRecord  # faithfulness 0.4, fail, on the LLM call
    on_root: EvaluationRecord  # bias 0.1, pass, on the agent turn

    @classmethod
    def make(cls, service: str, *, project: str | None = None) -> JudgedTrace:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
        )
        from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

        def kv(key: str, value: str) -> Any:
            return KeyValue(key=key, value=AnyValue(string_value=value))

        trace_id, root_id, llm_id = os.urandom(16), os.urandom(8), os.urandom(8)
        end = time.time_ns()
        request = ExportTraceServiceRequest()
        resource_spans = request.resource_spans.add()
        resource_spans.resource.attributes.append(kv("service.name", service))
        if project:
            resource_spans.resource.attributes.append(kv("openinference.project.name", project))
        spans = resource_spans.scope_spans.add().spans
        root = spans.add(trace_id=trace_id, span_id=root_id, name="invoke_agent support")
        root.start_time_unix_nano, root.end_time_unix_nano = end - 3_000_000_000, end
        root.attributes.extend([kv("gen_ai.operation.name", "invoke_agent")])
        llm = spans.add(trace_id=trace_id, span_id=llm_id, parent_span_id=root_id)
        llm.name = "chat gpt-4o-mini"
        llm.start_time_unix_nano, llm.end_time_unix_nano = end - 2_500_000_000, end - 500_000_000
        llm.attributes.extend([kv("gen_ai.operation.name", "chat")])

        def verdict(span: Any, rule: str, metric: str, target: str, **fields: Any) -> Any:
            return EvaluationRecord(
                rule=rule,
                metric=metric,
                target_type=target,  # type: ignore[arg-type]
                target_id=span.span_id.hex(),
                trace_id=trace_id.hex(),
                span_id=span.span_id.hex(),
                judge_model="gpt-4o-mini",
                service_name=service,
                target_end_unix_nano=span.end_time_unix_nano,
                started_at=time.time() - 2,
                finished_at=time.time(),
                **fields,
            )

        result = verdict(
            llm, "faithfulness-llm", "faithfulness", "llm",
            score=0.4, label="fail", success=False, threshold=0.7, reason=REASON,
        )  # fmt: skip
        on_root = verdict(
            root, "bias-agent", "bias", "agent", score=0.1, label="pass", success=True,
            threshold=0.5, reason="no opinion about a group of people",
        )  # fmt: skip
        return cls(request, trace_id.hex(), llm_id.hex(), result, on_root)

    def deliver(self, url: str, name: str, sink: Any, **resource: str) -> None:
        """Both results out the way a worker sends them: the evaluation spans over OTLP to
        ``url`` (the resource the worker's, plus ``resource``; OTLP headers from the
        environment) and ``sink`` (the output ``name``), each confirmed by both."""
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource

        from spanjudge.exporters._emit.emitter import ScoreEmitter

        emitter = ScoreEmitter(
            outputs=["span", name],
            span_exporter=OTLPSpanExporter(endpoint=url + "/v1/traces"),
            resource=Resource({"service.name": "spanjudge-worker", **resource}),
            sinks={name: sink},
        )
        emitter.emit(self.result, key=1)
        emitter.emit(self.on_root, key=2)
        assert emitter.force_flush(30)
        confirmed = sorted(emitter.take_confirmed())
        emitter.shutdown()
        assert confirmed == sorted((key, out) for key in (1, 2) for out in ("span", name))
