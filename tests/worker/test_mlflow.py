"""Against a real MLflow tracking server (pip, its own venv: tests/support/mlflow.py), the app's
traces and the worker's evaluation spans going in over OTLP with ``x-mlflow-experiment-id``
(issue 39 items 1 and 2):

* every scored result is exactly two native feedback assessments (the score, the label) from
  the judge on the MLflow trace the OTLP trace became, on the judged span, even with a worker
  killed after MLflow wrote an assessment but before it heard back, and a second one started;
* the app's service filter finds every judged trace (MLflow tags a trace with the resource of
  the last batch it got; the evaluation spans carry the judged span's service.name);
* the evaluation spans have MLflow's EVALUATOR span type;
* in a real browser, the trace list has the score and label columns and the judged span's
  assessments panel shows them, and the docs' MLflow query for failing faithfulness
  (docs/backends.md) lists exactly the trace with that verdict.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spanjudge.testing import ScriptedJudgeServer
from tests.support.backend_docs import docs_query
from tests.support.hanging_proxy import deliver_across_a_kill
from tests.support.mlflow import MlflowServer
from tests.worker.conftest import base_config

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

EVALUATIONS = 17  # the demo traffic under the three rules of base_config


@pytest.fixture(scope="module")
def mlflow(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MlflowServer]:
    with MlflowServer.start(tmp_path_factory.mktemp("mlflow")) as server:
        yield server


def ours(info: dict[str, Any]) -> list[dict[str, Any]]:
    return [a for a in info.get("assessments", []) if "spanjudge.evaluation.id" in a["metadata"]]


def test_every_result_is_one_assessment_pair_across_a_kill_and_the_service_stays_the_apps(
    mlflow: MlflowServer,
    tmp_path: Path,
    demo_request: Any,
    offline_judge: ScriptedJudgeServer,
    start_worker: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    experiment = mlflow.create_experiment("support")
    header = {"x-mlflow-experiment-id": experiment}
    # the app sends its spans to MLflow and to the worker (as a Collector would fan out)
    mlflow.send_spans(demo_request, **header)
    judged = {s.trace_id.hex() for rs in demo_request.resource_spans for ss in rs.scope_spans
              for s in ss.spans}  # fmt: skip
    assert len(mlflow.search(experiment, "tags.`service.name` = 'support-bot'")) == len(judged)
    # the worker's evaluation spans go into the same experiment (docs/backends.md, "MLflow")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", f"x-mlflow-experiment-id={experiment}")
    base = base_config(offline_judge, f"sqlite:///{tmp_path}/mlflow.db", mlflow.url)
    results, written_before_the_kill = deliver_across_a_kill(
        start_worker, base, "mlflow", mlflow.url, demo_request, EVALUATIONS
    )

    scored = [r for r in results if r.status == "scored"]
    assert len(scored) == EVALUATIONS and written_before_the_kill >= 1
    by_trace: dict[str, list[dict[str, Any]]] = {}
    for trace_id in {r.trace_id for r in scored}:
        assert trace_id is not None
        by_trace[trace_id] = ours(mlflow.trace_info(trace_id))
    # exactly two per result (score, label), nothing twice despite the re-delivery
    assert sum(len(found) for found in by_trace.values()) == 2 * len(scored)
    for record in scored:
        assert record.trace_id is not None
        mine = [
            a
            for a in by_trace[record.trace_id]
            if a["metadata"]["spanjudge.evaluation.id"] == record.evaluation_span_id
        ]
        values = {a["assessment_name"]: a["feedback"]["value"] for a in mine}
        assert values == {record.metric: record.score, f"{record.metric}.label": record.label}
        for assessment in mine:
            assert assessment["source"] == {
                "source_type": "LLM_JUDGE",
                "source_id": record.judge_model,
            }
            assert assessment.get("rationale") == record.reason
            if record.target_type in ("llm", "agent"):
                assert assessment["span_id"] == record.span_id

    # the app's own service still names every judged trace
    found = mlflow.search(experiment, "tags.`service.name` = 'support-bot'")
    assert {t["trace_id"] for t in found} == {f"tr-{t}" for t in judged}
    assert mlflow.search(experiment, "tags.`service.name` = 'spanjudge-worker'") == []
    # the evaluation spans are evaluator spans to MLflow, and name the worker that sent them
    trace_id = scored[0].trace_id
    assert trace_id is not None
    evaluations = [s for s in mlflow.spans(trace_id) if s["name"].startswith("evaluation ")]
    assert evaluations
    for span in evaluations:
        assert span["attributes"]["mlflow.spanType"] == '"EVALUATOR"'


def test_mlflow_shows_the_score_and_label_in_its_trace_list_and_trace_page(
    mlflow: MlflowServer, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real browser (Debian's Chromium) finds the results where an MLflow user looks: the
    ``faithfulness`` and ``faithfulness.label`` columns of the trace list (beside the app's
    own service tag), and the judged trace's assessments panel, without opening the
    evaluation span (issue 39)."""
    from spanjudge.exporters._sinks import MlflowSink
    from tests.support.browser import artifacts_folder, chromium, shot, wait_for_text
    from tests.support.judged_trace import JudgedTrace

    experiment = mlflow.create_experiment("browser")
    header = {"x-mlflow-experiment-id": experiment}
    trace = JudgedTrace.make("support-bot")
    mlflow.send_spans(trace.request, **header)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", f"x-mlflow-experiment-id={experiment}")
    trace.deliver(mlflow.url, "mlflow", MlflowSink(mlflow.url))

    def tidy(page: Any) -> None:
        """Put away what MLflow's UI opens over the traces on a first visit: its assistant's
        panel and the "detect issues" guidance."""
        for component in (
            "mlflow.detect_issues.guidance.got_it",
            "mlflow.assistant.chat_panel.close",
        ):
            button = page.locator(f'[data-component-id="{component}"]')
            if button.count() and button.first.is_visible():
                button.first.click()

    folder = artifacts_folder("mlflow", capsys)
    with chromium() as page:
        page.goto(f"{mlflow.url}/#/experiments/{experiment}/traces")
        listed = wait_for_text(
            page,
            lambda t: (
                "faithfulness.label" in t
                and "0.4" in t
                and "Fail" in t
                and "service.name: support-bot" in t
            ),
            "the score and label columns in the trace list",
        )
        assert "service.name: support-bot" in listed  # the app's tag, not the worker's
        assert "spanjudge-worker" not in listed
        tidy(page)
        shot(page, folder, "mlflow-trace-list")
        page.goto(
            f"{mlflow.url}/#/experiments/{experiment}/traces"
            f"?selectedEvaluationId=tr-{trace.trace_id}"
        )
        toggle = page.locator(
            '[data-component-id="shared.model-trace-explorer.assessments-pane-toggle"]'
        )
        toggle.first.click()  # the assessments panel, beside the span tree
        wait_for_text(page, lambda t: "bias.label" in t, "the agent turn's assessments")
        # the judged LLM call (not its evaluation span, the row under it)
        page.get_by_text("chat gpt-4o-mini", exact=True).first.click()
        text = wait_for_text(
            page, lambda t: "faithfulness.label" in t, "the LLM call's assessments"
        )
        panel = text[text.index("Assessments") :]
        for shown in ("faithfulness.label", "Fail", "faithfulness", "0.4"):
            assert shown in panel, shown
        assert "gen_ai.evaluation.score.label" not in text  # the evaluation span is not open
        shot(page, folder, "mlflow-judged-trace")
    # the docs' query for failing faithfulness finds this trace, and only it
    listed = mlflow.search(experiment, docs_query("mlflow"))
    assert [t["trace_id"] for t in listed] == [f"tr-{trace.trace_id}"]
