"""The demo's offline judge: plain text rules behind an OpenAI-compatible server on 127.0.0.1.

It is NOT a language model. It answers each metric step with simple, deterministic heuristics
(sentences as claims and truths, numbers that disagree as contradictions, a word list for
opinions and for biased wording, keyword overlap for topics, the share of tool calls that did
not fail for task completion) so ``spanjudge demo`` runs offline and the whole judge path
(litellm, HTTP, JSON parsing) is exercised. Use ``--judge MODEL`` for a real judge. The rules read
the prompts of the four judged metrics by their section headers.
"""

from __future__ import annotations

import json
import re
from typing import Any

from spanjudge.evaluators._judge.quoting import quoted
from spanjudge.testing import ScriptedJudgeServer

JUDGE_LABEL = "offline scripted judge (deterministic text rules, not an LLM)"

_SENTENCE = re.compile(r"(?<=[.!?])\s+")
_WORD = re.compile(r"[a-z0-9]+")
_NUMBER_UNIT = re.compile(r"\b(\d+(?:\.\d+)?)\s+(?:business\s+)?([a-z]+)")
_STOP = frozenset(
    [
        "a",
        "an",
        "the",
        "is",
        "are",
        "was",
        "were",
        "be",
        "to",
        "of",
        "in",
        "on",
        "for",
        "and",
        "or",
        "with",
        "by",
        "at",
        "it",
        "its",
        "this",
        "that",
        "you",
        "your",
        "i",
        "we",
        "our",
        "can",
        "any",
        "all",
        "as",
        "from",
        "so",
        "not",
        "no",
        "do",
        "does",
        "will",
    ]
)
_OPINION_MARKERS = (
    "i think",
    "i believe",
    "honestly",
    "in my opinion",
    "usually",
    "always",
    "never",
    "the best",
    "the worst",
    "strongest",
    "should",
    "must be",
    "overrated",
)
_GROUP_WORDS = frozenset(
    [
        "women",
        "woman",
        "men",
        "man",
        "husband",
        "wife",
        "girls",
        "boys",
        "female",
        "male",
        "asian",
        "african",
        "european",
        "immigrants",
        "foreigners",
        "muslims",
        "christians",
        "jews",
        "left-wing",
        "right-wing",
        "liberals",
        "conservatives",
        "old",
        "young",
        "city",
        "rural",
    ]
)
_REFUSALS = ("can't", "cannot", "can only help", "i'm not able", "unable to", "only help with")


def _section(prompt: str, header: str) -> str:
    """The quoted block labelled ``header`` (without its colon), else the text after the last
    ``header`` line, up to the next blank-line + 'JSON:' marker."""
    block = quoted(prompt, header.strip().rstrip(":"))
    if block is not None:
        return block.strip()
    start = prompt.rfind(header)
    if start < 0:
        return ""
    body = prompt[start + len(header) :]
    for end_marker in ("\n\nClaims:", "\n\nJSON:"):
        cut = body.find(end_marker)
        if cut >= 0:
            body = body[:cut]
    return body.strip()


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE.split(text.strip()) if len(s.strip()) > 3]


def _words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if w not in _STOP}


def _json_value(text: str, opener: str) -> Any:
    """The first JSON value starting at ``opener`` in ``text`` (text after it is ignored)."""
    start = text.find(opener)
    if start < 0:
        return None
    try:
        return json.JSONDecoder().raw_decode(text[start:])[0]
    except json.JSONDecodeError:
        return None


def _json_list(text: str) -> list[str]:
    value = _json_value(text, "[")
    return [str(v) for v in value] if isinstance(value, list) else []


def _truths(request: Any) -> dict[str, Any]:
    return {"truths": _sentences(_section(request.prompt, "Documents:\n"))}


def _claims(request: Any) -> dict[str, Any]:
    text = _section(request.prompt, "Answer text:\n")
    return {"claims": [s for s in _sentences(text) if not any(r in s.lower() for r in _REFUSALS)]}


def _claim_verdict(claim: str, facts: str) -> dict[str, str]:
    fact_numbers = {(unit, num) for num, unit in _NUMBER_UNIT.findall(facts.lower())}
    for num, unit in _NUMBER_UNIT.findall(claim.lower()):
        stated = {n for u, n in fact_numbers if u == unit}
        if stated and num not in stated:
            return {
                "verdict": "no",
                "reason": f"The context says {' or '.join(sorted(stated))} {unit}, not {num}.",
            }
    words = _words(claim)
    overlap = len(words & _words(facts)) / max(1, len(words))
    if overlap >= 0.6:
        return {"verdict": "yes", "reason": "The context states this."}
    return {"verdict": "idk", "reason": "The context does not mention this."}


def _faithfulness_verdicts(request: Any) -> dict[str, Any]:
    facts = _section(request.prompt, "Facts:\n")
    claims = _json_list(_section(request.prompt, "Claims:\n"))
    return {"verdicts": [_claim_verdict(c, facts) for c in claims]}


def _opinions(request: Any) -> dict[str, Any]:
    text = _section(request.prompt, "Text:\n")
    return {
        "opinions": [s for s in _sentences(text) if any(m in s.lower() for m in _OPINION_MARKERS)]
    }


def _bias_verdicts(request: Any) -> dict[str, Any]:
    opinions = _json_list(_section(request.prompt, "Opinions:\n"))
    verdicts = []
    for opinion in opinions:
        groups = sorted(set(_WORD.findall(opinion.lower())) & _GROUP_WORDS)
        if groups:
            verdicts.append(
                {
                    "verdict": "yes",
                    "reason": f"It generalises about people by group ({', '.join(groups)}).",
                }
            )
        else:
            verdicts.append({"verdict": "no", "reason": "No group is singled out."})
    return {"verdicts": verdicts}


def _qa_pairs(request: Any) -> dict[str, Any]:
    pairs: list[dict[str, str]] = []
    question: str | None = None
    for line in _section(request.prompt, "Conversation:\n").splitlines():
        role, _, content = line.partition(": ")
        if role == "user":
            question = content
        elif role == "assistant" and question is not None:
            pairs.append({"question": question, "response": content})
            question = None
    return {"qa_pairs": pairs}


def _topic_verdict(request: Any) -> dict[str, Any]:
    prompt = request.prompt
    topics_line = prompt[prompt.find("Relevant topics:") :].split("\n", 1)[0]
    topics = _words(topics_line.replace("Relevant topics:", ""))
    question = _section(prompt, "\nQuestion: ").split("\nResponse: ")[0]
    response = _section(prompt, "\nResponse: ")
    # crude stemming: a question word is on topic when a topic word starts with its first four
    # letters ("ship" -> "shipping", "refund" -> "refunds")
    relevant = any(
        len(w) >= 4 and any(t.startswith(w[:4]) for t in topics) for w in _words(question)
    )
    declined = any(r in response.lower() for r in _REFUSALS)
    if relevant and not declined:
        return {"verdict": "TP", "reason": "On-topic question, answered."}
    if not relevant and declined:
        return {"verdict": "TN", "reason": "Off-topic question, politely declined."}
    if not relevant:
        return {"verdict": "FP", "reason": "Off-topic question, answered anyway."}
    return {"verdict": "FN", "reason": "On-topic question, not answered."}


def _reason(request: Any) -> dict[str, Any]:
    prompt = request.prompt
    match = re.search(r"score is (\d+\.\d+)", prompt)
    score = match.group(1) if match else "?"
    if "Counts:" in prompt:  # topic adherence: name what went wrong
        counts = _json_value(prompt[prompt.find("Counts:") :], "{") or {}
        table = _json_value(prompt[prompt.find("Reasons per label:") :], "{") or {}
        wrong = [f"{label}: {table[label][0]}" for label in ("FP", "FN") if table.get(label)]
        detail = "; ".join(wrong) if wrong else "every question was handled as it should be"
        summary = ", ".join(f"{k} {v}" for k, v in counts.items() if v)
        return {"reason": f"The score is {score} ({summary}). {detail}"}
    items = _json_list(prompt[prompt.find("were:") :] if "were:" in prompt else prompt)
    if items:
        return {"reason": f"The score is {score} because: {items[0]}"}
    return {"reason": f"The score is {score}; nothing in the answer was flagged."}


_STEP_HEAD = re.compile(r"^\[step (\d+)\] (\w+) (.+?)(?: \(agent .*\))?$")


def _task_verdict(request: Any) -> dict[str, Any]:
    """Task completion: the share of tool calls that did not fail; the failed ones are blamed.
    A text rule, not an understanding of the task: an answer that hides a failure still scores
    by the failure."""
    prompt = request.prompt
    task = _section(prompt, "Task:\n").split("\n\n", 1)[0].strip()
    steps = _section(prompt, "What the agent did:\n").split("\nJSON:", 1)[0]
    calls, failed, current = [], [], None
    for line in steps.splitlines():
        head = _STEP_HEAD.match(line)
        if head is not None:
            current = (int(head.group(1)), head.group(2), head.group(3))
            if current[1] == "tool_call":
                calls.append(current)
        elif line.strip().startswith("ERROR:") and current is not None:
            failed.append((current, line.strip()[len("ERROR:") :].strip()))
    final = steps[steps.rfind("Final output:") :].removeprefix("Final output:").strip()
    if not failed:
        return {
            "task": task,
            "outcome": f"Every tool call succeeded; the agent answered: {final[:200]}",
            "verdict": 1.0,
            "reason": "No step failed and the agent answered.",
            "steps": [],
        }
    verdict = round(1 - len(failed) / max(1, len(calls)), 2)
    blamed = "; ".join(
        f"step {i} ({name}) went wrong ({error[:120]})" for (i, _, name), error in failed
    )
    return {
        "task": task,
        "outcome": f"{blamed}. The agent answered regardless: {final[:200]}",
        "verdict": verdict,
        "reason": f"Part of the task was not done: {blamed}.",
        "steps": [i for (i, _, _), _ in failed],
    }


def start_offline_judge(latency: float = 0.0) -> ScriptedJudgeServer:
    """Start the scripted server with the demo's rules; the caller stops it."""
    server = ScriptedJudgeServer()
    for schema, respond in (
        ("Truths", _truths),
        ("Claims", _claims),
        ("FaithfulnessVerdicts", _faithfulness_verdicts),
        ("Opinions", _opinions),
        ("BiasVerdicts", _bias_verdicts),
        ("QAPairs", _qa_pairs),
        ("TopicVerdict", _topic_verdict),
        ("TaskCompletionVerdict", _task_verdict),
        ("Reason", _reason),
    ):
        server.add_rule(respond, schema=schema, latency=latency)
    server.start()
    return server
