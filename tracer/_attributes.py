"""Attribute keys, span names and operation names: the one place they are spelled.

Keys under ``gen_ai.*`` follow the OpenTelemetry GenAI semantic conventions; keys under
``spanjudge.*`` are the project's own (the semconv has no field for them). Case rebuild,
the score emitter, the receiver and the docs all read these constants, so a rename here is
a rename everywhere.
"""

from __future__ import annotations

from typing import Final, Literal, get_args

# What ``@observe(kind=...)`` accepts; spelled once, the runtime tuple is read from the type.
Kind = Literal["agent", "llm", "retriever", "tool", "chain"]
KINDS: Final[tuple[Kind, ...]] = get_args(Kind)

# --- operation names (gen_ai.operation.name) per kind -------------------------------------
OPERATION_BY_KIND: Final[dict[str, str]] = {
    "agent": "invoke_agent",
    "llm": "chat",
    "retriever": "retrieval",
    "tool": "execute_tool",
    "chain": "invoke_workflow",
}
KIND_BY_OPERATION: Final[dict[str, str]] = {v: k for k, v in OPERATION_BY_KIND.items()}
# Other instrumentations use these operation names for LLM calls too.
LLM_OPERATIONS: Final[frozenset[str]] = frozenset(
    {"chat", "text_completion", "generate_content", "completion"}
)

# --- GenAI semantic conventions -------------------------------------------------------------
GEN_AI_OPERATION_NAME: Final = "gen_ai.operation.name"
GEN_AI_PROVIDER_NAME: Final = "gen_ai.provider.name"
GEN_AI_SYSTEM: Final = "gen_ai.system"  # older semconv name of the provider, read on rebuild
GEN_AI_REQUEST_MODEL: Final = "gen_ai.request.model"
GEN_AI_RESPONSE_MODEL: Final = "gen_ai.response.model"
GEN_AI_RESPONSE_ID: Final = "gen_ai.response.id"
GEN_AI_RESPONSE_FINISH_REASONS: Final = "gen_ai.response.finish_reasons"
GEN_AI_USAGE_INPUT_TOKENS: Final = "gen_ai.usage.input_tokens"
GEN_AI_USAGE_OUTPUT_TOKENS: Final = "gen_ai.usage.output_tokens"
GEN_AI_INPUT_MESSAGES: Final = "gen_ai.input.messages"
GEN_AI_OUTPUT_MESSAGES: Final = "gen_ai.output.messages"
GEN_AI_SYSTEM_INSTRUCTIONS: Final = "gen_ai.system_instructions"
GEN_AI_AGENT_NAME: Final = "gen_ai.agent.name"
GEN_AI_AGENT_ID: Final = "gen_ai.agent.id"
GEN_AI_CONVERSATION_ID: Final = "gen_ai.conversation.id"
GEN_AI_TOOL_NAME: Final = "gen_ai.tool.name"
GEN_AI_TOOL_CALL_ID: Final = "gen_ai.tool.call.id"
GEN_AI_TOOL_CALL_ARGUMENTS: Final = "gen_ai.tool.call.arguments"
GEN_AI_TOOL_CALL_RESULT: Final = "gen_ai.tool.call.result"
GEN_AI_TOOL_DESCRIPTION: Final = "gen_ai.tool.description"
GEN_AI_RETRIEVAL_QUERY_TEXT: Final = "gen_ai.retrieval.query.text"
GEN_AI_RETRIEVAL_DOCUMENTS: Final = "gen_ai.retrieval.documents"
GEN_AI_DATA_SOURCE_ID: Final = "gen_ai.data_source.id"

# Shapes other instrumentations write, read on case rebuild only: older semconv / OpenLLMetry
# prompt and completion attributes (plain, or indexed as ``gen_ai.prompt.0.content``) and the
# per-message span events of the older GenAI semconv.
GEN_AI_PROMPT: Final = "gen_ai.prompt"
GEN_AI_COMPLETION: Final = "gen_ai.completion"
GEN_AI_USER_MESSAGE_EVENT: Final = "gen_ai.user.message"
GEN_AI_SYSTEM_MESSAGE_EVENT: Final = "gen_ai.system.message"
GEN_AI_ASSISTANT_MESSAGE_EVENT: Final = "gen_ai.assistant.message"
GEN_AI_TOOL_MESSAGE_EVENT: Final = "gen_ai.tool.message"
GEN_AI_CHOICE_EVENT: Final = "gen_ai.choice"
GEN_AI_CONTENT_PROMPT_EVENT: Final = "gen_ai.content.prompt"
GEN_AI_CONTENT_COMPLETION_EVENT: Final = "gen_ai.content.completion"
LLM_REQUEST_TYPE: Final = "llm.request.type"  # OpenLLMetry: "chat" | "completion" | ...

# Evaluation results (semconv gen_ai.evaluation.*)
GEN_AI_EVALUATION_NAME: Final = "gen_ai.evaluation.name"
GEN_AI_EVALUATION_SCORE_VALUE: Final = "gen_ai.evaluation.score.value"
GEN_AI_EVALUATION_SCORE_LABEL: Final = "gen_ai.evaluation.score.label"
GEN_AI_EVALUATION_EXPLANATION: Final = "gen_ai.evaluation.explanation"
GEN_AI_EVALUATION_RESULT_EVENT: Final = "gen_ai.evaluation.result"
ERROR_TYPE: Final = "error.type"

# Where instrumentations put the conversation (session) id, in the order they are read. The store
# indexes spans by the first one present, so a conversation is found whoever traced it; the span
# dialects (evaluators/_rebuild/dialects) read the same keys.
SESSION_ID: Final = "session.id"  # OpenInference
TRACELOOP_SESSION_ID: Final = "traceloop.association.properties.session_id"  # OpenLLMetry
TRACELOOP_CONVERSATION_ID: Final = "traceloop.association.properties.conversation_id"
VERCEL_SESSION_ID: Final = "ai.telemetry.metadata.sessionId"  # Vercel AI SDK
LITELLM_SESSION_ID: Final = "metadata.session_id"  # LiteLLM's callback, request metadata
CONVERSATION_ID_KEYS: Final[tuple[str, ...]] = (
    GEN_AI_CONVERSATION_ID,
    SESSION_ID,
    TRACELOOP_SESSION_ID,
    TRACELOOP_CONVERSATION_ID,
    VERCEL_SESSION_ID,
    LITELLM_SESSION_ID,
)
# Then any other key naming a session, conversation, thread or group id under a namespace of
# its own (``gcp.vertex.agent.session_id``, ``langfuse.session.id``, ``agent.thread_id``...),
# with a string value; ``thread.id`` is the OS thread (an int in OTel), never a conversation.
CONVERSATION_ID_NAMES: Final[tuple[str, ...]] = tuple(
    sep + name
    for name in (
        "session_id",
        "sessionId",
        "session.id",
        "conversation_id",
        "conversationId",
        "conversation.id",
        "thread_id",
        "threadId",
        "group_id",
        "groupId",
        "chat_id",
    )
    for sep in (".", "")
)
# a JSON attribute some libraries put their run metadata in (OpenInference's ``metadata``:
# LangGraph's thread_id lands there)
METADATA_JSON: Final = "metadata"

# --- project attributes -------------------------------------------------------------------
SPANJUDGE_KIND: Final = "spanjudge.kind"
SPANJUDGE_INPUT: Final = "spanjudge.input"  # captured arguments (JSON) when no messages apply
SPANJUDGE_OUTPUT: Final = "spanjudge.output"  # captured return value (JSON)
SPANJUDGE_METADATA: Final = "spanjudge.metadata"  # JSON object set by the user
SPANJUDGE_USER_ID: Final = "spanjudge.user.id"
SPANJUDGE_RETRIEVAL_DOCUMENTS_CONTENT: Final = "spanjudge.retrieval.documents.content"
SPANJUDGE_TRUNCATED: Final = "spanjudge.truncated"  # list of attribute keys that were cut

# Evaluation span attributes beyond the semconv ones
SPANJUDGE_EVAL_THRESHOLD: Final = "spanjudge.evaluation.threshold"
SPANJUDGE_EVAL_SUCCESS: Final = "spanjudge.evaluation.success"
SPANJUDGE_EVAL_STRICT_MODE: Final = "spanjudge.evaluation.strict_mode"
SPANJUDGE_EVAL_JUDGE_MODEL: Final = "spanjudge.evaluation.judge.model"
SPANJUDGE_EVAL_INPUT_TOKENS: Final = "spanjudge.evaluation.judge.input_tokens"
SPANJUDGE_EVAL_OUTPUT_TOKENS: Final = "spanjudge.evaluation.judge.output_tokens"
SPANJUDGE_EVAL_COST: Final = "spanjudge.evaluation.judge.cost_usd"
SPANJUDGE_EVAL_VERDICTS: Final = "spanjudge.evaluation.verdicts"
SPANJUDGE_EVAL_SAMPLE_RATE: Final = "spanjudge.evaluation.sample_rate"
SPANJUDGE_EVAL_RULE: Final = "spanjudge.evaluation.rule"
SPANJUDGE_EVAL_TARGET: Final = "spanjudge.evaluation.target"  # llm|agent|trace|conversation
SPANJUDGE_EVAL_TARGET_ID: Final = "spanjudge.evaluation.target_id"
SPANJUDGE_EVAL_SKIP_REASON: Final = "spanjudge.evaluation.skip_reason"
# The result's stable id (the evaluation span's id, derived from rule and target): a log record
# has no id of its own, so a re-sent gen_ai.evaluation.result event is de-duplicated by this
SPANJUDGE_EVAL_ID: Final = "spanjudge.evaluation.id"
# retrieval | tool_results | system_instructions: where the case's retrieval context came from
SPANJUDGE_EVAL_CONTEXT_SOURCE: Final = "spanjudge.evaluation.context_source"
# true when the result was reused from the judge-result cache (no judge call was made for it)
SPANJUDGE_EVAL_CACHED: Final = "spanjudge.evaluation.cached"
# The judge's own timing (the evaluation span sits in the evaluated span's time window, so its
# start and end are not when the judge ran): Unix seconds when the result was produced, and
# seconds the evaluation took
SPANJUDGE_EVAL_JUDGED_AT: Final = "spanjudge.evaluation.judged_at"
SPANJUDGE_EVAL_DURATION: Final = "spanjudge.evaluation.duration"

# Human feedback: the log event a person's label leaves as, on the labelled span; it carries
# gen_ai.evaluation.name / score.label / score.value / explanation (the note) like a result
SPANJUDGE_FEEDBACK_EVENT: Final = "spanjudge.feedback"
SPANJUDGE_FEEDBACK_ID: Final = "spanjudge.feedback.id"
SPANJUDGE_FEEDBACK_ANNOTATOR: Final = "spanjudge.feedback.annotator"
SPANJUDGE_FEEDBACK_SOURCE: Final = "spanjudge.feedback.source"  # python | http | cli

# Instrumentation scope of the spans this library creates
TRACER_NAME: Final = "spanjudge"

TRUNCATION_MARKER: Final = "...[truncated {dropped} chars]"


def span_name(kind: str, name: str) -> str:
    """The span name the design prescribes for a kind: ``"{operation} {name}"``."""
    return f"{OPERATION_BY_KIND[kind]} {name}" if name else OPERATION_BY_KIND[kind]
