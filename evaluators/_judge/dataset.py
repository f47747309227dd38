"""Test cases as dataset files in deepeval's golden format, and back: regression sets for CI.

One object per case, in the shape deepeval's ``EvaluationDataset`` reads (``save_as("json")``
writes it; ``add_goldens_from_json_file`` / ``add_goldens_from_jsonl_file`` load it):

* single turn: ``input``, ``actual_output``, ``expected_output``, ``context``,
  ``retrieval_context``, ``tools_called``, ``name``, ``comments``, ``additional_metadata``;
* conversation: ``scenario``, ``turns`` (``role``, ``content``, ``retrieval_context``,
  ``tools_called``), ``name``, ``comments``, ``additional_metadata``.

A ``.json`` file holds a list of them, a ``.jsonl`` file one per line. :func:`load_dataset`
reads both into :class:`~spanjudge.LLMTestCase` / :class:`~spanjudge.ConversationalTestCase`
for :func:`~spanjudge.evaluate`
(``additional_metadata`` becomes the case's ``metadata``).

Example::

    from spanjudge import FaithfulnessMetric, evaluate
    from spanjudge.evaluators._judge.dataset import load_dataset

    result = evaluate(load_dataset("failing.json"), [FaithfulnessMetric()])
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from spanjudge.errors import ConfigError
from spanjudge.evaluators._judge.test_case import (
    ConversationalTestCase,
    LLMTestCase,
    ToolCall,
    Turn,
)

__all__ = ["FORMATS", "golden", "load_dataset", "write_dataset"]

# file formats: deepeval's JSON list, or one golden per line
FORMATS = ("deepeval", "jsonl")
_TOOL_KEYS = ("name", "description", "reasoning", "output")


def _tools(tools: Sequence[ToolCall] | None) -> list[dict[str, Any]] | None:
    if not tools:
        return None
    return [tool.model_dump(exclude_none=True) for tool in tools]


def golden(
    case: LLMTestCase | ConversationalTestCase,
    *,
    comments: str | None = None,
    metadata: Mapping[str, Any] | None = None,
    scenario: str | None = None,
) -> dict[str, Any]:
    """``case`` as one deepeval golden object; ``metadata`` goes to ``additional_metadata``.
    A conversation needs a ``scenario`` (deepeval tells the two kinds apart by it): the case's
    own, else the given one, else a generic one."""
    extra = dict(metadata) if metadata is not None else case.metadata
    if isinstance(case, ConversationalTestCase):
        turns = [
            {
                "role": turn.role,
                "content": turn.content,
                "retrieval_context": turn.retrieval_context,
                "tools_called": _tools(turn.tools_called),
            }
            for turn in case.turns
        ]
        return {
            "scenario": case.scenario or scenario or "a recorded conversation",
            "turns": turns,
            "expected_outcome": None,
            "context": None,
            "name": case.name,
            "comments": comments,
            "additional_metadata": extra,
        }
    return {
        "input": case.input,
        "actual_output": case.actual_output,
        "expected_output": case.expected_output,
        "context": case.context,
        "retrieval_context": case.retrieval_context,
        "tools_called": _tools(case.tools_called),
        "expected_tools": _tools(case.expected_tools),
        "name": case.name,
        "comments": comments,
        "additional_metadata": extra,
    }


def write_dataset(goldens: Iterable[Mapping[str, Any]], path: str, fmt: str = "deepeval") -> int:
    """Write golden objects to ``path`` as ``fmt`` (``deepeval``: a JSON list; ``jsonl``: one
    per line). Returns how many were written."""
    if fmt not in FORMATS:
        raise ConfigError(f"unknown dataset format {fmt!r}; known: {', '.join(FORMATS)}")
    items = list(goldens)
    with open(path, "w", encoding="utf-8") as file:
        if fmt == "jsonl":
            for item in items:
                file.write(json.dumps(item, ensure_ascii=False, default=str) + "\n")
        else:
            json.dump(items, file, ensure_ascii=False, indent=2, default=str)
            file.write("\n")
    return len(items)


def _tool_calls(raw: Any, where: str) -> list[ToolCall] | None:
    if not raw:
        return None
    if not isinstance(raw, list):
        raise ConfigError(f"{where}.tools_called: expected a list, got {type(raw).__name__}")
    calls = []
    for tool in raw:
        fields = {key: tool.get(key) for key in _TOOL_KEYS}
        fields["input_parameters"] = tool.get("input_parameters", tool.get("inputParameters"))
        calls.append(ToolCall(**fields))
    return calls


def _case(obj: Any, where: str) -> LLMTestCase | ConversationalTestCase:
    if not isinstance(obj, dict):
        raise ConfigError(f"{where}: expected an object, got {type(obj).__name__}")
    metadata = obj.get("additional_metadata")
    if obj.get("scenario"):
        turns = [
            Turn(
                role=turn["role"],
                content=turn["content"],
                retrieval_context=turn.get("retrieval_context"),
                tools_called=_tool_calls(turn.get("tools_called"), f"{where}.turns.{i}"),
            )
            for i, turn in enumerate(obj.get("turns") or [])
        ]
        return ConversationalTestCase(
            turns=turns, scenario=obj["scenario"], name=obj.get("name"), metadata=metadata
        )
    if obj.get("input") is None or obj.get("actual_output") is None:
        raise ConfigError(f"{where}: a single-turn case needs input and actual_output")
    return LLMTestCase(
        input=obj["input"],
        actual_output=obj["actual_output"],
        expected_output=obj.get("expected_output"),
        context=obj.get("context"),
        retrieval_context=obj.get("retrieval_context"),
        tools_called=_tool_calls(obj.get("tools_called"), where),
        expected_tools=_tool_calls(obj.get("expected_tools"), where),
        name=obj.get("name"),
        metadata=metadata,
    )


def load_dataset(path: str | os.PathLike[str]) -> list[LLMTestCase | ConversationalTestCase]:
    """The test cases of a dataset file (deepeval golden JSON list, or JSONL by extension).

    Raises ``ValueError`` naming the line or item that is not a valid case.
    """
    name = os.fspath(path)
    with open(name, encoding="utf-8") as file:
        text = file.read()
    if name.endswith(".jsonl"):
        items = []
        for number, line in enumerate(text.splitlines(), start=1):
            if line.strip():
                try:
                    items.append((f"{name}:{number}", json.loads(line)))
                except ValueError as exc:
                    raise ConfigError(f"{name}:{number}: not JSON: {exc}") from None
    else:
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise ConfigError(f"{name}: not JSON: {exc}") from None
        if not isinstance(data, list):
            raise ConfigError(f"{name}: expected a JSON list of test cases")
        items = [(f"{name}[{i}]", obj) for i, obj in enumerate(data)]
    return [_case(obj, where) for where, obj in items]
