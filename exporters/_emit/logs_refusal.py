"""A logs endpoint that does not take logs: told apart from one that failed, said once, settled.

Jaeger, Tempo and Phoenix take OTLP traces only: their ``/v1/logs`` answers 404, 405 or 501.
Retrying the ``gen_ai.evaluation.result`` events there can never succeed, so once the endpoint
answered one of those codes, :class:`LogsRefusal` makes the event output *settle* what it is
given without sending it (the results stop owing the event: no endless backlog), logs one
WARNING naming the fixes, and counts the settled events. Every ``recheck_seconds`` one batch is
sent again, so an endpoint that starts taking logs (a Collector put in front) gets events again.

The status is read from the OTLP/HTTP exporter's HTTP client (the SDK's exporter returns only
FAILURE). Any other exporter (gRPC, in-memory, a custom one) has no status to read, and its
failures stay failures.

Example::

    refusal = LogsRefusal(OTLPLogExporter(endpoint="http://phoenix:6006/v1/logs"))
    ok = exporter.export(batch)
    if not ok and refusal.refused():   # the endpoint answered 404/405/501
        settle(batch)                  # not owed any more
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from spanjudge._core import metric_names as names

__all__ = ["NOT_TAKING_LOGS", "RECHECK_SECONDS", "LogsRefusal"]

logger = logging.getLogger("spanjudge.emitter")

# 404: no such route (Tempo, Jaeger: a Collector without a logs pipeline); 405: a route that is
# not a logs receiver (Phoenix 20.26 answers its web app's GET-only catch-all); 501: refused.
NOT_TAKING_LOGS = frozenset({404, 405, 501})
# How often an endpoint known not to take logs is tried again with one real batch.
RECHECK_SECONDS = 600.0


class _Tap:
    """The HTTP status of the last request the exporter's OTLP/HTTP client sent on this thread,
    and a log filter that silences the client's own ERROR line for the codes said above (the
    WARNING here replaces it)."""

    def __init__(self, exporter: Any) -> None:
        self.status: int | None = None
        self._inside = threading.local()
        self._logger: logging.Logger | None = None
        client: Any = getattr(exporter, "_client", None)
        export: Any = getattr(client, "export", None)
        self.endpoint = str(getattr(exporter, "_endpoint", "") or "") or None
        self.readable = callable(export)
        if not self.readable:
            return
        self._export: Callable[..., Any] = export
        client.export = self._tapped  # on this instance only
        found = getattr(client, "_logger", None)
        if isinstance(found, logging.Logger):
            self._logger = found
            found.addFilter(self._filter)

    def _tapped(self, data: bytes, *args: Any, **kwargs: Any) -> Any:
        self._inside.active = True
        try:
            result = self._export(data, *args, **kwargs)
        finally:
            self._inside.active = False
        code = getattr(result, "status_code", None)
        self.status = code if isinstance(code, int) else None
        return result

    def _filter(self, record: logging.LogRecord) -> bool:
        if not getattr(self._inside, "active", False):
            return True
        args = record.args if isinstance(record.args, tuple) else ()
        return not any(isinstance(a, int) and a in NOT_TAKING_LOGS for a in args)

    def take(self) -> int | None:
        status, self.status = self.status, None
        return status

    def close(self) -> None:
        if self._logger is not None:
            self._logger.removeFilter(self._filter)


class LogsRefusal:
    """Whether the event output's endpoint is known not to take logs, and since when.

    The emitter's event writer calls :meth:`declining` before sending a batch (True: settle it
    unsent), and :meth:`accepted` or :meth:`refused` after. ``on_settled(count)`` is called for
    every settled item (the telemetry counter)."""

    def __init__(
        self,
        exporter: Any,
        *,
        recheck_seconds: float = RECHECK_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        on_settled: Callable[[int], None] | None = None,
    ) -> None:
        self._tap = _Tap(exporter)
        self.recheck_seconds = recheck_seconds
        self.clock = clock
        self.on_settled = on_settled
        self.code: int | None = None  # the answer that said so, while it holds
        self.settled = 0
        self._next_try = 0.0

    @property
    def endpoint(self) -> str | None:
        return self._tap.endpoint

    def declining(self) -> bool:
        """True while the endpoint is known not to take logs and no re-check is due."""
        return self.code is not None and self.clock() < self._next_try

    def accepted(self) -> None:
        """The endpoint took a batch: events are sent again."""
        self._tap.take()
        if self.code is not None:
            logger.info(
                "the logs endpoint %s takes gen_ai.evaluation.result events again (it answered"
                " %s before); they are sent from now on",
                self.endpoint or "(OTLP logs)",
                self.code,
            )
            self.code = None

    def refused(self) -> bool:
        """After a failed export: True when the endpoint answered that it takes no logs (the
        batch is then to be settled, :meth:`settle`); warns the first time."""
        status = self._tap.take()
        if status not in NOT_TAKING_LOGS:
            return False
        if self.code is None:
            logger.warning(
                "the logs endpoint %s answered HTTP %s: it does not take OTLP logs (Jaeger, Tempo"
                " and Phoenix take traces only). Evaluation spans still go to the traces"
                " endpoint; gen_ai.evaluation.result events are not sent there and not kept"
                ' owed (counted in %s_total). Set outputs = ["span"] to stop making them, or'
                " send them to an OpenTelemetry Collector or Loki (a logs endpoint) to keep them",
                self.endpoint or "(OTLP logs)",
                status,
                names.EMITTER_EVENTS_NOT_ACCEPTED.replace(".", "_"),
            )
        else:
            logger.debug("the logs endpoint still answers %s", status)
        self.code = status
        self._next_try = self.clock() + self.recheck_seconds
        return True

    def settle(self, count: int) -> None:
        """``count`` items given up on as not deliverable to this endpoint."""
        self.settled += count
        if self.on_settled is not None and count:
            self.on_settled(count)

    def close(self) -> None:
        self._tap.close()
