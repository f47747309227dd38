"""Judge fixtures shared by the evaluator tests: a scripted OpenAI-compatible server on
127.0.0.1 and a LiteLLMJudge pointed at it (the real litellm HTTP path, no network)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from spanjudge.testing import ScriptedJudgeServer


@pytest.fixture
def judge_server() -> Iterator[ScriptedJudgeServer]:
    with ScriptedJudgeServer() as server:
        yield server


@pytest.fixture
def scripted_judge(judge_server: ScriptedJudgeServer) -> Any:
    # small backoff so retry tests stay fast; timeouts generous enough for a loaded machine
    return judge_server.judge(timeout=10.0, backoff_base=0.01, max_backoff=0.05)
