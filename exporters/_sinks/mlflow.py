"""The MLflow sink: a result as MLflow feedback assessments, through MLflow's REST API.

MLflow's OTLP ingest (``/v1/traces`` with ``x-mlflow-experiment-id``) keeps a trace under
``tr-`` + the OTLP trace id in hex, so the judged trace is found from the result alone. Each
result becomes two feedback assessments on it, on the judged span for llm and agent targets:

* ``<metric>`` (``faithfulness``): the score as value, the judge's reason as rationale;
* ``<metric>.label`` (``faithfulness.label``): ``pass`` or ``fail``, so the verdict has a column
  and a filter of its own: ``feedback.`faithfulness.label` = 'fail'``;

both with source type ``LLM_JUDGE`` and the judge model as source id, and metadata naming the
rule, threshold and the result's stable id (``spanjudge.evaluation.id``). A person's label from
``POST /v1/feedback`` is the same pair with source type ``HUMAN`` (source id: the annotator),
the score only when they gave one.

MLflow has no idempotency key for assessments, so the sink reads the trace's assessments before
writing (one ``GET`` per trace per batch) and writes only those not there yet: a result sent
again after a crash is not written twice.

Example::

    sink = MlflowSink("http://127.0.0.1:5000", token=os.environ.get("MLFLOW_TRACKING_TOKEN"))
    assert sink.export([SinkItem(record=record)])
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from spanjudge._core.span_record import EvaluationRecord, FeedbackRecord
from spanjudge.exporters._sinks.base import HttpSink, SinkItem

__all__ = ["ID_KEY", "LABEL_SUFFIX", "MlflowSink", "assessments", "mlflow_trace_id"]

# metadata key holding what makes an assessment ours and which result it is
ID_KEY = "spanjudge.evaluation.id"
LABEL_ID_KEY = "spanjudge.feedback.id"
LABEL_SUFFIX = ".label"
SPAN_TARGETS = frozenset({"llm", "agent"})
API = "/api/3.0/mlflow/traces"


def mlflow_trace_id(otlp_trace_id: str) -> str:
    """The id MLflow keeps an OTLP trace under: ``tr-`` and the 32 hex digits."""
    return "tr-" + otlp_trace_id.lower()


def _result_pair(record: EvaluationRecord) -> list[dict[str, Any]]:
    metadata = {ID_KEY: record.evaluation_span_id, "spanjudge.rule": record.rule}
    if record.threshold is not None:
        metadata["spanjudge.threshold"] = str(record.threshold)
    if record.label:
        metadata["spanjudge.label"] = record.label
    source = {"source_type": "LLM_JUDGE", "source_id": record.judge_model or "spanjudge"}
    common: dict[str, Any] = {"source": source, "metadata": metadata}
    if record.reason:
        common["rationale"] = record.reason
    if record.target_type in SPAN_TARGETS and record.span_id:
        common["span_id"] = record.span_id
    out = [{**common, "assessment_name": record.metric, "feedback": {"value": record.score}}]
    if record.label:
        out.append(
            {
                **common,
                "assessment_name": record.metric + LABEL_SUFFIX,
                "feedback": {"value": record.label},
            }
        )
    return out


def _label_pair(label: FeedbackRecord, span_id: str | None) -> list[dict[str, Any]]:
    metadata = {LABEL_ID_KEY: str(label.feedback_id), "spanjudge.source": label.source}
    if label.rule:
        metadata["spanjudge.rule"] = label.rule
    source = {"source_type": "HUMAN", "source_id": label.annotator or label.source}
    common: dict[str, Any] = {"source": source, "metadata": metadata}
    if label.note:
        common["rationale"] = label.note
    if span_id:
        common["span_id"] = span_id
    out = [
        {
            **common,
            "assessment_name": label.metric + LABEL_SUFFIX,
            "feedback": {"value": label.label},
        }
    ]
    if label.score is not None:
        out.append({**common, "assessment_name": label.metric, "feedback": {"value": label.score}})
    return out


def assessments(item: SinkItem) -> list[dict[str, Any]]:
    """The assessments ``item`` becomes (module docstring), without their trace id."""
    if item.label is not None:
        return _label_pair(item.label, item.span_id)
    assert item.record is not None
    return _result_pair(item.record)


def _key(assessment: dict[str, Any]) -> tuple[str, str, str] | None:
    """What identifies one of our assessments: (name, which id key, its value)."""
    metadata = assessment.get("metadata") or {}
    for id_key in (ID_KEY, LABEL_ID_KEY):
        if id_key in metadata:
            return (str(assessment.get("assessment_name")), id_key, str(metadata[id_key]))
    return None


class MlflowSink(HttpSink):
    """Results as MLflow feedback assessments (module docstring); ``token`` goes as a bearer
    token, ``auth`` as basic auth (MLflow's own auth app)."""

    name = "mlflow"

    def __init__(self, endpoint: str, *, token: str | None = None, **kwargs: Any) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        super().__init__(endpoint, headers=headers, **kwargs)

    def write(self, items: list[SinkItem]) -> list[bool]:
        by_trace: dict[str, list[int]] = defaultdict(list)
        settled = [True] * len(items)
        for index, item in enumerate(items):
            if item.trace_id:
                by_trace[item.trace_id].append(index)
        for trace_id, indexes in by_trace.items():
            ok = self._write_trace(mlflow_trace_id(trace_id), [items[i] for i in indexes])
            for index in indexes:
                settled[index] = ok
        return settled

    def _write_trace(self, trace: str, items: list[SinkItem]) -> bool:
        """Write what ``items`` owe one trace; True when settled."""
        info = self.request("GET", f"{API}/{trace}")
        if info.status_code != 200:
            return self.answer_settles(info, items, f"trace {trace}")
        present = {
            key
            for assessment in info.json()
            .get("trace", {})
            .get("trace_info", {})
            .get("assessments", [])
            if (key := _key(assessment)) is not None
        }
        for item in items:
            for body in assessments(item):
                if _key(body) in present:
                    continue  # written before (a re-delivery after a crash)
                answer = self.request(
                    "POST",
                    f"{API}/{trace}/assessments",
                    json={"assessment": {**body, "trace_id": trace}},
                )
                if not self.answer_settles(answer, [item], f"assessments of {trace}"):
                    return False
        return True
