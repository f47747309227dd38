"""The span store's contract: the records it keeps and one small protocol per consumer need.

A store keeps three things: spans (with their arrival time), evaluation jobs (one row per
(rule, target) pair, ever) and their results. Every time is Unix seconds passed in by the caller,
so tests and replays drive the clock. Backend failures surface as :class:`StoreError` from the
call that hit them; the next call reconnects, so a caller that catches and retries recovers when
the database is back.

Example::

    store = open_store("sqlite:///./spanjudge.db")
    store.write_spans(records, now=time.time())
    for trace_id in store.settled_traces(settle_seconds=10, now=time.time()):
        spans = store.trace_spans(trace_id)

Each consumer depends on the part it uses, as the OpenTelemetry SDK keeps its exporter interface
to a few methods: :class:`SpanLog` (spans in, settled targets out), :class:`EventLog` (GenAI
content log events in, by trace out), :class:`JobQueue`, :class:`ResultStore`, :class:`Outbox`
(enrich mode), :class:`FeedbackLog` (human labels), :class:`JudgeCache` (results reused) and
:class:`StoreAdmin`. :class:`SpanStore` is all of them: what ``open_store()`` returns. The three
beside the evaluation flow (outbox, feedback, judge cache) are defined in
:mod:`spanjudge._store.extensions` and exported from here too.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Protocol, TypeVar, runtime_checkable

from spanjudge._core.span_record import EvaluationRecord, LogEvent, SpanRecord
from spanjudge._store.extensions import FeedbackLog, JudgeCache, Outbox
from spanjudge._store.models import (
    Job,
    JobSpec,
    OutboxEntry,
    PlannedJob,
    Redo,
    StoreStats,
    Superseded,
    Unemitted,
)

__all__ = [
    "EventLog",
    "FeedbackLog",
    "JobQueue",
    "JudgeCache",
    "Outbox",
    "ResultStore",
    "SpanLog",
    "SpanStore",
    "StoreAdmin",
]

_Admin = TypeVar("_Admin", bound="StoreAdmin")


@runtime_checkable
class SpanLog(Protocol):
    """Spans in (with their arrival time), settled traces and idle conversations out.

    The receiver and the store exporter only write; the evaluation loop plans from the reads.

    Example::

        log.write_spans(records, now=time.time())
        ready = log.settled_traces(settle_seconds=10, now=time.time())
        log.mark_planned(traces=ready, now=time.time())
    """

    def write_spans(
        self,
        spans: Sequence[SpanRecord],
        *,
        now: float | None = None,
        outbox: Sequence[OutboxEntry] = (),
    ) -> None:
        """Store finished spans; ``now`` is their arrival time (default: the wall clock).
        A span already stored (same trace id and span id) is kept as first written.
        ``outbox`` (enrich mode) entries are written in the same transaction, each once ever:
        a span delivered twice is forwarded once."""
        ...

    def settled_traces(self, *, settle_seconds: float, now: float, limit: int = 500) -> list[str]:
        """Traces not planned yet whose root span has ended and whose last span arrived at or
        before ``now - settle_seconds``; a trace without a root settles after
        ``ORPHAN_SETTLE_FACTOR * settle_seconds``. Oldest arrival first."""
        ...

    def idle_conversations(self, *, idle_seconds: float, now: float, limit: int = 500) -> list[str]:
        """Conversations not planned yet whose last span arrived at or before
        ``now - idle_seconds``. Oldest arrival first."""
        ...

    def mark_planned(
        self, *, traces: Sequence[str] = (), conversations: Sequence[str] = (), now: float
    ) -> None:
        """Take traces/conversations out of the settled/idle lists, until a new span arrives:
        a span new to a planned trace is recorded as late (:meth:`late_spans`) and the trace
        settles again; a new span carrying a planned conversation's id makes it idle again.
        A span delivered again (same ids) changes nothing."""
        ...

    def late_spans(self, trace_ids: Sequence[str]) -> dict[str, set[str]]:
        """For those of these traces that got spans after they were planned: the ids of every
        span that arrived since the first late one (evaluation spans included: a reader
        leaves them out). Forgotten once the trace is planned again
        (``enqueue_planned(replanned=...)``)."""
        ...

    def trace_spans(self, trace_id: str) -> list[SpanRecord]:
        """All stored spans of a trace, by start time."""
        ...

    def trace_ids_with_prefix(self, prefix: str, *, limit: int = 2) -> list[str]:
        """Up to ``limit`` stored trace ids starting with ``prefix`` (hex, any case), in id
        order; none for an empty or non-hex prefix. Resolves the shortened ids people copy."""
        ...

    def traces_spans(self, trace_ids: Sequence[str]) -> dict[str, list[SpanRecord]]:
        """The stored spans of several traces at once (one read per 500 ids), each trace's by
        start time; every id asked for is a key (an empty list when nothing is stored)."""
        ...

    def conversation_spans(self, conversation_id: str) -> list[SpanRecord]:
        """All spans of every trace that has a span carrying this conversation id, by start
        time (so a turn's retrievals and tool calls come along even without the id)."""
        ...

    def targets_since(self, *, since: float, until: float) -> tuple[list[str], list[str]]:
        """Trace ids and conversation ids with spans that arrived in ``[since, until]``, planned
        or not (backfill)."""
        ...

    def delete_older_than(self, cutoff: float) -> int:
        """Retention: delete spans and log events that arrived before ``cutoff`` and the
        trace/conversation rows last touched before it. Jobs and results are kept. Returns
        spans deleted."""
        ...


@runtime_checkable
class EventLog(Protocol):
    """GenAI content events that arrived as log records, kept to be read with their spans.

    A log write counts as activity on its trace: the trace settles ``settle_seconds`` after
    its last span *or* log event, so content that arrives after the spans is in before the
    trace is planned (and a log that arrives first creates the trace's row).

    Example::

        events.write_logs(decode_logs(body, "application/x-protobuf"), now=time.time())
        for event in events.trace_logs([trace_id]):
            print(event.span_id, event.event_name)
    """

    def write_logs(self, events: Sequence[LogEvent], *, now: float | None = None) -> None:
        """Store events; ``now`` is their arrival time (default: the wall clock). An event
        already stored (same trace, span, name, time and content) is not stored twice."""
        ...

    def trace_logs(self, trace_ids: Sequence[str]) -> list[LogEvent]:
        """Every stored event of these traces, by time (then arrival order)."""
        ...


@runtime_checkable
class JobQueue(Protocol):
    """Evaluation jobs: one per (rule, target) ever, leased to one worker at a time.

    Example::

        queue.enqueue_jobs([JobSpec("faithfulness", "llm", span_id, trace_id, span_id)], now=t)
        for job in queue.claim_jobs(owner="w1", limit=10, lease_seconds=120, now=t):
            queue.complete_job(job.job_id, owner="w1", record=evaluate(job), now=t)
    """

    def enqueue_jobs(self, jobs: Sequence[JobSpec], *, now: float) -> int:
        """Add pending jobs; a (rule, target_type, target_id) pair is enqueued once ever.
        Returns how many were new."""
        ...

    def enqueue_planned(
        self,
        jobs: Sequence[JobSpec],
        *,
        traces: Sequence[str] = (),
        conversations: Sequence[str] = (),
        now: float,
        arrived_before: float | None = None,
        replanned: Sequence[str] = (),
    ) -> int:
        """:meth:`enqueue_jobs` and ``mark_planned(traces=..., conversations=...)`` in one
        transaction, so a page of planned traces is written at once and a trace is never
        marked planned without its jobs (a crash loses both, and the page is planned again).
        ``arrived_before``: mark only the rows whose last span arrived at or before it (the
        settle or idle cutoff the page was read with), so a span that arrives while the page
        is planned leaves its trace or conversation to settle again instead of unseen.
        ``replanned``: traces planned again for their late spans, whose late-span records
        are cleared where the trace was marked. Returns how many jobs were new."""
        ...

    def planned_targets(self, trace_ids: Sequence[str]) -> set[tuple[str, str, str]]:
        """``(rule, target_type, target_id)`` of every job planned on these traces (a span,
        the root, or a conversation whose last turn is there), so planning again passes them
        over without sampling or budget."""
        ...

    def conversation_jobs(
        self, conversation_ids: Sequence[str], *, rules: Sequence[str]
    ) -> dict[tuple[str, str], PlannedJob]:
        """The jobs of these rules on these conversations, by ``(rule, conversation id)``, each
        with its state and current result."""
        ...

    def redo_jobs(self, redos: Sequence[Redo], *, now: float) -> int:
        """Run finished (``done``/``failed``) jobs again: each current result moves to the
        superseded results with its reason, the job is pending and due at ``now`` with its
        attempts reset. Jobs not finished are left alone. Returns how many were redone."""
        ...

    def claim_jobs(self, *, owner: str, limit: int, lease_seconds: float, now: float) -> list[Job]:
        """Lease up to ``limit`` jobs to ``owner`` (pending ones due by ``now`` and leased ones
        whose lease expired), oldest first; ``attempts`` is incremented. Two concurrent claimers
        never get the same job."""
        ...

    def complete_job(
        self, job_id: int, *, owner: str, record: EvaluationRecord, now: float
    ) -> bool:
        """Store the result and finish the job (``failed`` when ``record.status == "error"``,
        else ``done``), only if ``owner`` still holds the lease. Returns False, writing nothing,
        when the lease was lost."""
        ...

    def release_job(self, job_id: int, *, owner: str, retry_at: float | None = None) -> bool:
        """Give a leased job back (pending, attempts kept), due again at ``retry_at`` if given.
        False when ``owner`` does not hold it."""
        ...

    def requeue_expired(self, *, now: float) -> int:
        """Put jobs whose lease expired back to pending. Returns how many."""
        ...


@runtime_checkable
class ResultStore(Protocol):
    """Evaluation results, kept once per job: queries, budgets and the emit-once log.

    Example::

        for item in results.unemitted_results(outputs=["span"], limit=100):
            emit(item.record)
        results.mark_emitted([item.job_id], now=time.time(), output="span")
    """

    def unemitted_results(
        self, *, outputs: Collection[str] | None = None, limit: int = 100
    ) -> list[Unemitted]:
        """Stored results that still owe one of ``outputs`` (default: every output), oldest
        first, each with the outputs it still owes."""
        ...

    def mark_emitted(self, job_ids: Sequence[int], *, now: float, output: str = "span") -> None:
        """Record that these jobs' results went out through ``output`` (``span``/``event``)."""
        ...

    def results(
        self,
        *,
        rule: str | None = None,
        metric: str | None = None,
        trace_id: str | None = None,
        since: float | None = None,
        limit: int = 1000,
    ) -> list[EvaluationRecord]:
        """Stored results matching every given filter (``since``: completion time), oldest
        first."""
        ...

    def results_cost_since(self, *, rule: str, since: float) -> float:
        """Judge cost (USD) of a rule's results completed since ``since``, superseded ones
        included (daily budgets)."""
        ...

    def errored_job_ids(self, *, since: float, until: float) -> list[int]:
        """Jobs whose current result is an error recorded in ``[since, until]``, by id
        (``backfill --retry-errors`` redoes them)."""
        ...

    def superseded_results(
        self,
        *,
        rule: str | None = None,
        target_id: str | None = None,
        trace_id: str | None = None,
        job_id: int | None = None,
        limit: int = 1000,
    ) -> list[Superseded]:
        """Results a later evaluation of the same target replaced, matching every given
        filter, oldest first (a redone job keeps its id: ``job_id`` finds its earlier results
        by index)."""
        ...


@runtime_checkable
class StoreAdmin(Protocol):
    """What runs the store rather than fills it: backlog figures, schema version, closing.

    Example::

        with open_store(url) as store:
            print(store.schema_version(), store.stats(now=time.time()).pending)
    """

    def stats(self, *, now: float) -> StoreStats:
        """Backlog counts (cheap: indexed)."""
        ...

    def schema_version(self) -> int:
        """The schema version the database is at."""
        ...

    def close(self) -> None:
        """Close connections. Further calls raise :class:`StoreError`."""
        ...

    def __enter__(self: _Admin) -> _Admin:
        """The store itself; leaving the block closes it."""
        ...

    def __exit__(self, *exc: object) -> None: ...


@runtime_checkable
class SpanStore(
    SpanLog,
    EventLog,
    JobQueue,
    ResultStore,
    Outbox,
    FeedbackLog,
    JudgeCache,
    StoreAdmin,
    Protocol,
):
    """The whole store: spans and their content log events in, settled targets and leased
    jobs out, results kept exactly once, and the enrich-mode outbox. ``open_store()`` returns one.

    Implementations: :class:`~spanjudge._store.SQLiteStore` (default, embedded) and
    :class:`~spanjudge._store.postgres.PostgresStore` (several workers on one database).
    Depend on the narrowest protocol that covers what you call.

    Example::

        def drain(results: ResultStore) -> None: ...

        drain(open_store("sqlite:///./spanjudge.db"))   # a SpanStore is every part
    """
