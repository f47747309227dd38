"""The plausibility gate: every rebuilt field a metric needs passes here before a judge sees it.

A rebuilt field that still has the shape of a misread after the readers (the checks of
:mod:`~spanjudge.evaluators._rebuild.dialects.text_shapes`: a field-marker template, a repr or
object placeholder anywhere in it, a JSON dump of a non-message object, a status word, a field's
name, markup only) is not sent to the judge: :func:`refusal_of` returns a :class:`Refusal` that
names the field, the attribute it came from, the check it failed and the rule that reads that
shape, and the case becomes a ``Skip`` (``error_type = "implausible_field"``), counted in
``spanjudge.sampler.skipped`` under the reason ``implausible_field`` and shown by
``spanjudge explain``. A wrong score that looks right is worse than no score.

Fields checked, when the rule's metric requires them (``required_fields``; a metric without the
attribute needs ``input`` and ``actual_output``):

* ``input``, ``actual_output``: every check (an answer's own ``Question:``-style labels are not
  markers; an answer that is a status word passes when the last model call of the turn said
  exactly that word);
* each ``retrieval_context`` document: a placeholder, markup only (documents are often JSON);
* each conversation turn: as ``input`` (user) or ``actual_output`` (assistant);
* each tool step of the trajectory (``trajectory``, ``tools_called``): its name (a placeholder,
  a status word, markup), its arguments and result (a placeholder anywhere inside).

Cheap by construction: the checks read each value's first characters once, with a plain
substring test before any pattern, and stop at the first failure.

Example::

    refusal = refusal_of(case, ("input", "actual_output"))
    refusal.reason
    # "implausible actual_output: a single word that is a status or enum value (status_word)
    #  in span 3f2a ('acme.run'): acme attributes: 'text'; the rule that reads this shape: ..."
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from spanjudge._core import metric_names
from spanjudge.evaluators._judge.test_case import ConversationalTestCase, LLMTestCase
from spanjudge.evaluators._rebuild.dialects.text_shapes import (
    CHECKS,
    RULE_FOR_CHECK,
    Want,
    failed_check,
)

__all__ = ["IMPLAUSIBLE_FIELD", "Refusal", "refusal_of"]

IMPLAUSIBLE_FIELD = metric_names.IMPLAUSIBLE_FIELD
"""The ``error_type`` of a refused case and the skip counter's reason label."""

_TEXT_CHECKS = tuple(CHECKS)
_DOCUMENT_CHECKS = ("placeholder", "markup_only")
_NAME_CHECKS = ("placeholder", "status_word", "markup_only")
_VALUE_CHECKS = ("placeholder",)
_SAMPLE = 80


@dataclass(frozen=True, slots=True)
class Refusal:
    """A field the gate refused: which, where it came from, the check, the rule that would
    have read it (its :data:`~.text_shapes.RULE_FOR_CHECK` entry), the start of the value."""

    field: str
    attribute: str
    check: str
    rule: str
    sample: str

    @property
    def reason(self) -> str:
        """The skip reason: ``implausible <field>: <check> in <attribute>: ...``."""
        return (
            f"implausible {self.field}: {CHECKS[self.check]} ({self.check}) in "
            f"{self.attribute}: {self.sample!r}; the rule that reads this shape: {self.rule}"
        )


def refusal_of(
    case: LLMTestCase | ConversationalTestCase, required: Sequence[str]
) -> Refusal | None:
    """The first required field of ``case`` that fails a check, else ``None``."""
    if isinstance(case, ConversationalTestCase):
        return _turns(case) if "turns" in required else None
    metadata = case.metadata or {}
    found_by = metadata.get("found_by") or {}
    where = _where(metadata, case.name)
    for name, want in (("input", "input"), ("actual_output", "output")):
        if name not in required:
            continue
        value = getattr(case, name)
        check = failed_check(value, want)  # type: ignore[arg-type]
        if check == "status_word" and name == "actual_output" and _said_by_model(case, value):
            check = None  # the model's own one-word answer: "stop" to "which word ends it?"
        if check is not None:
            return _refusal(name, _attribute(found_by.get(name), where), check, value)
    if "retrieval_context" in required:
        for index, document in enumerate(case.retrieval_context or ()):
            check = failed_check(document, checks=_DOCUMENT_CHECKS)
            if check is not None:
                how = _attribute(found_by.get("retrieval_context"), where)
                return _refusal(f"retrieval_context[{index}]", how, check, document)
    if "trajectory" in required or "tools_called" in required:
        return _tool_steps(case, where)
    return None


def _turns(case: ConversationalTestCase) -> Refusal | None:
    for index, turn in enumerate(case.turns):
        want: Want = "input" if turn.role == "user" else "output"
        check = failed_check(turn.content, want)
        if check is not None:
            span = (turn.metadata or {}).get("span_id")
            where = f"turn span {span}" if span else f"turn {index}"
            return _refusal(f"turns[{index}].{turn.role}", where, check, turn.content)
    return None


def _tool_steps(case: LLMTestCase, where: str) -> Refusal | None:
    trajectory = case.trajectory
    steps = [s for s in getattr(trajectory, "steps", ()) if getattr(s, "kind", "") == "tool_call"]
    for step in steps:
        at = f"span {step.span_id}"
        for part, value, checks in (
            ("name", step.name, _NAME_CHECKS),
            ("arguments", step.arguments, _VALUE_CHECKS),
            ("result", step.result, _VALUE_CHECKS),
        ):
            text = _as_text(value)
            check = failed_check(text, checks=checks) if text else None
            if check is not None:
                return _refusal(f"trajectory.steps[{step.index}].{part}", at, check, text)
    for index, call in enumerate(case.tools_called or ()):
        for part, value in (("input_parameters", call.input_parameters), ("output", call.output)):
            text = _as_text(value)
            check = failed_check(text, checks=_VALUE_CHECKS) if text else None
            if check is not None:
                return _refusal(f"tools_called[{index}].{part}", where, check, text)
    return None


def _said_by_model(case: LLMTestCase, value: str) -> bool:
    """Whether the last model call of the case's trajectory (not the target itself: a model
    call's own misread would vouch for itself) answered exactly ``value``."""
    own = (case.metadata or {}).get("span_id")
    steps = getattr(case.trajectory, "steps", ())
    calls = [s for s in steps if s.kind == "model_call" and s.span_id != own]
    answer = calls[-1].result if calls else None
    return isinstance(answer, str) and answer.strip() == value.strip()


def _refusal(field: str, attribute: str, check: str, value: str) -> Refusal:
    sample = " ".join(value.split())[:_SAMPLE]
    return Refusal(field, attribute, check, RULE_FOR_CHECK[check], sample)


def _where(metadata: dict[str, Any], name: str | None) -> str:
    span = metadata.get("span_id")
    return f"span {span} ({name!r})" if span else "the target"


def _attribute(how: Any, where: str) -> str:
    """Where a field came from, as ``found_by`` says it, with the span when it is the target's."""
    if not isinstance(how, str) or not how:
        return where
    return how if how.startswith("span ") else f"{where}: {how}"


def _as_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError, RecursionError):
        return str(value)
