"""One output of the score emitter: a bounded queue, a writer thread, an exporter.

The writer exports each batch; the keys of an accepted batch are handed to ``on_confirmed``
(``(key, output)`` pairs), a failed batch is counted dropped (``export_failed``). The event
output also has a :class:`~spanjudge.exporters._emit.logs_refusal.LogsRefusal`: a batch its
endpoint can never take (a traces-only backend) is settled, confirmed without being sent.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from spanjudge._core import metric_names as names
from spanjudge._core.kinds import Output, Sink
from spanjudge._core.span_record import EvaluationRecord
from spanjudge.exporters._batch import BatchWorker
from spanjudge.exporters._emit.logs_refusal import LogsRefusal

__all__ = ["Channel"]

logger = logging.getLogger("spanjudge.emitter")

_BATCH = 512
_FLUSH_INTERVAL = 0.5


class Channel:
    """One output: builds its item from a record and exports batches of them from a writer
    thread; with a ``refusal`` (the event output), it settles what its endpoint can never take.

    Example::

        channel = Channel("span", build, export, max_queue=2048, on_dropped=count,
                          on_confirmed=mark)
        channel.worker.put([(channel.build(record), job_id)])
    """

    def __init__(
        self,
        output: Output | Sink,
        build: Callable[[EvaluationRecord], Any],
        export: Callable[[list[Any]], bool],
        *,
        max_queue: int,
        on_dropped: Callable[[str, int], None],
        on_confirmed: Callable[[list[Any]], None],
        refusal: LogsRefusal | None = None,
    ) -> None:
        self.output = output
        self.build = build
        self._export = export
        self._on_confirmed = on_confirmed
        self.refusal = refusal
        self.exported = 0
        self.worker: BatchWorker[tuple[Any, Any]] = BatchWorker(
            self._handle,
            name=f"spanjudge-emitter-{output}",
            max_queue=max_queue,
            batch_size=_BATCH,
            flush_interval_seconds=_FLUSH_INTERVAL,
            on_dropped=on_dropped,
        )

    def _handle(self, batch: list[tuple[Any, Any]]) -> None:
        refusal = self.refusal
        if refusal is not None and refusal.declining():
            self._settle(batch, refusal)
            return
        try:
            ok = self._export([item for item, _ in batch])
        except Exception:
            logger.warning("%s export raised", self.output, exc_info=True)
            ok = False
        if refusal is not None:
            if ok:
                refusal.accepted()
            elif refusal.refused():
                self._settle(batch, refusal)
                return
        if not ok:
            self.worker.drop(names.EXPORT_FAILED, len(batch))
            return
        self.exported += len(batch)
        self._confirm(batch)

    def _settle(self, batch: list[tuple[Any, Any]], refusal: LogsRefusal) -> None:
        # not deliverable to this endpoint, ever: confirmed so the caller stops owing them
        refusal.settle(len(batch))
        self._confirm(batch)

    def _confirm(self, batch: list[tuple[Any, Any]]) -> None:
        self._on_confirmed([(key, self.output) for _, key in batch if key is not None])
