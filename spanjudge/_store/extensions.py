"""The store's contract beside the evaluation flow: the enrich-mode outbox, human feedback and
the judge cache.

The evaluation flow itself (spans and log events in, jobs, results) and the whole
:class:`~spanjudge._store.base.SpanStore` are in :mod:`spanjudge._store.base`,
which re-exports the three protocols here: import them from either module.

Example::

    def forward(outbox: Outbox) -> None: ...

    forward(open_store("sqlite:///./spanjudge.db"))   # a SpanStore is an Outbox too
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from spanjudge._core.span_record import EvaluationRecord, FeedbackRecord
from spanjudge._store.models import OutboxClaim


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
