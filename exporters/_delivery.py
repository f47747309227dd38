"""Delivery: each stored result leaves once per output, confirmed by that output's exporter.

Results are stored before they are emitted. The emitter hands back ``(job id, output)`` once an
output's exporter accepted the item; only then is the result marked emitted *for that output*.
A process killed before an export, or a backend that refused it, leaves the output unmarked and
the result is emitted again (same evaluation span id; the event again) after a lease, by this or
another process. A slow or dead backend delays marking, never the evaluations: waits are bounded
and, once one output's exporter is stuck, ticks stop waiting on it (and stop re-sending to it)
until its queue drains, while the other output goes on. An event output whose endpoint takes no
logs (a traces-only backend: Jaeger, Tempo, Phoenix) confirms its events settled unsent
(:mod:`spanjudge.exporters._emit.logs_refusal`): they are marked like delivered ones, so no
result owes that endpoint an event it can never take.

The result sinks (``phoenix``, ``mlflow``: :mod:`spanjudge.exporters._sinks`) are confirmed the
same way and share the store's mark of the ``span`` output: a result is marked for ``span``
once the evaluation span *and* every sink took it (``COLUMN_OF``), so a sink that was down or a
process killed mid-delivery leaves the mark unset and the result is delivered again, to the
outputs that did not confirm it yet (those that did, in this process, are remembered). The
products' writes are idempotent (:mod:`spanjudge.exporters._sinks`) and the evaluation span
keeps its id, so a result delivered again after a restart is still one annotation and one span.
A person's label has one mark too: set once the event output and every sink took it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Iterable
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from spanjudge._core.kinds import SINKS
from spanjudge._core.span_record import FeedbackRecord
from spanjudge._store.sql import SpanStore

if TYPE_CHECKING:
    from spanjudge.exporters._emit.emitter import Emitter

# Orphaned results re-sent per tick at most.
REEMIT_LIMIT = 1000
# Partial confirmations remembered at most (oldest forgotten: re-sent to every output).
PARTIAL_MAX = 100_000
LABEL_MARK = "label"


def column_of(output: str) -> str:
    """The store's delivery mark an output counts towards: a sink shares the span's."""
    return "span" if output in SINKS else output


class Confirmations:
    """Which outputs took each key, until all outputs of its mark did.

    Example::

        marks = Confirmations({"span": {"span", "phoenix"}})
        marks.add(7, "span")      # -> [] (phoenix has not taken it yet)
        marks.add(7, "phoenix")   # -> [(7, "span")]: mark it
    """

    def __init__(
        self, members: dict[str, set[str]], column: Callable[[str], str] = column_of
    ) -> None:
        self.members = members
        self.column = column
        self._taken: dict[tuple[Any, str], set[str]] = {}

    def add(self, key: Any, output: str) -> list[tuple[Any, str]]:
        """Record that ``output`` took ``key``; the ``(key, mark)`` now complete."""
        column = self.column(output)
        wanted = self.members.get(column, {output})
        taken = self._taken.setdefault((key, column), set())
        taken.add(output)
        if not wanted <= taken:
            if len(self._taken) > PARTIAL_MAX:
                del self._taken[next(iter(self._taken))]
            return []
        del self._taken[(key, column)]
        return [(key, column)]

    def owed(self, key: Any, columns: Iterable[str]) -> list[str]:
        """The outputs that still owe ``key`` for the marks ``columns``."""
        out: list[str] = []
        for column in columns:
            taken = self._taken.get((key, column), set())
            out += [o for o in sorted(self.members.get(column, {column})) if o not in taken]
        return out


def _members(outputs: Collection[str]) -> dict[str, set[str]]:
    members: dict[str, set[str]] = {}
    for output in outputs:
        members.setdefault(column_of(output), set()).add(output)
    return members


@runtime_checkable
class FeedbackEmitter(Protocol):
    """An emitter that also sends human labels (the event output and the result sinks)."""

    outputs: Any
    label_outputs: tuple[str, ...]

    def emit_feedback(
        self,
        feedback: FeedbackRecord,
        span_id: str | None,
        *,
        outputs: Collection[str] | None = None,
    ) -> bool: ...

    def take_confirmed_feedback(self) -> list[tuple[int, str]]: ...


def feedback_emitter(emitter: Any) -> FeedbackEmitter | None:
    """The emitter that sends labels: ``emitter`` or the one it wraps (enrich mode)."""
    for candidate in (emitter, getattr(emitter, "emitter", None)):
        if isinstance(candidate, FeedbackEmitter) and candidate.label_outputs:
            return candidate
    return None


def send_feedback(
    store: SpanStore,
    emitter: FeedbackEmitter,
    feedback: FeedbackRecord,
    *,
    outputs: Collection[str] | None = None,
) -> bool:
    """Queue a label on its span (a trace label: the root span; a conversation label: the
    latest turn) for every label output, or only ``outputs``. False when the store no longer
    knows the target."""
    found = store.feedback_target(
        trace_id=feedback.trace_id,
        span_id=feedback.span_id,
        conversation_id=feedback.conversation_id,
    )
    if found is None:
        return False
    trace_id, span_id = found
    labelled = dataclasses.replace(feedback, trace_id=trace_id)
    return emitter.emit_feedback(labelled, span_id, outputs=outputs)


class Delivery:
    """Marks confirmed outputs and re-emits what a crash or an outage left unsent.

    Example::

        delivery = Delivery(store, emitter, clock=time.time, lease_seconds=300)
        delivery.mark_confirmed(now, wait=2.0)
        delivery.reemit(now)
    """

    def __init__(
        self,
        store: SpanStore,
        emitter: Emitter,
        *,
        clock: Callable[[], float],
        lease_seconds: float,
    ) -> None:
        self.store = store
        self.emitter = emitter
        self.clock = clock
        self.lease_seconds = lease_seconds
        self.stalled: set[str] = set()  # outputs whose last flush timed out
        self.labels = feedback_emitter(emitter)
        self.results = Confirmations(_members(emitter.outputs))
        label_outputs = set(self.labels.label_outputs) if self.labels is not None else set()
        # a label has one mark, set once every label output took it
        self.feedback = Confirmations({LABEL_MARK: label_outputs}, lambda _: LABEL_MARK)

    def mark_confirmed(self, now: float, *, wait: float) -> int:
        """Mark emitted, per output, what the exporters confirmed; wait up to ``wait`` seconds
        for outputs that are not known to be stuck. Returns how many (result, output) pairs."""
        if wait > 0:
            for output in self.emitter.outputs:
                flushed = self.emitter.force_flush(
                    0 if output in self.stalled else wait, outputs=[output]
                )
                if flushed:
                    self.stalled.discard(output)
                else:
                    self.stalled.add(output)
        confirmed = self.emitter.take_confirmed()
        by_output: dict[str, list[int]] = {}
        for key, name in confirmed:
            for job_id, column in self.results.add(key, name):
                by_output.setdefault(column, []).append(job_id)
        for name, job_ids in by_output.items():
            self.store.mark_emitted(job_ids, now=now, output=name)
        if self.labels is not None:
            done = [
                feedback_id
                for key, name in self.labels.take_confirmed_feedback()
                for feedback_id, _ in self.feedback.add(key, name)
            ]
            self.store.mark_feedback_emitted(done, now=now)
        return len(confirmed)

    def reemit_feedback(self, now: float, *, flush_timeout: float) -> int:
        """Send the events of labels stored over a lease ago and not sent yet (labels posted to
        a worker go out at once; these are the ones written by Python, the CLI or a process
        that died first). Returns how many."""
        if self.labels is None or self.stalled & set(self.labels.label_outputs):
            return 0
        pending = self.store.unemitted_feedback(limit=REEMIT_LIMIT)
        stale = [f for f in pending if f.created_at <= now - self.lease_seconds]
        sent = sum(
            1
            for f in stale
            if send_feedback(
                self.store, self.labels, f, outputs=self.feedback.owed(f.feedback_id, [LABEL_MARK])
            )
        )
        if sent:
            self.mark_confirmed(now, wait=flush_timeout)
        return sent

    def reemit(self, now: float, *, flush_timeout: float) -> int:
        """Send again what stored results still owe an output. Returns how many results."""
        self.mark_confirmed(now, wait=0)  # what the exporters took since the last tick
        ready = []
        for output in self.emitter.outputs:
            if output in self.stalled and not self.emitter.force_flush(0, outputs=[output]):
                continue  # still stuck on earlier items: re-sending would only drop
            self.stalled.discard(output)
            ready.append(output)
        # a mark is re-sent for only when every output counting towards it is ready
        columns = [
            column
            for column, members in self.results.members.items()
            if all(output in ready for output in members)
        ]
        if not columns:
            return 0
        pending = self.store.unemitted_results(outputs=columns, limit=REEMIT_LIMIT)
        # A live evaluator emits right after storing; only results older than a lease are
        # orphans of a crash or of a backend that was down (else we would race the process
        # that is about to emit them).
        stale = [
            item
            for item in pending
            if item.record.finished_at is None
            or item.record.finished_at <= now - self.lease_seconds
        ]
        for item in stale:
            owed = self.results.owed(item.job_id, item.outputs)
            self.emitter.emit(item.record, item.job_id, outputs=owed)
        if stale:
            self.mark_confirmed(now, wait=flush_timeout)
        return len(stale)
