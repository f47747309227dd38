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
:class:`StoreAdmin`. :class:`SpanStore` is all of them: what ``open_store()`` returns.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Protocol, TypeVar, runtime_checkable

from spanjudge.exporters.records import EvaluationRecord, FeedbackRecord, LogEvent, SpanRecord
from spanjudge.exporters.store.items import (
    Job,
    JobSpec,
    OutboxClaim,
    OutboxEntry,
    StoreStats,
    Unemitted,
)

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
        """Take traces/conversations out of the settled/idle lists for good."""
        ...

    def trace_spans(self, trace_id: str) -> list[SpanRecord]:
        """All stored spans of a trace, by start time."""
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
    ) -> int:
        """:meth:`enqueue_jobs` and ``mark_planned(traces=..., conversations=...)`` in one
        transaction, so a page of planned traces is written at once and a trace is never
        marked planned without its jobs (a crash loses both, and the page is planned again).
        Returns how many jobs were new."""
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
        """Judge cost (USD) of a rule's results completed since ``since`` (daily budgets)."""
        ...


@runtime_checkable
class Outbox(Protocol):
    """Enrich mode: received spans waiting to be forwarded, held ones with their scores.

    Example::

        outbox.release_held(now=t)
        claim = outbox.claim_outbox(owner=token, limit=512, lease_seconds=30, now=t)
        outbox.mark_forwarded([item.entry_id for item in claim.items], now=t)
    """

    def release_held(self, *, now: float) -> int:
        """Make held outbox entries due now once their evaluations are over: the trace was
        planned and no span-level job of that span is pending or leased. Returns how many."""
        ...

    def claim_outbox(
        self, *, owner: str, limit: int, lease_seconds: float, now: float
    ) -> OutboxClaim:
        """Lease up to ``limit`` due, unforwarded entries (oldest due first) to ``owner``, a
        token unique to this claim, with their spans and, for held ones, their span-level
        results. Two concurrent claimers never get the same entry."""
        ...

    def mark_forwarded(self, entry_ids: Sequence[int], *, now: float) -> None:
        """The backend took these entries' spans: they are never sent again."""
        ...

    def retry_outbox(self, entry_ids: Sequence[int], *, retry_at: float) -> None:
        """Forwarding failed: give the entries back, due again at ``retry_at``."""
        ...

    def outbox_waiting(self, trace_id: str, span_id: str, *, now: float) -> bool:
        """True while the span has an entry that is neither forwarded nor being forwarded: a
        result stored now will still ride on it."""
        ...


@runtime_checkable
class FeedbackLog(Protocol):
    """Human labels beside the results, matched to them when read (see ``store.feedback``).

    Example::

        [fid] = labels.add_feedback([FeedbackRecord("bias", "fail", trace_id=t)], now=now)
        pairs = labels.labelled_results(metric="bias", since=now - 86400)
    """

    def add_feedback(
        self, items: Sequence[FeedbackRecord], *, now: float | None = None
    ) -> list[int]:
        """Store labels (``created_at`` 0 takes ``now``); returns their ids, in order."""
        ...

    def feedback(
        self,
        *,
        metric: str | None = None,
        rule: str | None = None,
        trace_id: str | None = None,
        since: float | None = None,
        limit: int = 10_000,
    ) -> list[FeedbackRecord]:
        """Stored labels matching every given filter, oldest first."""
        ...

    def feedback_target(
        self, *, trace_id: str | None, span_id: str | None, conversation_id: str | None
    ) -> tuple[str, str | None] | None:
        """Where a label on this target goes in the trace, ``(trace_id, span_id)``, or None
        when the store knows no such target (neither spans nor results)."""
        ...

    def labelled_results(
        self,
        *,
        metric: str | None = None,
        rule: str | None = None,
        since: float | None = None,
        limit: int = 10_000,
    ) -> list[tuple[EvaluationRecord, FeedbackRecord]]:
        """Scored results with the labels on them (labels created since ``since``), one pair
        per (result, annotator): a later label of the same person replaces the earlier."""
        ...

    def feedback_on(self, results: Sequence[EvaluationRecord]) -> list[list[FeedbackRecord]]:
        """For each result, the labels on it, oldest first."""
        ...

    def unemitted_feedback(self, *, limit: int = 100) -> list[FeedbackRecord]:
        """Labels whose log event has not gone out yet, oldest first."""
        ...

    def mark_feedback_emitted(self, feedback_ids: Sequence[int], *, now: float) -> None:
        """The event output took these labels' events."""
        ...


@runtime_checkable
class JudgeCache(Protocol):
    """Scored results kept by cache key (a digest of metric, parameters, prompts, judge model
    and rebuilt case), so the same question is not paid for twice within an age.

    Example::

        cache.put_cached_result(key, record, now=t)
        hit = cache.cached_result(key, since=t - max_age)   # an EvaluationRecord or None
    """

    def cached_result(self, cache_key: str, *, since: float) -> EvaluationRecord | None:
        """The result stored under ``cache_key`` at or after ``since`` (its hit counted), or
        None."""
        ...

    def put_cached_result(self, cache_key: str, record: EvaluationRecord, *, now: float) -> None:
        """Keep a scored ``record`` under ``cache_key`` (replacing an older one: two workers
        racing on one key both write, the later wins). Anything but a scored result is a
        ``ValueError``."""
        ...

    def prune_judge_cache(self, *, before: float) -> int:
        """Delete entries stored before ``before``; returns how many."""
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

    Implementations: :class:`~spanjudge.exporters.store.SQLiteStore` (default, embedded) and
    :class:`~spanjudge.exporters.store.PostgresStore` (several workers on one database).
    Depend on the narrowest protocol that covers what you call.

    Example::

        def drain(results: ResultStore) -> None: ...

        drain(open_store("sqlite:///./spanjudge.db"))   # a SpanStore is every part
    """
