"""Delivery: each stored result leaves once per output, confirmed by that output's exporter.

Results are stored before they are emitted. The emitter hands back ``(job id, output)`` once an
output's exporter accepted the item; only then is the result marked emitted *for that output*.
A process killed before an export, or a backend that refused it, leaves the output unmarked and
the result is emitted again (same evaluation span id; the event again) after a lease, by this or
another process. A slow or dead backend delays marking, never the evaluations: waits are bounded
and, once one output's exporter is stuck, ticks stop waiting on it (and stop re-sending to it)
until its queue drains, while the other output goes on.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from spanjudge.exporters.store import SpanStore

if TYPE_CHECKING:
    from spanjudge.exporters.emitter import Emitter

# Orphaned results re-sent per tick at most.
REEMIT_LIMIT = 1000


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
        return len(confirmed)

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
