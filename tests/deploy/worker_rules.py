"""A rules entry point for the live deploy test's worker: a rule whose judge always fails.

The worker names it as ``rules_entrypoint = "tests.deploy.worker_rules:failing_judge_rules"``;
the failing judge is a scripted server (no rules, so every answer is an HTTP error) whose URL
the test passes in :data:`FAILING_JUDGE_URL_ENV`.
"""

from __future__ import annotations

import os
from typing import Any

FAILING_JUDGE_URL_ENV = "DEPLOY_TEST_FAILING_JUDGE_URL"
FAILING_RULE = "faith-failing-judge"


def failing_judge_rules() -> list[Any]:
    from spanjudge.evaluators._judge.judges.litellm_judge import LiteLLMJudge
    from spanjudge.evaluators._judge.metrics.faithfulness import FaithfulnessMetric
    from spanjudge.evaluators._plan.rules import Rule

    judge = LiteLLMJudge(
        "openai/gpt-4o-mini",
        api_base=os.environ[FAILING_JUDGE_URL_ENV],
        api_key="sk-scripted-not-a-real-key",
        max_retries=0,
    )
    return [Rule(FaithfulnessMetric(model=judge), target="llm", name=FAILING_RULE)]
