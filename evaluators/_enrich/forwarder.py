"""Enrich mode: the worker forwards every span it receives to the trace backend, and the spans a
rule evaluates go out carrying their own scores as attributes.

How a span travels:

1. On arrival (:meth:`Enricher.outbox_entries`), each span gets an outbox entry, written in the
   same store transaction as the span. A span some rule would evaluate (its kind, filter and
   deterministic sample say so) is *held* until ``arrival + max_hold_seconds``; every other span
   is due at once. The rest of a trace is never held back: the backend shows the trace at once,
   and the evaluated span joins it with its scores.
2. After each monitor tick (:meth:`Enricher.release`), held spans whose evaluations are over
   (the trace was planned and no span-level job of theirs is open) become due.
3. A forwarder thread claims due entries under a lease, attaches
   :func:`~spanjudge.exporters._emit.evaluation_result.score_attributes` of the span's results,
   sends them to the backend in requests of at most ``batch_size`` spans (2,048) and
   ``max_request_bytes`` (4 MiB; :mod:`~spanjudge.evaluators._enrich.requests`), and
   marks the entries forwarded only once the exporter says it took them. A failed export
   leaves them in the outbox, due again after a backoff.

Nothing is lost or sent twice across a restart mid-hold: the outbox is in the store, an entry
is written once per span even when a client re-delivers it, and it is marked forwarded after
the backend's answer. A process killed while the backend takes a request (seconds, for a slow
one) would send it again; with a :class:`SendJournal` (the worker keeps one beside a SQLite
store) the next process takes it as delivered instead, so the window for a duplicate or a loss
is the milliseconds around the request itself.

A score that completes after its span went out anyway (the hold timed out) is not lost: it is
emitted as a child evaluation span, as in ``child-span`` mode. Conversation scores are always
child spans (their turns were forwarded long before the conversation went idle).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from opentelemetry.sdk.trace.export import SpanExporter
from tenacity import wait_exponential

from spanjudge._core.backoff import delay_after
from spanjudge._core.otlp_wire import WireSpan
from spanjudge._core.span_record import EvaluationRecord, SpanRecord
from spanjudge._store.base import Outbox
from spanjudge._store.models import OutboxEntry, OutboxItem
from spanjudge.errors import ConfigError
from spanjudge.evaluators._enrich import MAX_HOLD_SECONDS
from spanjudge.evaluators._enrich.requests import (
    MAX_REQUEST_BYTES,
    request_end,
    request_of,
)
from spanjudge.evaluators._plan.allocation import Allocation
from spanjudge.evaluators._plan.rules import Rule
from spanjudge.evaluators._plan.sampler import rule_keeps
from spanjudge.evaluators._rebuild.targets import Target, span_kind
from spanjudge.exporters._emit.span_forward import bytes_sender
from spanjudge.tracer import _attributes as attrs

if TYPE_CHECKING:
    from spanjudge._core.telemetry import Telemetry
    from spanjudge.exporters._emit.emitter import Emitter

logger = logging.getLogger("spanjudge.enrich")

# Seconds between two warnings about a failing backend, so an outage does not flood the log.
_WARN_EVERY = 30.0


class Enricher:
    """Holds, scores and forwards the worker's spans; see the module docstring.

    Example::

        enricher = Enricher(rules, store, OTLPSpanExporter(endpoint=backend), max_hold_seconds=120)
        store.write_spans(spans, now=now, outbox=enricher.outbox_entries(spans, now))
        enricher.start()          # forwarder thread
        monitor = Monitor(rules, store=store,
                          emitter=enricher.emitter_for_conversations(emitter),
                          after_tick=enricher.release)
    """

    def __init__(
        self,
        rules: Sequence[Rule],
        store: Outbox,
        span_exporter: SpanExporter,
        *,
        max_hold_seconds: float = MAX_HOLD_SECONDS,
        telemetry: Telemetry | None = None,
        clock: Callable[[], float] = time.time,
        batch_size: int = 2048,
        max_request_bytes: int = MAX_REQUEST_BYTES,
        lease_seconds: float = 60.0,
        retry_seconds: float = 1.0,
        max_retry_seconds: float = 60.0,
        poll_seconds: float = 0.5,
        linger_seconds: float = 0.1,
        owner: str | None = None,
        allocation: Allocation | None = None,
        journal: str | os.PathLike[str] | None = None,
    ) -> None:
        if max_hold_seconds <= 0:
            raise ConfigError("max_hold_seconds must be positive")
        if batch_size < 1:
            raise ConfigError("batch_size must be >= 1")
        if max_request_bytes < 1:
            raise ConfigError("max_request_bytes must be >= 1")
        self.span_rules = [r for r in rules if r.target != "conversation"]
        self.store = store
        # a budget or precision rule samples with its allocation's probability, as the
        # planner does; the planner's own allocation may be passed to share its reads
        if allocation is None and any(r.has_target for r in self.span_rules):
            allocation = Allocation(store)
        self.allocation = allocation
        self.span_exporter = span_exporter
        self._send_bytes = bytes_sender(span_exporter)
        self.max_hold_seconds = max_hold_seconds
        self.telemetry = telemetry
        self.clock = clock
        self.batch_size = batch_size
        self.max_request_bytes = max_request_bytes
        self.lease_seconds = lease_seconds
        self.retry_seconds = retry_seconds
        self.max_retry_seconds = max_retry_seconds
        self.poll_seconds = poll_seconds
        self.linger_seconds = linger_seconds
        self._backoff = wait_exponential(multiplier=retry_seconds, max=max_retry_seconds)
        self.owner = owner or uuid.uuid4().hex[:12]
        self.forwarded = 0  # spans the backend took
        self.forwarded_held = 0  # of which held for their scores
        self.failed = 0  # span sends that failed (each retried later)
        self.missing = 0  # entries whose span was deleted before it could be sent
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._forward_lock = threading.Lock()
        self._last_warning = 0.0
        self.journal = SendJournal.open(journal) if journal is not None else None

    # ------------------------------------------------------------------ arrival
    def holds(self, span: SpanRecord) -> bool:
        """Whether some span-level rule will evaluate ``span`` (kind, filter and sample)."""
        if attrs.GEN_AI_EVALUATION_NAME in span.attributes:
            return False
        kind: str | None = None
        for rule in self.span_rules:
            if rule.target == "trace":
                target_id = span.trace_id
                if not span.is_root:
                    continue
            else:
                if kind is None:
                    kind = span_kind(span) or ""
                if kind != rule.target:
                    continue
                target_id = span.span_id
            if rule.matches_span(span) and rule_keeps(
                rule.name,
                rule.sample_by,
                target_id,
                span.trace_id,
                span.conversation_id,
                self._rate(rule, span, target_id),
            ):
                return True
        return False

    def _rate(self, rule: Rule, span: SpanRecord, target_id: str) -> float:
        """The probability the planner will sample this target with: the rule's rate, or for
        a budget or precision rule its allocation's for the span's segment and risk signals
        (read from this span alone: its trace's other spans may not have arrived)."""
        if self.allocation is None or not rule.has_target:
            return rule.sample_rate
        target = Target(
            rule.target, target_id, span.trace_id, span.span_id,
            span.conversation_id, span, span.service_name, span.end_time_unix_nano,
        )  # fmt: skip
        return self.allocation.probability(rule, target, [span], self.clock())

    def outbox_entries(self, spans: Sequence[SpanRecord], now: float) -> list[OutboxEntry]:
        """One entry per span: held until ``now + max_hold_seconds`` or due at ``now``; with
        the span's bytes as received when ``spans`` is a
        :class:`~spanjudge._receive.decode.ReceivedSpans`."""
        hold_until = now + self.max_hold_seconds
        wire: Sequence[WireSpan | None] = getattr(spans, "wire", None) or [None] * len(spans)
        entries = []
        for span, raw in zip(spans, wire, strict=True):
            try:
                hold = self.holds(span) if self.span_rules else False
            except Exception:  # one odd span must not refuse the whole request
                logger.debug("hold decision failed for span %s", span.span_id, exc_info=True)
                hold = False
            entries.append(
                OutboxEntry(
                    span.trace_id,
                    span.span_id,
                    hold,
                    hold_until if hold else now,
                    raw.span if raw is not None else None,
                    raw.envelope if raw is not None else None,
                )
            )
        return entries

    def received(self, spans: Sequence[SpanRecord]) -> None:
        """Spans were stored: wake the forwarder so pass-through spans leave at once."""
        self._wake.set()

    def release(self) -> int:
        """Make held spans whose evaluations are over due now (call after each monitor tick)."""
        try:
            released = self.store.release_held(now=self.clock())
        except Exception:
            logger.warning("could not release held spans; next tick retries", exc_info=True)
            return 0
        if released:
            self._wake.set()
        return released

    # ------------------------------------------------------------------ forwarding
    def forward_once(self) -> int:
        """Claim one batch of due entries and send it. Returns how many entries it claimed."""
        with self._forward_lock:
            return self._forward_once()

    def _forward_once(self) -> int:
        now = self.clock()
        if self.journal is not None:
            self._settle_journal(now)
        claim = self.store.claim_outbox(
            owner=f"{self.owner}:{uuid.uuid4().hex}",
            limit=self.batch_size,
            lease_seconds=self.lease_seconds,
            now=now,
        )
        if claim.missing:
            # retention deleted the span before it could be sent (a backend down for days)
            self.store.mark_forwarded(claim.missing, now=now)
            self.missing += len(claim.missing)
            logger.warning(
                "%d spans were deleted before they could be forwarded", len(claim.missing)
            )
        if not claim.items:
            return len(claim.missing)
        items = claim.items
        while items:
            end, count = request_end(
                items, max_spans=self.batch_size, max_bytes=self.max_request_bytes
            )
            chunk, items = items[:end], items[end:]
            if not self._send(chunk):
                # the backend refuses: the rest of the claim waits for the same backoff
                self._give_back([*chunk, *items], failed=count)
                break
        return len(claim.items) + len(claim.missing)

    def _settle_journal(self, now: float) -> None:
        """A request whose outcome was not recorded (the process was killed while the backend
        took it, or the store failed after its answer) is taken as delivered: the backend got
        its body, which is what a kill during a slow backend's answer leaves."""
        assert self.journal is not None
        unsettled = self.journal.in_flight()
        if unsettled:
            self.store.mark_forwarded(unsettled, now=now)
            logger.warning(
                "%d outbox entries were being sent when the last forward stopped; taken as "
                "delivered, not sent again",
                len(unsettled),
            )
        self.journal.clear()

    def _send(self, items: Sequence[OutboxItem]) -> bool:
        ids = [item.entry_id for item in items]
        try:
            body = request_of(items)
            if self.journal is not None:
                self.journal.sending(ids)
            ok = self._send_bytes(body)
        except Exception:
            logger.debug("span forward raised", exc_info=True)
            ok = False
        if not ok:
            if self.journal is not None:
                self.journal.clear()  # refused: the entries are given back and sent again
            return False
        self.store.mark_forwarded(ids, now=self.clock())
        if self.journal is not None:
            self.journal.clear()
        count = sum(item.spans for item in items)
        held = sum(item.spans for item in items if item.hold)
        self.forwarded += count
        self.forwarded_held += held
        if self.telemetry is not None:
            self.telemetry.record_enrich_forwarded(held, held=True)
            self.telemetry.record_enrich_forwarded(count - held, held=False)
        return True

    def _give_back(self, items: Sequence[OutboxItem], *, failed: int) -> None:
        """Entries back to the outbox after a refused send (``failed`` spans were in it)."""
        attempts = max(item.attempts for item in items)
        delay = delay_after(self._backoff, attempts)
        self.store.retry_outbox([item.entry_id for item in items], retry_at=self.clock() + delay)
        self.failed += failed
        if self.telemetry is not None:
            self.telemetry.record_enrich_forward_failed(failed)
        if time.monotonic() - self._last_warning >= _WARN_EVERY:
            self._last_warning = time.monotonic()
            logger.warning(
                "forwarding %d spans to the backend failed; they stay in the outbox and are "
                "sent again in %.0f s",
                failed,
                delay,
            )

    def drain(self, timeout: float = 10.0) -> int:
        """Forward what is due now until nothing is left or ``timeout`` passed (entries that
        fail stay in the outbox). Returns how many entries were claimed."""
        deadline = time.monotonic() + timeout
        total = 0
        while time.monotonic() < deadline:
            failed_before = self.failed
            claimed = self.forward_once()
            total += claimed
            if claimed < self.batch_size or self.failed != failed_before:
                break
        return total

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                claimed = self.forward_once()
            except Exception:  # the store is down: try again after a pause
                logger.warning("enrich forwarder pass failed; retrying", exc_info=True)
                claimed = 0
            if claimed >= self.batch_size:
                continue
            self._wake.wait(self.poll_seconds)
            # let the writes of the next moment gather: one claim, one request and one mark
            # for many received batches, instead of store transactions per received request
            self._stop.wait(self.linger_seconds)
            self._wake.clear()

    def start(self) -> Enricher:
        """Start the forwarder thread (idempotent)."""
        if self._thread is None or not self._thread.is_alive():
            self._stop.clear()
            self._thread = threading.Thread(
                target=self._run, name="spanjudge-enrich-forwarder", daemon=True
            )
            self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the thread, then send what is due (held spans stay in the store for the next
        start or another worker)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
        try:
            self.drain(timeout)
        except Exception:
            logger.warning("final forward failed; the spans stay in the outbox", exc_info=True)
        if self.journal is not None:
            self.journal.close()
            self.journal = None

    # ------------------------------------------------------------------ scores
    def emitter_for_conversations(self, emitter: Emitter) -> EnrichEmitter:
        """The monitor's emitter in enrich mode: span scores ride on their spans."""
        return EnrichEmitter(emitter, self)

    def waiting(self, record: EvaluationRecord) -> bool:
        """Whether ``record`` will ride on its span (the span has not gone out yet)."""
        if record.target_type == "conversation" or not record.trace_id or not record.span_id:
            return False
        try:
            return self.store.outbox_waiting(record.trace_id, record.span_id, now=self.clock())
        except Exception:  # cannot tell: a child span is better than a lost score
            logger.debug("outbox lookup failed", exc_info=True)
            return False


class SendJournal:
    """The entry ids of the request being sent, in a file beside the store, written (and
    fsynced) before the request goes and removed once its answer is recorded. A process killed
    while a slow backend took the request leaves the file; the next forward marks those entries
    forwarded instead of sending them again: 6 SIGKILLs against a backend taking 2 s a request
    sent 62 of 108 spans twice. The price: a kill after the file is written and before the
    backend has the request loses that request: milliseconds against a backend that accepts the
    connection at once, up to the exporter's timeout against one that drops connection attempts
    (the settle says how many entries at WARNING, so an operator can tell).

    The file is locked (``flock``) while a process uses it: a second worker on the same SQLite
    file gets no journal (and the earlier behaviour: such entries are sent again).
    """

    def __init__(self, path: Path, lock: Any) -> None:
        self.path = path
        self._lock = lock  # the open lock file, held for the process's life

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> SendJournal | None:
        """The journal at ``path``, or None when another live process holds it."""
        import fcntl

        target = Path(path)
        lock = open(f"{target}.lock", "a+b")  # noqa: SIM115 - held until the process ends
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            lock.close()
            logger.info("enrich: %s is in use by another process; no send journal", target)
            return None
        return cls(target, lock)

    def sending(self, entry_ids: Sequence[int]) -> None:
        temp = self.path.with_name(self.path.name + ".part")
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, " ".join(map(str, entry_ids)).encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temp, self.path)

    def in_flight(self) -> list[int]:
        try:
            text = self.path.read_text(encoding="ascii")
        except FileNotFoundError:
            return []
        except (OSError, UnicodeDecodeError):
            logger.warning("enrich: unreadable send journal %s; ignored", self.path)
            return []
        return [int(part) for part in text.split() if part.isdigit()]

    def clear(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()

    def close(self) -> None:
        """Let another process take the journal (what a process's end does too)."""
        self._lock.close()


class EnrichEmitter:
    """Wraps the score emitter in enrich mode: a result whose span is still waiting in the
    outbox gets no evaluation span (it rides on the span as attributes, and is confirmed for
    the ``span`` output at once); every other result (conversations, spans already forwarded)
    becomes a child evaluation span as usual. The ``event`` output is not affected: the
    ``gen_ai.evaluation.result`` event goes out for every result."""

    def __init__(self, emitter: Emitter, enricher: Enricher) -> None:
        self.emitter = emitter
        self.enricher = enricher
        self.outputs = emitter.outputs
        self._riding: list[tuple[Any, str]] = []  # (key, "span") of results riding on spans
        self._lock = threading.Lock()

    def emit(
        self, record: EvaluationRecord, key: Any = None, *, outputs: Collection[str] | None = None
    ) -> None:
        wanted = [o for o in self.outputs if outputs is None or o in outputs]
        if "span" in wanted and self.enricher.waiting(record):
            # nothing to send now: the outbox sends the span with this result on it
            wanted.remove("span")
            if key is not None:
                with self._lock:
                    self._riding.append((key, "span"))
        if wanted:
            self.emitter.emit(record, key, outputs=wanted)

    def take_confirmed(self) -> list[tuple[Any, str]]:
        with self._lock:
            riding, self._riding = self._riding, []
        return riding + list(self.emitter.take_confirmed())

    def force_flush(
        self, timeout_seconds: float = 10, *, outputs: Collection[str] | None = None
    ) -> bool:
        return self.emitter.force_flush(timeout_seconds, outputs=outputs)

    def shutdown(self, timeout_seconds: float = 10) -> None:
        self.emitter.shutdown(timeout_seconds)
