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
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from spanjudge._core.span_record import FeedbackRecord
from spanjudge._store.base import SpanStore

if TYPE_CHECKING:
    from spanjudge.exporters._emit.emitter import Emitter

# Orphaned results re-sent per tick at most.
REEMIT_LIMIT = 1000


@runtime_checkable
class FeedbackEmitter(Protocol):
    """An emitter that also sends human labels (the score emitter's event output)."""

    outputs: Any

    def emit_feedback(self, feedback: FeedbackRecord, span_id: str | None) -> bool: ...

    def take_confirmed_feedback(self) -> list[int]: ...


def feedback_emitter(emitter: Any) -> FeedbackEmitter | None:
    """The emitter that sends labels: ``emitter`` or the one it wraps (enrich mode)."""
    for candidate in (emitter, getattr(emitter, "emitter", None)):
        if isinstance(candidate, FeedbackEmitter) and "event" in candidate.outputs:
            return candidate
    return None


def send_feedback(store: SpanStore, emitter: FeedbackEmitter, feedback: FeedbackRecord) -> bool:
    """Queue a label's event on its span (a trace label: the root span; a conversation label:
    the latest turn). False when the store no longer knows the target."""
    found = store.feedback_target(
        trace_id=feedback.trace_id,
        span_id=feedback.span_id,
        conversation_id=feedback.conversation_id,
    )
    if found is None:
        return False
    trace_id, span_id = found
    return emitter.emit_feedback(dataclasses.replace(feedback, trace_id=trace_id), span_id)


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
            by_output.setdefault(name, []).append(key)
        for name, job_ids in by_output.items():
            self.store.mark_emitted(job_ids, now=now, output=name)
        if self.labels is not None:
            self.store.mark_feedback_emitted(self.labels.take_confirmed_feedback(), now=now)
        return len(confirmed)

    def reemit_feedback(self, now: float, *, flush_timeout: float) -> int:
        """Send the events of labels stored over a lease ago and not sent yet (labels posted to
        a worker go out at once; these are the ones written by Python, the CLI or a process
        that died first). Returns how many."""
        if self.labels is None or "event" in self.stalled:
            return 0
        pending = self.store.unemitted_feedback(limit=REEMIT_LIMIT)
        stale = [f for f in pending if f.created_at <= now - self.lease_seconds]
        sent = sum(1 for f in stale if send_feedback(self.store, self.labels, f))
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
        if not ready:
            return 0
        pending = self.store.unemitted_results(outputs=ready, limit=REEMIT_LIMIT)
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
            self.emitter.emit(item.record, item.job_id, outputs=item.outputs)
        if stale:
            self.mark_confirmed(now, wait=flush_timeout)
        return len(stale)
