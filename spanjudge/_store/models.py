"""The records a span store hands out and takes in beside spans and results: job specs and
claimed jobs, enrich mode's outbox entries and claims, backlog figures, results that still owe
an output; with the job states and the store's one error. The protocols that exchange them are
in :mod:`~spanjudge._store.base`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from spanjudge._core.kinds import TargetType
from spanjudge._core.span_record import EvaluationRecord, SpanRecord

# A trace whose root span never arrives (a remote parent, a lost span) still settles, after this
# many settle periods without a new span, so orphans cannot hang in the backlog forever.
ORPHAN_SETTLE_FACTOR = 10.0

# Job states. A job is pending -> leased -> done | failed; release puts it back to pending.
PENDING = "pending"
LEASED = "leased"
DONE = "done"
FAILED = "failed"


# Output name -> the results column that marks it delivered (see the score emitter's outputs).
EMIT_COLUMNS: dict[str, str] = {"span": "emitted_at", "event": "event_emitted_at"}


class Unemitted(NamedTuple):
    """A stored result that still owes some outputs (``"span"``, ``"event"``)."""

    job_id: int
    record: EvaluationRecord
    outputs: tuple[str, ...]


@dataclass
class JobSpec:
    """What to evaluate: one rule on one target (span, trace or conversation)."""

    rule: str
    target_type: TargetType
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
class PlannedJob:
    """A job already planned on a conversation, as planning sees it before judging the
    conversation again: its state and current result (None while it has none)."""

    job_id: int
    rule: str
    target_id: str
    state: str
    result: EvaluationRecord | None = None


@dataclass
class Redo:
    """A finished job to run again: its current result is kept as superseded (``reason``:
    ``retry_errors``, ``new_turns``) and the job is pending again, attached to ``trace_id`` /
    ``span_id`` when given (a conversation's new last turn), else where it was."""

    job_id: int
    reason: str
    trace_id: str | None = None
    span_id: str | None = None


class Superseded(NamedTuple):
    """A result a later evaluation of the same target replaced, kept with when and why."""

    job_id: int
    record: EvaluationRecord
    superseded_at: float
    reason: str


@dataclass
class OutboxEntry:
    """Enrich mode: a received span waiting to be forwarded to the backend.

    ``hold``: a rule picked the span for evaluation, so it waits for its scores until
    ``release_at`` (arrival + ``max_hold_seconds``); otherwise ``release_at`` is the arrival
    time and the span goes out at once. ``span`` and ``envelope``: the span's protobuf bytes
    as received and its resource and scope (:class:`~spanjudge._core.otlp_wire.WireSpan`),
    forwarded as they are; without them the span is rebuilt from the store. The spans of one
    write that came with their bytes are stored in one compressed entry: the pass-through
    spans as the request body to send, then the held spans, each held span's row pointing
    into it.
    """

    trace_id: str
    span_id: str
    hold: bool
    release_at: float
    span: bytes | None = None
    envelope: bytes | None = None


@dataclass
class OutboxItem:
    """A claimed outbox entry, for held spans with the span's own results. ``payload``: one
    held span's bytes with its ``envelope`` (read from its write's shared entry), or (no
    envelope) an OTLP request body of ``spans`` pass-through spans; without payload, ``span``
    is the stored span."""

    entry_id: int
    span: SpanRecord | None
    hold: bool
    attempts: int
    results: list[EvaluationRecord] = field(default_factory=list)
    trace_id: str = ""
    span_id: str = ""
    payload: bytes | None = None
    envelope: bytes | None = None
    spans: int = 1


@dataclass
class OutboxClaim:
    """What :meth:`Outbox.claim_outbox` leased: items to send, and entries whose span is
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
