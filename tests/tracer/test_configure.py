"""configure(): adds to the app's provider, adds nothing twice, and really exports OTLP/HTTP."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from opentelemetry import trace
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import spanjudge
from spanjudge import configure, observe
from spanjudge.tracer import _capture as capture
from tests.support.otlp_sink import OtlpSink
from tests.tracer.conftest import Spans

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env={**clean, **env},
        check=False,
    )


def test_configure_adds_to_the_existing_provider_once(spans: Spans) -> None:
    extra = InMemorySpanExporter()
    processor = SimpleSpanProcessor(extra)
    first = configure(export_otlp=False, span_processors=[processor])
    second = configure(export_otlp=False, span_processors=[processor])
    try:
        assert first.provider is spans.provider is trace.get_tracer_provider()
        assert first.processors == second.processors == [processor]
        assert not first.owns_provider

        @observe(kind="tool")
        def tool() -> int:
            return 1

        tool()
        assert [s.name for s in extra.get_finished_spans()] == ["execute_tool tool"]
        assert len(spans.all()) == 1  # the app's own processor still gets it too
    finally:
        first.shutdown()
    tool()
    assert len(extra.get_finished_spans()) == 1  # shut down: spanjudge's processor only
    assert len(spans.all()) == 2


def test_configure_sets_the_capture_policy(spans: Spans) -> None:
    configure(export_otlp=False, capture_content=False, max_value_length=99, pii=True)
    assert capture.POLICY.content is False
    assert capture.POLICY.max_value_length == 99
    assert capture.POLICY.pii is True


def test_end_to_end_over_real_otlp_http(spans: Spans) -> None:
    with OtlpSink() as sink:
        tracing = configure(otlp_endpoint=sink.endpoint)
        again = configure(otlp_endpoint=sink.endpoint)
        assert again.processors == tracing.processors
        try:

            @observe(kind="retriever")
            def search(query: str) -> list[dict[str, object]]:
                return [{"id": "d1", "score": 0.5, "content": "Refunds in 5 days."}]

            @observe(kind="agent", name="bot")
            def agent(question: str) -> str:
                search(question)
                return "5 days"

            agent("refund time?")
            assert tracing.force_flush()
            received = sink.wait_for(lambda s: len(s) >= 2)
        finally:
            tracing.shutdown()
    assert len(received) == 2  # configured twice, exported once
    by_name = {s.name: s for s in received}
    root, child = by_name["invoke_agent bot"], by_name["retrieval search"]
    assert child.parent_span_id == root.span_id
    assert root.attributes["gen_ai.agent.name"] == "bot"
    assert child.attributes["gen_ai.retrieval.query.text"] == "refund time?"
    assert child.attributes["spanjudge.retrieval.documents.content"] == '["Refunds in 5 days."]'


def test_configure_in_a_fresh_process_uses_standard_env_variables() -> None:
    with OtlpSink() as sink:
        result = _run(
            """
            import spanjudge
            from opentelemetry import trace
            tracing = spanjudge.configure()
            assert trace.get_tracer_provider() is tracing.provider and tracing.owns_provider
            again = spanjudge.configure()
            assert again.processors == tracing.processors and again.owns_provider

            @spanjudge.observe(kind="llm", model="m")
            def call(prompt):
                return "ok"

            call("hi")
            tracing.shutdown()
            """,
            OTEL_SERVICE_NAME="env-service",
            OTEL_EXPORTER_OTLP_ENDPOINT=sink.endpoint,
            OTEL_EXPORTER_OTLP_HEADERS="x-team=blue",
        )
        assert result.returncode == 0, result.stderr
        (span,) = sink.wait_for(lambda s: len(s) >= 1)
    assert span.name == "chat m"
    assert span.resource["service.name"] == "env-service"


def test_without_any_sdk_every_shape_still_works() -> None:
    result = _run(
        """
        import asyncio
        from spanjudge import observe, current_span

        @observe(kind="llm")
        def f(x):
            current_span().set_usage(1, 2)
            return x + 1

        @observe
        def g():
            got = yield 1
            yield got

        @observe
        async def a():
            return 5

        @observe
        async def ag():
            got = yield 1
            yield got

        async def main():
            agen = ag()
            assert await agen.__anext__() == 1
            assert await agen.asend(7) == 7
            return await a()

        gen = g()
        assert next(gen) == 1 and gen.send(3) == 3
        assert f(1) == 2
        assert asyncio.run(main()) == 5
        print("ok")
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_import_spanjudge_is_light_and_exports_the_tracer() -> None:
    result = _run(
        """
        import sys, spanjudge
        heavy = [m for m in ("litellm", "opentelemetry.sdk", "opentelemetry.exporter",
                             "google.protobuf", "requests", "pydantic") if m in sys.modules]
        print(",".join(heavy))
        print(callable(spanjudge.configure), spanjudge.observe.__module__)
        """
    )
    assert result.returncode == 0, result.stderr
    heavy, exported = result.stdout.split("\n")[:2]
    assert heavy == ""
    assert exported == "True spanjudge.tracer._observe"
    assert {"observe", "conversation", "current_span", "configure"} <= set(spanjudge.__all__)


def test_example_script_prints_the_captured_spans() -> None:
    result = subprocess.run(
        [sys.executable, os.path.join(ROOT, "examples", "capture_spans.py")],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    for name in (
        "retrieval search",
        "execute_tool lookup_order",
        "chat openai/gpt-4o-mini",
        "invoke_agent support",
    ):
        assert name in result.stdout
    assert "gen_ai.usage.input_tokens = 42" in result.stdout


def test_spans_carry_the_package_version_and_the_tracer_imports_nothing_above_it(
    spans: Spans,
) -> None:
    import ast
    import pathlib

    @observe(kind="tool")
    def lookup(order_id: str) -> str:
        return order_id

    lookup("o-1")
    scope = spans.named("execute_tool lookup").instrumentation_scope
    assert scope is not None
    assert (scope.name, scope.version) == ("spanjudge", spanjudge.__version__)
    # The layers run tracer < exporters < evaluators < spanjudge: the tracer reaches no higher.
    upward = []
    for path in pathlib.Path(ROOT, "tracer").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            upward += [f"{path.name}: {n}" for n in names if n.split(".")[0] == "spanjudge"]
    assert any("spanjudge.tracer._decoration_plan" in u for u in upward)  # the scan sees imports
    # ...but for the exception tree (stdlib only), the bottom layer every layer raises from
    allowed = ("spanjudge.tracer", "spanjudge.errors")
    assert [u for u in upward if not u.split(": ")[1].startswith(allowed)] == []
