"""What a recording owes and what the worker made of it, judged against the scenario alone
(never against what spanjudge recognised). Shared by ``test_conformance.py`` and
``benchmarks/interop.py``.

Owed, per turn (one trace each): for each agent rule, one evaluation of the turn; for each LLM
rule, one evaluation of the model call that answered; plus, for topic adherence, the
conversation ``sess-42``: 5*2 + 5*2 + 1 = 21.

* **scored right**: the owed evaluation is scored and its case holds the turn's question (the
  input is the question, or contains it when the framework prefixes the prompt, as smolagents'
  ``New task:``), the turn's answer, and the turn's documents (as retrieved texts or tool
  results, or inside the system prompt when that is all the spans give); the conversation's
  case holds the four turns of the session in order;
* **duplicates**: evaluations (scored or errored) beyond the one owed for the same operation:
  a second agent result in the same turn, a second model call scored with the same answer, a
  second result for the session. 0 is the goal;
* **evaluated_not_owed**: other scored or errored results (a model call that only requested a
  tool, scored anyway; the conversation of turn 5 where a framework always has a session);
* skipped results that are not owed (a call that answered with tool calls only) are counted
  apart, by reason: a skip is never an evaluation.

Example::

    verdict = judge_recording(replays("openinference"), agent_rules, llm_rules, "topics")
    verdict.owed, verdict.scored_right, verdict.duplicates
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from spanjudge._core.span_record import EvaluationRecord
from spanjudge.evaluators._judge.test_case import ConversationalTestCase, LLMTestCase
from tests.interop.conftest import Replayed, scenario

TURNS = {turn.number: turn for turn in scenario.TURNS}
EVALUATED = ("scored", "error")


@dataclass
class Verdict:
    """One recording's tally (see the module docstring); ``wrong`` says, per owed evaluation not
    scored right, why."""

    owed: int = 0
    scored_right: int = 0
    duplicates: int = 0
    evaluated_not_owed: int = 0
    wrong: list[str] = field(default_factory=list)
    owed_results: list[EvaluationRecord] = field(default_factory=list)


def case_problem(done: Replayed, result: EvaluationRecord, turn: Any) -> str | None:
    """Why ``result``'s case is not the scenario's case for ``turn`` (``None``: it is)."""
    case = done.cases.get((result.rule, result.target_id))
    if not isinstance(case, LLMTestCase):
        return f"no rebuilt case ({case!r})"
    if case.input != turn.question and turn.question not in case.input:
        return f"input {case.input[:80]!r}"
    if case.actual_output != turn.answer:
        return f"output {case.actual_output[:80]!r}"
    expected = turn.expected().retrieval_context
    context = case.retrieval_context or []
    source = (case.metadata or {}).get("context_source")
    if source in ("retrieval", "tool_results"):
        if context != expected:
            return f"{source} context {[c[:40] for c in context]}"
    elif not all(text in "\n".join(context) for text in expected):
        return f"context ({source}) lacks the documents"
    return None


def _conversation_problem(done: Replayed, rule: str) -> str | None:
    case = done.cases.get((rule, scenario.SESSION_ID))
    if not isinstance(case, ConversationalTestCase):
        return f"no conversation case ({case!r})"
    session = [t for t in scenario.TURNS if t.session_id == scenario.SESSION_ID]
    got = [(t.role, t.content) for t in case.turns]
    want = [(r, x) for t in session for r, x in (("user", t.question), ("assistant", t.answer))]
    if len(got) != len(want):
        return f"{len(got)} turns, expected {len(want)}"
    for (role, content), (want_role, text) in zip(got, want, strict=True):
        if role != want_role or (content != text and text not in content):
            return f"turn {role} {content[:60]!r}"
    return None


def judge_recording(
    done: Replayed, agent_rules: list[str], llm_rules: list[str], topics: str
) -> Verdict:
    verdict = Verdict()
    for rule in [*agent_rules, *llm_rules]:
        for number, turn in TURNS.items():
            verdict.owed += 1
            in_turn = [r for r in done.of_rule(rule) if done.turn(r) == number]
            evaluated = [r for r in in_turn if r.status in EVALUATED]
            right = [
                r for r in evaluated if r.status == "scored" and case_problem(done, r, turn) is None
            ]
            if rule in agent_rules:
                owed = right[:1] or evaluated[:1] or in_turn[:1]
                verdict.duplicates += max(0, len(evaluated) - 1)
            else:
                # the answering call: extra calls scored with the same answer are duplicates,
                # calls scored with something else were not owed at all
                owed = right[:1] or [r for r in in_turn if r.status == "skipped"][:1]
                same = [r for r in evaluated if r in right]
                verdict.duplicates += max(0, len(same) - 1)
                verdict.evaluated_not_owed += len([r for r in evaluated if r not in right])
            verdict.owed_results.extend(owed)
            if right:
                verdict.scored_right += 1
            else:
                why = (
                    case_problem(done, evaluated[0], turn)
                    if evaluated
                    else (in_turn[0].skip_reason if in_turn else "no result")
                )
                verdict.wrong.append(f"{rule} turn {number}: {why}")
    verdict.owed += 1
    session = [r for r in done.of_rule(topics) if r.target_id == scenario.SESSION_ID]
    verdict.owed_results.extend(session[:1])
    problem = (
        _conversation_problem(done, topics)
        if any(r.status == "scored" for r in session)
        else (session[0].skip_reason if session else "no result for the session")
    )
    if problem is None:
        verdict.scored_right += 1
    else:
        verdict.wrong.append(f"{topics} {scenario.SESSION_ID}: {problem}")
    verdict.duplicates += max(0, len([r for r in session if r.status in EVALUATED]) - 1)
    others = [
        r
        for r in done.of_rule(topics)
        if r.target_id != scenario.SESSION_ID and r.status in EVALUATED
    ]
    verdict.evaluated_not_owed += len(others)
    return verdict


def skipped_not_owed(done: Replayed, verdict: Verdict) -> Counter[str]:
    """Skipped results outside the owed ones, by the start of their reason."""
    owed = {id(r) for r in verdict.owed_results}
    return Counter(
        (r.skip_reason or "")[:90]
        for r in done.results
        if r.status == "skipped" and id(r) not in owed
    )
