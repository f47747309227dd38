"""A target's question and answer, read from its spans: the first span with text wins; a turn
that carries no text itself speaks through its model calls. Shared by the case rebuild
(:mod:`.cases`) and the trajectory view (:mod:`.trajectory`)."""

from __future__ import annotations

from collections.abc import Iterable

from spanjudge._core.span_record import SpanRecord
from spanjudge.evaluators._rebuild.dialects import read_span
from spanjudge.evaluators._rebuild.dialects.text_shapes import MODEL_ANSWER_RULE, Want, failed_check
from spanjudge.evaluators._rebuild.dialects.view import GenAIView
from spanjudge.evaluators._rebuild.scope import SpanTree

__all__ = ["first_text", "turn_text"]


def _why_empty(view: GenAIView, field_name: str) -> str:
    span = view.span
    what = "input" if field_name == "input" else "output"
    if view.capture_off:  # the setting to switch on explains best
        return f"span {span.span_id} ({span.name!r}) has no {what} text: {view.capture_off}"
    if field_name in view.notes:
        return view.notes[field_name]
    if view.kind == "agent" or view.kind is None:
        return f"span {span.span_id} ({span.name!r}) has no {what} text of its own"
    return f"span {span.span_id} ({span.name!r}) has no {what} text ({view.dialect} span)"


def turn_text(
    span: SpanRecord, tree: SpanTree, notes: dict[str, str], found_by: dict[str, str] | None = None
) -> tuple[str | None, str | None]:
    """A span's question and answer. An agent turn that carries no text itself (the official
    OpenAI instrumentation's agent spans, an app's own turn span around an instrumented client,
    an inferred turn) speaks through its model calls: the first call's input, the last call's
    output."""
    view = read_span(span)
    if tree.kind(span) != "agent":
        return (
            first_text([span], "input", notes, found_by, span),
            first_text([span], "actual_output", notes, found_by, span),
        )
    # a value that is there but unreadable is reported, not papered over by the calls below;
    # a Python repr is no value: the calls say it better
    calls = [
        s for s in tree.subtree(span) if tree.kind(s) == "llm" and tree.collapsed_into(s) is None
    ]
    own = [] if tree.how_kind(span) and _structured(view) else [span]
    # the turn's own text in the shape of a misread (a status word read from a result object,
    # a dump of its state): its model calls hold the question and answer better
    own_in = _plausible_own(own, view.input_text, "input", calls)
    own_out = _plausible_own(own, view.output_text, "output", calls)
    ins = [span] if _unreadable(view, "input") else [*own_in, *calls]
    outs = [span] if _unreadable(view, "actual_output") else [*own_out, *reversed(calls)]
    text_in = first_text(ins, "input", notes, found_by, span)
    text_out = first_text(outs, "actual_output", notes, found_by, span)
    if found_by is not None:
        for field_name, kept, text, rule in (
            ("input", own_in, view.input_text, FIRST_CALL_RULE),
            ("actual_output", own_out, view.output_text, MODEL_ANSWER_RULE),
        ):
            if own and not kept and text and field_name in found_by:
                check = failed_check(text, "input" if field_name == "input" else "output")
                found_by[field_name] += f", rule: {rule} (the turn's own {text[:40]!r}: {check})"
    return text_in, text_out


FIRST_CALL_RULE = "the first model call's input in the turn"


def _plausible_own(
    own: list[SpanRecord], text: str | None, want: Want, calls: list[SpanRecord]
) -> list[SpanRecord]:
    """``own`` unless its text fails a plausibility check and model calls can speak instead."""
    if not own or not calls or text is None or failed_check(text, want) is None:
        return own
    return []


def _unreadable(view: GenAIView, field_name: str) -> bool:
    return field_name in view.notes and "Python repr" not in view.notes[field_name]


def _structured(view: GenAIView) -> bool:
    """An inferred turn's own text that is a JSON dump of its arguments (a workflow's start
    event, a handler's request): its model calls hold the question and answer better."""
    return any(
        t is not None and t.lstrip()[:1] in "[{" for t in (view.input_text, view.output_text)
    )


def first_text(
    spans: Iterable[SpanRecord],
    field_name: str,
    notes: dict[str, str],
    found_by: dict[str, str] | None = None,
    primary: SpanRecord | None = None,
) -> str | None:
    """The first text among ``spans``; when none has one, the note says why: a capture setting
    any of them names, else the first span's reason."""
    first_note = capture_note = None
    for span in spans:
        view = read_span(span)
        found = view.input_text if field_name == "input" else view.output_text
        if found and found.strip():
            if found_by is not None:
                how = view.found.get(field_name, f"{view.dialect} attributes")
                found_by[field_name] = (
                    how if span is primary else f"span {span.span_id} ({span.name!r}): {how}"
                )
            return found
        if first_note is None:
            first_note = _why_empty(view, field_name)
        if capture_note is None and view.capture_off:
            capture_note = _why_empty(view, field_name)
    note = capture_note or first_note
    if note is not None:
        notes.setdefault(field_name, note)
    return None
