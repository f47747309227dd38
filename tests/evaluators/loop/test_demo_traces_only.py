"""``spanjudge demo --otlp-endpoint`` says which forms landed, and a backend that takes traces
only (Jaeger, Tempo, Phoenix) is a success when the spans landed (issue 30 item 10: the demo
printed "failed: evaluation results not delivered" and exited 1 though all 17 spans landed)."""

from __future__ import annotations

from tests.evaluators.loop.test_demo_and_scheduler import run_demo
from tests.support.otlp_sink import OtlpSink


def test_the_demo_against_a_traces_only_backend_exits_0_and_says_what_landed() -> None:
    with OtlpSink(traces_only=True, logs_status=405) as sink:
        out = run_demo("--otlp-endpoint", sink.endpoint)
        spans = sink.wait_for(lambda s: sum(x.name.startswith("evaluation ") for x in s) == 21)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    text = " ".join(out.stdout.split())  # rich wraps long lines
    assert f"evaluation spans: 21 of 21 accepted at {sink.endpoint}/v1/traces" in text
    assert f"events: 0 of 21: {sink.endpoint}/v1/logs answered HTTP 405" in text
    assert "failed:" not in text  # the table's reasons may say a tool call failed
    assert sink.refused_log_requests == 1
    # the evaluation spans sit inside their traces' own time windows (issue 30 item 12)
    app = [s for s in spans if not s.name.startswith("evaluation ")]
    for evaluation in (s for s in spans if s.name.startswith("evaluation ")):
        trace = [s for s in app if s.trace_id == evaluation.trace_id]
        assert min(s.start_time_unix_nano for s in trace) <= evaluation.start_time_unix_nano
        assert evaluation.end_time_unix_nano <= max(s.end_time_unix_nano for s in trace)


def test_the_demo_fails_when_a_logs_endpoint_that_takes_logs_fails() -> None:
    with OtlpSink(logs_status=500) as sink:  # a logs backend, broken: not a traces-only one
        out = run_demo("--otlp-endpoint", sink.endpoint)
    assert out.returncode == 1, out.stdout[-3000:]
    text = " ".join(out.stdout.split())
    assert "evaluation spans: 21 of 21 accepted" in text
    assert "failed: evaluation events not delivered" in text
