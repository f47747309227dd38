"""Summary sums (issue 29), on SQLite and PostgreSQL: the grouped SQL over the results' summary
columns gives exactly what adding the records one by one gives, per segment key, window and rule;
results stored before the columns existed are summed from their records."""

from __future__ import annotations

import math
import random

from spanjudge._core.span_record import EvaluationRecord
from spanjudge._store.models import JobSpec
from spanjudge._store.sql import SpanStore
from spanjudge._store.summaries import ALL, UNSET, SegmentSums, add_record

T0 = 1_700_000_000.0


def _records(n: int, seed: int = 7) -> list[EvaluationRecord]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        status = rng.choice(["scored"] * 8 + ["skipped", "error"])
        score = round(rng.random(), 3) if status == "scored" else None
        segments = {"service": "shop", "service.version": rng.choice(["1.0", "1.1"])}
        if i % 5:
            segments["model"] = rng.choice(["gpt-a", "gpt-b"])
        out.append(
            EvaluationRecord(
                rule=rng.choice(["faith", "relevance"]),
                metric="m",
                target_type="llm",
                target_id=f"{i:016x}",
                trace_id=f"{i:032x}",
                span_id=f"{i:016x}",
                status=status,  # type: ignore[arg-type]
                score=score,
                label=None if score is None else ("pass" if score >= 0.5 else "fail"),
                success=None if score is None else score >= 0.5,
                sample_rate=rng.choice([None, 1.0, 0.5, 0.1]),
                service_name="shop",
                segments=segments,
            )
        )
    return out


def _store(store: SpanStore, records: list[EvaluationRecord]) -> None:
    specs = [JobSpec(r.rule, "llm", r.target_id, r.trace_id, r.span_id) for r in records]
    store.enqueue_jobs(specs, now=T0)
    by_target = {(r.rule, r.target_id): r for r in records}
    jobs = store.claim_jobs(owner="w", limit=len(records), lease_seconds=60, now=T0)
    for i, job in enumerate(jobs):
        record = by_target[(job.rule, job.target_id)]
        record.finished_at = T0 + i  # the loop stores a result when it finishes
        assert store.complete_job(job.job_id, owner="w", record=record, now=T0 + i)


def _expected(
    records: list[EvaluationRecord], by: str | None
) -> dict[tuple[str, str, str], SegmentSums]:
    out: dict[tuple[str, str, str], SegmentSums] = {}
    for record in records:
        add_record(out, record, by)
    return out


def _close(
    a: dict[tuple[str, str, str], SegmentSums], b: dict[tuple[str, str, str], SegmentSums]
) -> None:
    assert sorted(a) == sorted(b)
    for key in a:
        for name in a[key].__slots__:
            x, y = getattr(a[key], name), getattr(b[key], name)
            assert math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-9), (key, name, x, y)


def test_sql_sums_equal_the_records_added_one_by_one(store: SpanStore) -> None:
    records = _records(120)
    _store(store, records)
    for by in (None, "service", "service.version", "model", "tenant"):
        _close(store.summary_sums(by=by), _expected(records, by))
    sums = store.summary_sums(by="model")
    assert {key[2] for key in sums} == {"gpt-a", "gpt-b", UNSET}
    assert {key[2] for key in store.summary_sums()} == {ALL}


def test_the_window_and_the_rule_filter_the_sums(store: SpanStore) -> None:
    records = _records(40)
    _store(store, records)  # created at T0 + i in claim order
    late = store.summary_sums(since=T0 + 20)
    total = sum(s.scored + s.skipped + s.errors for s in late.values())
    assert total == 20
    only = store.summary_sums(rule="faith", by="service.version")
    assert {key[0] for key in only} == {"faith"}


def test_results_without_summary_columns_are_summed_from_their_records(store: SpanStore) -> None:
    records = _records(30)
    _store(store, records)
    with store.transaction() as cur:  # type: ignore[attr-defined]
        cur.execute("UPDATE results SET weight = NULL, segments = NULL WHERE job_id % 2 = 0")
    _close(store.summary_sums(by="service.version"), _expected(records, "service.version"))


def test_a_sample_rate_becomes_the_weight_one_over_it() -> None:
    [record] = _records(1)
    record.status, record.score, record.label, record.sample_rate = "scored", 0.8, "pass", 0.25
    out: dict[tuple[str, str, str], SegmentSums] = {}
    add_record(out, record, None)
    [sums] = out.values()
    assert (sums.pass_weight, sums.pass_weight2, sums.passed_weight) == (4.0, 16.0, 4.0)
    assert math.isclose(sums.score_sum, 3.2)
