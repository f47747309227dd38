"""Rebuild: stored spans read through the dialects into test cases.

In data-flow order: :mod:`.loading` (spans and their content events from the store),
:mod:`.dialects` (one canonical reading of any instrumentation's span), :mod:`.scope` (the span
tree and turns), :mod:`.targets` (what a rule evaluates, or why not), :mod:`.context` (retrieval
context and tool calls), :mod:`.cases` (the test case, or a ``Skip`` naming what is missing).
"""
