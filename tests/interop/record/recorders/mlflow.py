"""Record the scenario traced by MLflow 3 tracing, exported over OTLP (no tracking server).

``mlflow.openai.autolog()`` traces the chat completion; ``@mlflow.trace`` makes the agent turn
(``span_type="AGENT"``) and the retrieval (``span_type="RETRIEVER"``, returning MLflow's
``Document`` objects: ``page_content``, ``metadata``, ``id``). The session and user go the
documented way, ``mlflow.update_current_trace(session_id=..., user=...)``: trace metadata.

MLflow exports to an OTLP collector when ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is set (its
``OtelSpanProcessor`` then replaces the tracking-server export); the protocol is
``http/protobuf`` by ``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL``. Two recordings:

* ``mlflow``: MLflow's default attributes (``mlflow.spanType``, ``mlflow.spanInputs``,
  ``mlflow.spanOutputs``, ``mlflow.chat.tokenUsage``, ...);
* ``mlflow-semconv``: ``MLFLOW_ENABLE_OTEL_GENAI_SEMCONV=true``, the spans translated to the
  GenAI semantic conventions before export.
"""

from __future__ import annotations

import os
import tempfile

import harness
import scenario

MODES = {
    "mlflow": harness.Mode(content_capture="on (MLflow default: inputs and outputs recorded)"),
    "mlflow-semconv": harness.Mode(
        content_capture="on (MLflow default), MLFLOW_ENABLE_OTEL_GENAI_SEMCONV=true",
        env={"MLFLOW_ENABLE_OTEL_GENAI_SEMCONV": "true"},
    ),
}


def record(rec: harness.Recording) -> None:
    # MLflow builds its tracer provider on the first span, from these variables.
    os.environ["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] = rec.traces_url
    os.environ["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"] = "http/protobuf"
    os.environ["OTEL_SERVICE_NAME"] = "interop-mlflow"
    # autolog looks up an experiment; keep that store out of the repository
    os.environ.setdefault("MLFLOW_TRACKING_URI", f"sqlite:///{tempfile.mkdtemp()}/mlflow.db")

    import mlflow
    from mlflow.entities import Document
    from openai import OpenAI

    mlflow.openai.autolog()
    client = OpenAI(base_url=rec.openai_base_url, api_key="sk-interop-fake")

    @mlflow.trace(name="retrieve", span_type="RETRIEVER")
    def retrieve(query: str) -> list[Document]:
        turn = scenario.turn_for_question(query)
        assert turn is not None
        return [
            Document(page_content=d.text, metadata={"score": d.score}, id=d.id)
            for d in turn.documents()
        ]

    @mlflow.trace(name=scenario.AGENT_NAME, span_type="AGENT")
    def support_agent(question: str) -> str:
        turn = scenario.turn_for_question(question)
        assert turn is not None
        mlflow.update_current_trace(session_id=turn.session_id, user=scenario.USER_ID)
        docs = retrieve(question)
        assert "\n".join(d.page_content for d in docs) == turn.context
        completion = client.chat.completions.create(
            model=scenario.MODEL,
            messages=turn.messages(),  # type: ignore[arg-type]
        )
        return completion.choices[0].message.content or ""

    outputs = [support_agent(turn.question) for turn in scenario.TURNS]
    mlflow.flush_trace_async_logging()
    from mlflow.tracing.provider import provider as mlflow_provider

    tracer_provider = mlflow_provider.get()
    tracer_provider.force_flush()
    tracer_provider.shutdown()
    if outputs != [t.answer for t in scenario.TURNS]:
        raise SystemExit(f"unexpected outputs: {outputs}")
    rec.note(
        "agent turn and retrieval are @mlflow.trace spans (span_type AGENT / RETRIEVER, the"
        " retriever returning mlflow.entities.Document); the chat call is mlflow.openai.autolog()"
    )
    rec.note(
        "session and user via mlflow.update_current_trace(session_id=..., user=...): trace"
        " metadata (mlflow.trace.session), which MLflow's OTLP span processor does not write on"
        " any span"
    )


if __name__ == "__main__":
    harness.main("mlflow", MODES, record)
