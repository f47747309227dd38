"""The span store interface: what the online loop, the receiver and the exporter rely on.

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
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field

from spanjudge.exporters.records import EvaluationRecord, SpanRecord

# A trace whose root span never arrives (a remote parent, a lost span) still settles, after this
# many settle periods without a new span, so orphans cannot hang in the backlog forever.
ORPHAN_SETTLE_FACTOR = 10.0

# Job states. A job is pending -> leased -> done | failed; release puts it back to pending.
PENDING = "pending"
LEASED = "leased"
DONE = "done"
FAILED = "failed"


class StoreError(Exception):
    """A store call failed (database locked, disk full, connection lost, file deleted...).

    The original driver exception is chained as ``__cause__``. The store stays usable: the next
    call opens a fresh connection.
    """


@dataclass
class JobSpec:
    """What to evaluate: one rule on one target (span, trace or conversation)."""

    rule: str
    target_type: str  # llm | agent | trace | conversation
    target_id: str
    trace_id: str | None
    span_id: str | None
    conversation_id: str | None = None
    sample_rate: float | None = None


@dataclass
class Job(JobSpec):
    """A job row as claimed: the spec plus its queue state."""

    job_id: int = 0
    state: str = PENDING
    attempts: int = 0
    lease_owner: str | None = None
    lease_expires_at: float | None = None


@dataclass
class OutboxEntry:
    """Enrich mode: a received span waiting to be forwarded to the backend.

    ``hold``: a rule picked the span for evaluation, so it waits for its scores until
    ``release_at`` (arrival + ``max_hold_seconds``); otherwise ``release_at`` is the arrival
    time and the span goes out at once.
    """

    trace_id: str
    span_id: str
    hold: bool
    release_at: float


@dataclass
class OutboxItem:
    """A claimed outbox entry with its span and, for held spans, the span's own results."""

    entry_id: int
    span: SpanRecord
    hold: bool
    attempts: int
    results: list[EvaluationRecord] = field(default_factory=list)


@dataclass
class OutboxClaim:
    """What :meth:`SpanStore.claim_outbox` leased: items to send, and entries whose span is
    gone (deleted by retention before it could be forwarded)."""

    items: list[OutboxItem]
    missing: list[int]


@dataclass
class StoreStats:
    """Backlog figures for the metrics endpoint; every field is an indexed count."""

    pending: int = 0
    leased: int = 0
    done: int = 0
    failed: int = 0
    unplanned_traces: int = 0
    unplanned_conversations: int = 0
    # Age of the oldest job not finished yet (pending or leased); 0 when there is none.
    oldest_pending_age_seconds: float = 0.0
    # Enrich mode: spans held for their scores, and spans due but not forwarded yet
    outbox_held: int = 0
    outbox_due: int = 0


class SpanStore(ABC):
    """Spans in, settled targets and leased jobs out, results kept exactly once.

    Implementations: :class:`~spanjudge.exporters.store.SQLiteStore` (default, embedded) and
    :class:`~spanjudge.exporters.store.PostgresStore` (several workers on one database).
    """

    # ---------------------------------------------------------------- spans
    @abstractmethod
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

    @abstractmethod
    def settled_traces(self, *, settle_seconds: float, now: float, limit: int = 500) -> list[str]:
        """Traces not planned yet whose root span has ended and whose last span arrived at or
        before ``now - settle_seconds``; a trace without a root settles after
        ``ORPHAN_SETTLE_FACTOR * settle_seconds``. Oldest arrival first."""

    @abstractmethod
    def idle_conversations(self, *, idle_seconds: float, now: float, limit: int = 500) -> list[str]:
        """Conversations not planned yet whose last span arrived at or before
        ``now - idle_seconds``. Oldest arrival first."""

    @abstractmethod
    def mark_planned(
        self, *, traces: Sequence[str] = (), conversations: Sequence[str] = (), now: float
    ) -> None:
        """Take traces/conversations out of the settled/idle lists for good."""

    @abstractmethod
    def trace_spans(self, trace_id: str) -> list[SpanRecord]:
        """All stored spans of a trace, by start time."""

    @abstractmethod
    def conversation_spans(self, conversation_id: str) -> list[SpanRecord]:
        """All spans of every trace that has a span carrying this conversation id, by start
        time (so a turn's retrievals and tool calls come along even without the id)."""

    @abstractmethod
    def targets_since(self, *, since: float, until: float) -> tuple[list[str], list[str]]:
        """Trace ids and conversation ids with spans that arrived in ``[since, until]``, planned
        or not (backfill)."""

    @abstractmethod
    def delete_older_than(self, cutoff: float) -> int:
        """Retention: delete spans that arrived before ``cutoff`` and the trace/conversation
        rows last touched before it. Jobs and results are kept. Returns spans deleted."""

    # ---------------------------------------------------------------- jobs
    @abstractmethod
    def enqueue_jobs(self, jobs: Sequence[JobSpec], *, now: float) -> int:
        """Add pending jobs; a (rule, target_type, target_id) pair is enqueued once ever.
        Returns how many were new."""

    @abstractmethod
    def claim_jobs(self, *, owner: str, limit: int, lease_seconds: float, now: float) -> list[Job]:
        """Lease up to ``limit`` jobs to ``owner`` (pending ones due by ``now`` and leased ones
        whose lease expired), oldest first; ``attempts`` is incremented. Two concurrent claimers
        never get the same job."""

    @abstractmethod
    def complete_job(
        self, job_id: int, *, owner: str, record: EvaluationRecord, now: float
    ) -> bool:
        """Store the result and finish the job (``failed`` when ``record.status == "error"``,
        else ``done``), only if ``owner`` still holds the lease. Returns False, writing nothing,
        when the lease was lost."""

    @abstractmethod
    def release_job(self, job_id: int, *, owner: str, retry_at: float | None = None) -> bool:
        """Give a leased job back (pending, attempts kept), due again at ``retry_at`` if given.
        False when ``owner`` does not hold it."""

    @abstractmethod
    def requeue_expired(self, *, now: float) -> int:
        """Put jobs whose lease expired back to pending. Returns how many."""

    # ---------------------------------------------------------------- results
    @abstractmethod
    def unemitted_results(self, *, limit: int = 100) -> list[tuple[int, EvaluationRecord]]:
        """Stored results not marked emitted yet, as (job id, record), oldest first."""

    @abstractmethod
    def mark_emitted(self, job_ids: Sequence[int], *, now: float) -> None:
        """Record that these jobs' results went out."""

    @abstractmethod
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

    @abstractmethod
    def results_cost_since(self, *, rule: str, since: float) -> float:
        """Judge cost (USD) of a rule's results completed since ``since`` (daily budgets)."""

    # ---------------------------------------------------------------- outbox (enrich mode)
    @abstractmethod
    def release_held(self, *, now: float) -> int:
        """Make held outbox entries due now once their evaluations are over: the trace was
        planned and no span-level job of that span is pending or leased. Returns how many."""

    @abstractmethod
    def claim_outbox(
        self, *, owner: str, limit: int, lease_seconds: float, now: float
    ) -> OutboxClaim:
        """Lease up to ``limit`` due, unforwarded entries (oldest due first) to ``owner``, a
        token unique to this claim, with their spans and, for held ones, their span-level
        results. Two concurrent claimers never get the same entry."""

    @abstractmethod
    def mark_forwarded(self, entry_ids: Sequence[int], *, now: float) -> None:
        """The backend took these entries' spans: they are never sent again."""

    @abstractmethod
    def retry_outbox(self, entry_ids: Sequence[int], *, retry_at: float) -> None:
        """Forwarding failed: give the entries back, due again at ``retry_at``."""

    @abstractmethod
    def outbox_waiting(self, trace_id: str, span_id: str, *, now: float) -> bool:
        """True while the span has an entry that is neither forwarded nor being forwarded: a
        result stored now will still ride on it."""

    # ---------------------------------------------------------------- admin
    @abstractmethod
    def stats(self, *, now: float) -> StoreStats:
        """Backlog counts (cheap: indexed)."""

    @abstractmethod
    def schema_version(self) -> int:
        """The schema version the database is at."""

    @abstractmethod
    def close(self) -> None:
        """Close connections. Further calls raise :class:`StoreError`."""

    def __enter__(self) -> SpanStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
