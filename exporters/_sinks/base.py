"""What every result sink shares: the item it writes, the HTTP client, and how a product's
answer is read (written, try again later, or refused for good).

A sink's :meth:`HttpSink.export` takes a batch and answers True when every item is settled:
written (or already there: every write is idempotent) or refused for good. False leaves the
batch unconfirmed: the emitter counts it ``export_failed`` and the delivery loop sends it again
after a lease, which is harmless since a second write of the same result changes nothing.

Refused for good, each said once per sink and reason with one WARNING and counted
(``on_refused``): the product does not take our key (HTTP 401/403), cannot read the request
(400/422), or does not know the trace or span the result belongs to
:data:`UNKNOWN_TARGET_GRACE_SECONDS` after the result was made (before that, it is a product
that has not ingested the app's spans yet: tried again). Tried again: no connection, a timeout,
HTTP 429 or 5xx.

Example::

    class MySink(HttpSink):
        name = "mine"

        def write(self, items: list[SinkItem]) -> list[bool]:
            answer = self.post("/annotations", [body(item) for item in items])
            return [self.settled(answer, item, "annotations") for item in items]
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import httpx

from spanjudge._core.log_text import log_text
from spanjudge._core.span_record import EvaluationRecord, FeedbackRecord
from spanjudge._core.urls import redact_url

__all__ = [
    "REFUSED",
    "UNKNOWN_TARGET_GRACE_SECONDS",
    "HttpSink",
    "ResultSink",
    "SinkItem",
]

logger = logging.getLogger("spanjudge.emitter")

# The ``reason`` of the emitter's dropped counter for an item a product refused for good.
REFUSED = "refused"
# A product that does not know a result's trace or span this long after the result was made
# never will (the app's spans reach it before the worker judged them, as a rule: a Collector
# fans out to both): the result is refused for good. Sooner, it is tried again.
UNKNOWN_TARGET_GRACE_SECONDS = 600.0
# Characters of a product's error answer quoted in the WARNING.
ANSWER_CHARS = 300
TIMEOUT_SECONDS = 10.0


@dataclass(frozen=True)
class SinkItem:
    """One thing to write: a judge's result (``record``) or a person's label (``label``, on
    ``span_id`` of its trace: the root span for a trace label, the latest turn for a
    conversation label)."""

    record: EvaluationRecord | None = None
    label: FeedbackRecord | None = None
    span_id: str | None = None

    @classmethod
    def of(cls, record: EvaluationRecord) -> SinkItem:
        return cls(record=record)

    @property
    def trace_id(self) -> str | None:
        if self.record is not None:
            return self.record.trace_id
        return self.label.trace_id if self.label is not None else None

    @property
    def made_at(self) -> float | None:
        """When the result or label was made (Unix seconds), for the unknown-target grace."""
        if self.record is not None:
            return self.record.finished_at
        return self.label.created_at if self.label is not None else None

    @property
    def scored(self) -> bool:
        """A result with a score (judge errors and skips have nothing to annotate: they stay
        on the evaluation span) or a label."""
        if self.label is not None:
            return True
        record = self.record
        return record is not None and record.status == "scored" and record.score is not None


class ResultSink(Protocol):
    """What the score emitter needs of a sink."""

    name: str

    def export(self, items: list[SinkItem]) -> bool: ...

    def close(self) -> None: ...


class HttpSink:
    """A product's HTTP API, read the same way for every sink (see the module docstring).

    Subclasses set ``name`` and implement :meth:`write`, which answers per item whether it is
    settled (True) or should be tried again (False).
    """

    name = "sink"

    def __init__(
        self,
        endpoint: str,
        *,
        headers: dict[str, str] | None = None,
        auth: tuple[str, str] | None = None,
        timeout: float = TIMEOUT_SECONDS,
        clock: Callable[[], float] = time.time,
        on_refused: Callable[[int], None] | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.endpoint = endpoint.rstrip("/")
        self.clock = clock
        self.on_refused = on_refused
        self.refused = 0  # items refused for good
        self.written = 0  # items settled by a write (or found written)
        self._warned: set[str] = set()
        self._lock = threading.Lock()
        self.client = httpx.Client(
            base_url=self.endpoint,
            headers=headers or {},
            auth=auth,
            timeout=timeout,
            transport=transport,
            follow_redirects=False,  # a key goes to the configured origin only
        )

    # ------------------------------------------------------------------ the sink interface
    def export(self, items: list[SinkItem]) -> bool:
        """Write ``items``; True when every one is settled (see the module docstring)."""
        todo = [item for item in items if item.scored]
        if not todo:
            return True
        try:
            settled = self.write(todo)
        except httpx.HTTPError as exc:
            logger.info("%s: %s unreachable (%s); tried again later", self.name, self.where, exc)
            return False
        self.written += sum(1 for ok in settled if ok)
        return all(settled)

    def write(self, items: list[SinkItem]) -> list[bool]:
        raise NotImplementedError

    def close(self) -> None:
        self.client.close()

    # ------------------------------------------------------------------ reading answers
    @property
    def where(self) -> str:
        return redact_url(self.endpoint)

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        return self.client.request(method, path, **kwargs)

    def answer_settles(self, answer: httpx.Response, items: list[SinkItem], what: str) -> bool:
        """Whether ``answer`` to a write of ``items`` settles them: written (2xx), or refused
        for good (counted and said once); False: try again later. A 404 is decided per item
        by its age (:meth:`unknown_target`)."""
        code = answer.status_code
        if 200 <= code < 300:
            return True
        if code == 404:
            return all(self.unknown_target(item, what, answer) for item in items)
        if code in (401, 403):
            self.refuse(
                len(items),
                f"auth{code}",
                f"{self.where} refused the key (HTTP {code}) for {what}: check the sink's"
                " key setting",
                answer,
            )
            return True
        if code in (400, 409, 413, 422):
            self.refuse(len(items), f"bad{code}", f"{self.where} cannot take {what}", answer)
            return True
        logger.info(
            "%s: %s answered HTTP %d for %s; tried again later", self.name, self.where, code, what
        )
        return False

    def unknown_target(self, item: SinkItem, what: str, answer: httpx.Response | None) -> bool:
        """The product does not know the item's trace or span: settled (refused) once the item
        is older than the grace, else False (it may not have ingested the app's spans yet)."""
        made = item.made_at
        if made is not None and self.clock() - made < UNKNOWN_TARGET_GRACE_SECONDS:
            return False
        self.refuse(
            1,
            "unknown",
            f"{self.where} does not know the trace or span of {what} (does the app send its"
            " spans there?)",
            answer,
        )
        return True

    def refuse(self, count: int, reason: str, message: str, answer: httpx.Response | None) -> None:
        """Count ``count`` items refused for good; the first time for ``reason``, one WARNING."""
        with self._lock:
            self.refused += count
            first = reason not in self._warned
            self._warned.add(reason)
        if self.on_refused is not None:
            self.on_refused(count)
        if first:
            said = log_text(answer.text, ANSWER_CHARS) if answer is not None else ""
            logger.warning(
                "%s sink: %s; such results are not written there (counted as"
                " spanjudge_emitter_dropped_spans_total{output=%r, reason=%r}; said once)%s",
                self.name,
                message,
                self.name,
                REFUSED,
                f": {said}" if said else "",
            )
