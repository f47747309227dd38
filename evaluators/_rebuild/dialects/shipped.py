"""Readers shipped with the package: built-in dialects that are only attribute names and paths,
written as declared readers (:mod:`.declared`), so the built-in readings and a team's own are one
mechanism. A contributor adds a library of that kind here, as data, not as a dialect module.

They are read after the readers a team declares and before the dialect modules; what a shipped
reader leaves unset, the dialect that matches the span fills (the GenAI semconv, mostly).

* ``openlit`` (``openlit.init()``): GenAI semconv spans under the ``openlit`` scopes, read by
  the semconv dialect, except its retrieval spans, which list their documents (``id``,
  ``score``, ``text``) in ``gen_ai.output.messages`` and the query in
  ``gen_ai.retrieval.query.text``.
* ``mlflow-*`` (MLflow 3 tracing in its default mode, exported over OTLP): scope
  ``mlflow.tracing.provider``, every attribute value JSON-encoded (``mlflow.spanType`` is
  ``"AGENT"`` with the quotes), the span's inputs and outputs as JSON in ``mlflow.spanInputs`` /
  ``mlflow.spanOutputs``. A chat model call in the OpenAI format (``mlflow.openai.autolog()``)
  gives its messages and first choice; a retriever its ``Document`` list (``page_content``); an
  agent its output (its input is a function's arguments, named as the function's: the question
  comes from the model call under it). With ``MLFLOW_ENABLE_OTEL_GENAI_SEMCONV=true`` the spans
  carry no ``mlflow.spanType`` and the semconv dialect reads them. MLflow keeps the session in
  trace metadata, which its OTLP export does not write on a span: no conversation.
* ``langfuse-*`` (the Langfuse Python SDK v3, ``@observe(as_type=...)``): scope
  ``langfuse-sdk``, the observation's type in ``langfuse.observation.type``, its input and
  output as JSON (or plain text) in ``langfuse.observation.input`` / ``.output``; a decorated
  function's input is ``{"args": [...], "kwargs": {...}}`` (its first argument: the question, the
  query). ``update_current_trace(session_id=...)`` writes ``session.id`` on the span it is
  called in.
"""

from __future__ import annotations

from spanjudge.evaluators._rebuild.dialects.declared import FieldSource, Reader, ReaderMatch

MLFLOW_SCOPE = "mlflow.tracing.provider"
MLFLOW_TYPE = "mlflow.spanType"
MLFLOW_INPUTS = "mlflow.spanInputs"
MLFLOW_OUTPUTS = "mlflow.spanOutputs"

LANGFUSE_SCOPE = "langfuse-sdk"
LANGFUSE_INPUT = "langfuse.observation.input"
LANGFUSE_OUTPUT = "langfuse.observation.output"
FIRST_ARGUMENT = "$.args[0]"


def _langfuse(observation_type: str) -> ReaderMatch:
    return ReaderMatch(
        scope=LANGFUSE_SCOPE, attributes={"langfuse.observation.type": observation_type}
    )


def _mlflow(span_type: str, **attributes: str) -> ReaderMatch:
    """MLflow spans of one ``span_type`` (its attributes are JSON: the type is quoted)."""
    quoted: dict[str, str | int | float | bool] = {
        k: f'"{v}"' for k, v in {MLFLOW_TYPE: span_type, **attributes}.items()
    }
    return ReaderMatch(scope=MLFLOW_SCOPE, attributes=quoted)


READERS: tuple[Reader, ...] = (
    Reader(
        name="openlit",
        kind="retriever",
        match=ReaderMatch(scope="openlit*", attributes={"gen_ai.operation.name": "retrieval"}),
        input=FieldSource(attribute="gen_ai.retrieval.query.text"),
        context=FieldSource(attribute="gen_ai.output.messages"),
        output=FieldSource(attribute="gen_ai.output.messages", transforms=("join_documents",)),
    ),
    Reader(
        name="mlflow-chat",
        kind="llm",
        match=_mlflow("CHAT_MODEL", **{"mlflow.message.format": "openai"}),
        input=FieldSource(attribute=MLFLOW_INPUTS, path="$.messages"),
        output=FieldSource(attribute=MLFLOW_OUTPUTS, path="$.choices[0].message"),
    ),
    Reader(
        name="mlflow-retriever",
        kind="retriever",
        match=_mlflow("RETRIEVER"),
        context=FieldSource(attribute=MLFLOW_OUTPUTS, path="$[*].page_content"),
        output=FieldSource(
            attribute=MLFLOW_OUTPUTS, path="$[*].page_content", transforms=("join_documents",)
        ),
    ),
    Reader(
        name="mlflow-agent",
        kind="agent",
        match=_mlflow("AGENT"),
        output=FieldSource(attribute=MLFLOW_OUTPUTS, transforms=("parse_json",)),
    ),
    Reader(
        name="langfuse-generation",
        kind="llm",
        match=_langfuse("generation"),
        input=FieldSource(attribute=LANGFUSE_INPUT, transforms=("parse_json",)),
        output=FieldSource(attribute=LANGFUSE_OUTPUT, transforms=("parse_json",)),
    ),
    Reader(
        name="langfuse-retriever",
        kind="retriever",
        match=_langfuse("retriever"),
        input=FieldSource(attribute=LANGFUSE_INPUT, path=FIRST_ARGUMENT),
        context=FieldSource(attribute=LANGFUSE_OUTPUT),
        output=FieldSource(attribute=LANGFUSE_OUTPUT, transforms=("join_documents",)),
    ),
    Reader(
        name="langfuse-agent",
        kind="agent",
        match=_langfuse("agent"),
        input=FieldSource(attribute=LANGFUSE_INPUT, path=FIRST_ARGUMENT),
        output=FieldSource(attribute=LANGFUSE_OUTPUT, transforms=("parse_json",)),
        session=FieldSource(attribute="session.id"),
    ),
    Reader(
        name="langfuse-tool",
        kind="tool",
        match=_langfuse("tool"),
        arguments=FieldSource(attribute=LANGFUSE_INPUT),
        result=FieldSource(attribute=LANGFUSE_OUTPUT),
    ),
)
