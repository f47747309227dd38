"""What the judge-result cache key sees: the metric's identity, the judge model and the case's
content; not execution flags, not where the case came from."""

from __future__ import annotations

from typing import Any

from spanjudge.evaluators._judge.metrics.bias import BiasMetric, BiasTemplate
from spanjudge.evaluators._judge.metrics.faithfulness import FaithfulnessMetric
from spanjudge.evaluators._judge.metrics.identity import class_digest
from spanjudge.evaluators._judge.metrics.topic_adherence import TopicAdherenceMetric
from spanjudge.evaluators._judge.test_case import ConversationalTestCase, LLMTestCase, Turn
from spanjudge.evaluators._loop.result_cache import cache_key
from spanjudge.testing import ScriptedJudgeServer


def case(**changes: Any) -> LLMTestCase:
    fields: dict[str, Any] = {
        "input": "Can I return my shoes?",
        "actual_output": "Yes, within 30 days.",
        "retrieval_context": ["Returns within 30 days."],
        "metadata": {"trace_id": "a" * 32, "span_id": "b" * 16, "dialect": "spanjudge"},
        "name": "invoke_agent support",
    }
    fields.update(changes)
    return LLMTestCase(**fields)


def test_execution_flags_and_provenance_do_not_change_the_key() -> None:
    with ScriptedJudgeServer() as server:
        judge = server.judge()
        key = cache_key(FaithfulnessMetric(model=judge), case())
        assert key == cache_key(FaithfulnessMetric(model=judge, async_mode=False), case())
        assert key == cache_key(FaithfulnessMetric(model=judge, verbose_mode=True), case())
        moved = case(metadata={"trace_id": "c" * 32, "span_id": "d" * 16, "dialect": "spanjudge"})
        assert key == cache_key(FaithfulnessMetric(model=judge), moved.model_copy(
            update={"name": "chat app-model"}))  # fmt: skip


def test_content_parameters_templates_and_judge_change_the_key() -> None:
    class OneWord(BiasTemplate):
        @staticmethod
        def generate_opinions(actual_output: str) -> str:
            return BiasTemplate.generate_opinions(actual_output).replace("opinions", "views", 1)

    with ScriptedJudgeServer() as server:
        judge = server.judge()
        key = cache_key(BiasMetric(model=judge), case())
        others = [
            cache_key(BiasMetric(model=judge), case(actual_output="Yes, within 31 days.")),
            cache_key(BiasMetric(model=judge), case(retrieval_context=["Other."])),
            cache_key(BiasMetric(model=judge, threshold=0.4), case()),
            cache_key(BiasMetric(model=judge, include_reason=False), case()),
            cache_key(BiasMetric(model=judge, evaluation_template=OneWord), case()),
            cache_key(BiasMetric(model=server.judge(model="openai/other")), case()),
            cache_key(FaithfulnessMetric(model=judge), case()),
        ]
    assert key is not None and None not in others
    assert len({key, *others}) == len(others) + 1
    assert class_digest(OneWord) != class_digest(BiasTemplate)


def test_conversation_turn_provenance_is_ignored_and_turn_text_is_not() -> None:
    def conversation(answer: str, span_id: str) -> ConversationalTestCase:
        return ConversationalTestCase(
            turns=[
                Turn(role="user", content="Where is my order?"),
                Turn(role="assistant", content=answer, metadata={"span_id": span_id}),
            ],
            metadata={"conversation_id": span_id},
        )

    with ScriptedJudgeServer() as server:
        metric = TopicAdherenceMetric(relevant_topics=["orders"], model=server.judge())
        key = cache_key(metric, conversation("Tomorrow.", "1" * 16))
        assert key == cache_key(metric, conversation("Tomorrow.", "2" * 16))
        assert key != cache_key(metric, conversation("Next week.", "1" * 16))


def test_a_metric_that_cannot_name_itself_is_never_cached() -> None:
    class Opaque:
        name = "opaque"

    assert cache_key(Opaque(), case()) is None


KEY_IN_A_PROCESS = """
from spanjudge import LLMTestCase
from spanjudge.evaluators._judge.judges import LiteLLMJudge
from spanjudge import BiasMetric
from spanjudge.evaluators._judge.metrics.bias import BiasTemplate
from spanjudge.evaluators._loop.result_cache import cache_key

class Picky(BiasTemplate):
    @staticmethod
    def generate_reason(score, biases):
        kept = [b for b in biases if b not in {"gender", "politics", "race", "place"}]
        return f"Explain {score}: {kept}"

metric = BiasMetric(model=LiteLLMJudge("openai/scripted-judge"), evaluation_template=Picky)
print(cache_key(metric, LLMTestCase(input="q", actual_output="a")))
"""


def test_the_key_is_the_same_in_every_process() -> None:
    # another worker, or this one after a restart: string hashing (set order) differs by seed
    import os
    import subprocess
    import sys

    keys = set()
    for seed in ("1", "2", "3"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        done = subprocess.run(
            [sys.executable, "-c", KEY_IN_A_PROCESS],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        keys.add(done.stdout.strip())
    assert len(keys) == 1 and len(keys.pop()) == 64
