"""A real ``spanjudge worker`` process: OTLP in, scores out as child evaluation spans."""

from __future__ import annotations

import base64
import gzip
import json
from pathlib import Path
from typing import Any

import httpx
from google.protobuf import json_format

from spanjudge._core import metric_names as mn
from spanjudge.testing import ScriptedJudgeServer
from spanjudge.tracer import _attributes as attrs
from tests.support.otlp_sink import OtlpSink
from tests.worker.conftest import base_config, count_spans, split_request


def _otlp_json(request: Any) -> str:
    """OTLP/JSON: like protobuf's JSON mapping but ids as hex, not base64."""
    data = json_format.MessageToDict(request)
    for rs in data.get("resourceSpans", []):
        for ss in rs.get("scopeSpans", []):
            for span in ss.get("spans", []):
                for key in ("traceId", "spanId", "parentSpanId"):
                    if span.get(key):
                        span[key] = base64.b64decode(span[key]).hex()
    return json.dumps(data)


def _evaluations(spans: list[Any]) -> list[Any]:
    return [s for s in spans if attrs.GEN_AI_EVALUATION_NAME in s.attributes]


def test_worker_scores_demo_traffic_as_child_spans(
    tmp_path: Path, demo_request: Any, offline_judge: ScriptedJudgeServer, start_worker: Any
) -> None:
    with OtlpSink() as sink:
        config = base_config(offline_judge, f"sqlite:///{tmp_path}/w.db", sink.endpoint)
        config["bearer_token"] = "s3cret"
        worker = start_worker(config)
        worker.wait_ready()
        assert httpx.get(worker.url + "/healthz").status_code == 200

        # no token / wrong token: refused, nothing stored
        assert worker.post(demo_request).status_code == 401
        assert worker.post(demo_request, Authorization="Bearer nope").status_code == 401

        # the traffic arrives in three encodings: protobuf, gzip protobuf and JSON
        parts = split_request(demo_request, 3)
        auth = {"Authorization": "Bearer s3cret"}
        assert worker.post(parts[0], **auth).status_code == 200
        gz = httpx.post(
            worker.url + "/v1/traces",
            content=gzip.compress(parts[1].SerializeToString()),
            headers={
                "Content-Type": "application/x-protobuf",
                "Content-Encoding": "gzip",
                **auth,
            },
        )
        assert gz.status_code == 200
        js = httpx.post(
            worker.url + "/v1/traces",
            content=_otlp_json(parts[2]),
            headers={"Content-Type": "application/json", **auth},
        )
        assert js.status_code == 200

        sent = {
            s.span_id.hex(): s
            for rs in demo_request.resource_spans
            for ss in rs.scope_spans
            for s in ss.spans
        }
        llm_ids = {
            sid
            for sid, s in sent.items()
            if any(
                kv.key == attrs.GEN_AI_OPERATION_NAME and kv.value.string_value == "chat"
                for kv in s.attributes
            )
        }
        assert llm_ids

        def done(spans: list[Any]) -> bool:
            names = {s.attributes[attrs.GEN_AI_EVALUATION_NAME] for s in _evaluations(spans)}
            faith = [s for s in _evaluations(spans) if s.parent_span_id in llm_ids]
            return len(faith) >= len(llm_ids) and len(names) >= 3

        spans = sink.wait_for(done, timeout=30)
        evaluations = _evaluations(spans)
        for ev in evaluations:
            # a child of a span that was sent, in the same trace
            assert ev.parent_span_id in sent
            assert sent[ev.parent_span_id].trace_id.hex() == ev.trace_id
            assert attrs.GEN_AI_EVALUATION_SCORE_VALUE in ev.attributes
            assert ev.resource.get("service.name") == "spanjudge-worker"
        # each LLM span scored once
        faith_parents = [ev.parent_span_id for ev in evaluations if ev.parent_span_id in llm_ids]
        assert sorted(faith_parents) == sorted(set(faith_parents))

        metrics = httpx.get(worker.url + "/metrics").text
        samples = [line for line in metrics.splitlines() if line and not line.startswith("#")]
        # Prometheus names: dots become underscores (counters get _total, histograms _bucket)
        for name in (
            mn.EVALUATION_SCORE,
            mn.EVALUATIONS,
            mn.JUDGE_CALLS,
            mn.JUDGE_TOKENS,
            mn.BACKLOG,
            mn.RECEIVER_REQUESTS,
            mn.RECEIVER_SPANS,
        ):
            prom = name.replace(".", "_")
            assert any(line.startswith(prom) for line in samples), (name, metrics[:3000])

        assert worker.terminate() == 0
        assert count_spans(demo_request) > 0


def test_worker_binds_loopback_by_default(
    tmp_path: Path, offline_judge: ScriptedJudgeServer, start_worker: Any
) -> None:
    with OtlpSink() as sink:
        worker = start_worker(
            base_config(offline_judge, f"sqlite:///{tmp_path}/w.db", sink.endpoint)
        )
        worker.wait_ready()
        assert "http://127.0.0.1:" in worker.log()
        assert worker.terminate() == 0
