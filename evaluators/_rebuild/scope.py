"""Where a target's context comes from: the span tree of a trace and the turn a span belongs to.

* an agent span's scope is its whole subtree;
* an LLM span's scope is what precedes it in the same agent turn, at any depth (frameworks nest
  the retriever and the model call under different chain spans: LangChain's
  ``RunnableParallel`` -> retriever, then the model beside it);
* a trace's scope is every span of the trace.

Kinds come from the dialects, plus the tree rules of :mod:`.inference`: :meth:`SpanTree.kind`
counts an inferred turn as an ``agent``, :meth:`SpanTree.retrieval` finds retrievals no dialect
named, :meth:`SpanTree.collapsed_into` tells a wrapper from the operation it wraps.

Example::

    tree = SpanTree(trace_spans)
    context_spans = tree.scope_of(llm_span)
"""

from __future__ import annotations

from collections.abc import Iterator

from spanjudge._core.span_record import SpanRecord
from spanjudge.evaluators._rebuild import inference
from spanjudge.evaluators._rebuild.dialects import kind_of, read_span
from spanjudge.evaluators._rebuild.dialects.view import Document, ViewKind

_Key = tuple[str, str]


def _order(span: SpanRecord) -> tuple[int, str]:
    return (span.start_time_unix_nano, span.span_id)


class SpanTree:
    """Parent/child links of a set of spans (several traces may be mixed; cycles are ignored)."""

    def __init__(self, spans: list[SpanRecord]) -> None:
        self.spans = spans
        self.by_id: dict[_Key, SpanRecord] = {(s.trace_id, s.span_id): s for s in spans}
        self.children: dict[tuple[str, str | None], list[SpanRecord]] = {}
        for span in spans:
            self.children.setdefault((span.trace_id, span.parent_span_id or None), []).append(span)
        self._turns: dict[_Key, str] | None = None
        self._kinds: dict[_Key, ViewKind | None] = {}
        self._collapsed: dict[str, dict[_Key, SpanRecord]] = {}
        self._retrievals: dict[_Key, tuple[list[Document], str] | None] = {}

    def dialect_kind(self, span: SpanRecord) -> ViewKind | None:
        """``kind_of(span)``, remembered: the tree rules ask it of every span, several times."""
        at = (span.trace_id, span.span_id)
        if at not in self._kinds:
            self._kinds[at] = kind_of(span)
        return self._kinds[at]

    def kind(self, span: SpanRecord) -> ViewKind | None:
        """The span's kind: its dialect's, or ``agent`` for an inferred turn."""
        if self._turns is None:
            self._turns = inference.inferred_turns(self)
        if self._turns and (span.trace_id, span.span_id) in self._turns:
            return "agent"
        return self.dialect_kind(span)

    def how_kind(self, span: SpanRecord) -> str | None:
        """The inference rule that gave the span its kind, ``None`` when its dialect did."""
        self.kind(span)
        return (self._turns or {}).get((span.trace_id, span.span_id))

    def collapsed_into(self, span: SpanRecord) -> SpanRecord | None:
        """The span evaluated in place of ``span`` when both describe one operation (a wrapper
        and what it wraps), else ``None``."""
        kind = self.kind(span)
        if kind not in inference.COLLAPSIBLE:
            return None
        if kind not in self._collapsed:
            self._collapsed[kind] = inference.collapse(self, kind)
        return self._collapsed[kind].get((span.trace_id, span.span_id))

    def collapsed_from(self, span: SpanRecord) -> list[SpanRecord]:
        """The spans that :meth:`collapsed_into` ``span``."""
        self.collapsed_into(span)
        kept = (span.trace_id, span.span_id)
        table = self._collapsed.get(self.kind(span) or "", {})
        return [self.by_id[k] for k, v in table.items() if (v.trace_id, v.span_id) == kept]

    def retrieval(self, span: SpanRecord) -> tuple[list[Document], str] | None:
        """The documents of a retrieval and how it was recognised: a dialect's retriever span
        (``"<dialect> retriever"``), or a span that returns documents (:mod:`.inference`)."""
        kind = kind_of(span)
        if kind == "retriever":
            view = read_span(span)
            return (view.documents or [], f"{view.dialect} retriever")
        if kind not in (None, "chain"):
            return None
        at = (span.trace_id, span.span_id)
        if at not in self._retrievals:
            found = inference.returned_documents(span)
            self._retrievals[at] = (
                None if found is None else (found[0], f"{inference.RETRIEVAL_RULE} ({found[1]})")
            )
        return self._retrievals[at]

    def parent(self, span: SpanRecord) -> SpanRecord | None:
        if not span.parent_span_id:
            return None
        return self.by_id.get((span.trace_id, span.parent_span_id))

    def ancestors(self, span: SpanRecord) -> Iterator[SpanRecord]:
        """Parent, grandparent, ... (stops at a missing parent or a cycle)."""
        seen = {span.span_id}
        current = self.parent(span)
        while current is not None and current.span_id not in seen:
            seen.add(current.span_id)
            yield current
            current = self.parent(current)

    def subtree(self, span: SpanRecord) -> list[SpanRecord]:
        """Descendants of ``span`` (not itself), in start-time order."""
        out: list[SpanRecord] = []
        seen = {span.span_id}
        stack = [span]
        while stack:
            node = stack.pop()
            for child in self.children.get((node.trace_id, node.span_id), ()):
                if child.span_id not in seen:
                    seen.add(child.span_id)
                    out.append(child)
                    stack.append(child)
        out.sort(key=_order)
        return out

    def turn_of(self, span: SpanRecord) -> SpanRecord | None:
        """The nearest enclosing agent span (the turn), or the top-most known ancestor when no
        agent span encloses ``span``; ``None`` for a span without ancestors."""
        top = None
        for ancestor in self.ancestors(span):
            if self.kind(ancestor) == "agent":
                return ancestor
            top = ancestor
        return top

    def scope_of(self, span: SpanRecord) -> list[SpanRecord]:
        """The spans whose retrievals and tool calls belong to ``span``'s evaluation."""
        if self.kind(span) == "agent":
            return self.subtree(span)
        turn = self.turn_of(span)
        if turn is None:
            return []
        own = {s.span_id for s in self.subtree(span)}
        return [
            s
            for s in self.subtree(turn)
            if s.span_id != span.span_id
            and s.span_id not in own
            and s.start_time_unix_nano < span.start_time_unix_nano
        ]

    def conversation_of(self, span: SpanRecord) -> str | None:
        """The span's conversation id, or its nearest ancestor's: the key the store indexes
        spans by (:attr:`SpanRecord.conversation_id`, every library's names), so planning finds
        the conversations the store can load, and reads no content to do it (the full reading
        cost planning ~20% of its time, measured)."""
        own = span.conversation_id
        if own:
            return own
        for ancestor in self.ancestors(span):
            found = ancestor.conversation_id
            if found:
                return found
        return None
