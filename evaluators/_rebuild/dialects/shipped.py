"""Readers shipped with the package: built-in dialects that are only attribute names and paths,
written as declared readers (:mod:`.declared`), so the built-in readings and a team's own are one
mechanism. A contributor adds a library of that kind here, as data, not as a dialect module.

They are read after the readers a team declares and before the dialect modules; what a shipped
reader leaves unset, the dialect that matches the span fills (the GenAI semconv, mostly).

* ``openlit`` (``openlit.init()``): GenAI semconv spans under the ``openlit`` scopes, read by
  the semconv dialect, except its retrieval spans, which list their documents (``id``,
  ``score``, ``text``) in ``gen_ai.output.messages`` and the query in
  ``gen_ai.retrieval.query.text``.
"""

from __future__ import annotations

from spanjudge.evaluators._rebuild.dialects.declared import FieldSource, Reader, ReaderMatch

READERS: tuple[Reader, ...] = (
    Reader(
        name="openlit",
        kind="retriever",
        match=ReaderMatch(scope="openlit*", attributes={"gen_ai.operation.name": "retrieval"}),
        input=FieldSource(attribute="gen_ai.retrieval.query.text"),
        context=FieldSource(attribute="gen_ai.output.messages"),
        output=FieldSource(attribute="gen_ai.output.messages", transforms=("join_documents",)),
    ),
)
