"""The feedback table on SQLite and PostgreSQL: targets, matching labels to results, the
latest label per person, and the emit-once log of the label events."""

from __future__ import annotations

from spanjudge._core.span_record import FeedbackRecord
from spanjudge._store.sql import SpanStore
from tests.feedback.conftest import (
    CONVERSATION,
    LLM_SPAN,
    NOW,
    ROOT_SPAN,
    TRACE,
    TURN_2,
    TURN_TRACE,
    Seeded,
    complete,
    result,
)


def label(metric: str, value: str, **target: object) -> FeedbackRecord:
    return FeedbackRecord(metric=metric, label=value, **target)  # type: ignore[arg-type]


def test_the_store_is_a_feedback_log(seeded: Seeded) -> None:
    assert isinstance(seeded.store, SpanStore)


def test_feedback_target_places_each_kind_of_label(seeded: Seeded) -> None:
    where = seeded.store.feedback_target
    assert where(trace_id=TRACE, span_id=LLM_SPAN, conversation_id=None) == (TRACE, LLM_SPAN)
    # a trace label goes on the root span, a conversation label on its latest turn
    assert where(trace_id=TRACE, span_id=None, conversation_id=None) == (TRACE, ROOT_SPAN)
    assert where(trace_id=None, span_id=None, conversation_id=CONVERSATION) == (
        TURN_TRACE,
        TURN_2,
    )
    assert where(trace_id="f" * 32, span_id=None, conversation_id=None) is None
    assert where(trace_id=TRACE, span_id="e" * 16, conversation_id=None) is None
    assert where(trace_id=None, span_id=None, conversation_id="conv-unknown") is None


def test_a_target_known_only_by_its_results_is_still_known(seeded: Seeded) -> None:
    # retention deleted the spans; the results are kept, so labels can still be given
    assert seeded.store.delete_older_than(NOW + 1) == 4
    where = seeded.store.feedback_target
    assert where(trace_id=TRACE, span_id=None, conversation_id=None) == (TRACE, None)
    assert where(trace_id=TRACE, span_id=LLM_SPAN, conversation_id=None) == (TRACE, LLM_SPAN)
    assert where(trace_id=None, span_id=None, conversation_id=CONVERSATION) == (TURN_TRACE, None)


def test_add_and_list_feedback(seeded: Seeded) -> None:
    store = seeded.store
    ids = store.add_feedback(
        [
            label("faithfulness", "fail", trace_id=TRACE, span_id=LLM_SPAN, note="90 days?"),
            label("bias", "pass", trace_id=TRACE, annotator="dana", score=0.1, source="http"),
        ],
        now=NOW,
    )
    assert len(ids) == 2 and ids[0] < ids[1]
    rows = store.feedback()
    assert [(f.feedback_id, f.metric, f.label, f.note) for f in rows] == [
        (ids[0], "faithfulness", "fail", "90 days?"),
        (ids[1], "bias", "pass", None),
    ]
    assert rows[1].annotator == "dana" and rows[1].score == 0.1 and rows[1].source == "http"
    assert rows[0].created_at == NOW and rows[0].emitted_at is None
    assert [f.metric for f in store.feedback(metric="bias")] == ["bias"]
    assert store.feedback(since=NOW + 1) == []


def test_labels_match_span_trace_and_conversation_results(seeded: Seeded) -> None:
    store = seeded.store
    store.add_feedback(
        [
            # a span label speaks of every faithfulness rule on that span...
            label("faithfulness", "fail", trace_id=TRACE, span_id=LLM_SPAN, annotator="a"),
            # ...unless it names its rule
            label("faithfulness", "pass", trace_id=TRACE, span_id=LLM_SPAN, rule="faith",
                  annotator="b"),
            # a trace label: every span result of that metric in the trace
            label("bias", "fail", trace_id=TRACE, annotator="a"),
            # a conversation label: the conversation's results only
            label("topic_adherence", "fail", conversation_id=CONVERSATION, trace_id=TURN_TRACE,
                  annotator="a"),
            # another metric's label matches nothing of the others
            label("bias", "fail", conversation_id=CONVERSATION, trace_id=TURN_TRACE),
        ],
        now=NOW,
    )  # fmt: skip
    pairs = {(r.rule, f.label, f.annotator) for r, f in store.labelled_results(since=NOW - 1)}
    assert pairs == {
        ("faith", "fail", "a"),
        ("faith-strict", "fail", "a"),
        ("faith", "pass", "b"),
        ("bias", "fail", "a"),
        ("topics", "fail", "a"),
    }
    only = store.labelled_results(metric="faithfulness", rule="faith-strict")
    assert [(r.rule, f.annotator) for r, f in only] == [("faith-strict", "a")]


def test_a_label_given_before_the_evaluation_joins_it_later(seeded: Seeded) -> None:
    store = seeded.store
    store.add_feedback([label("bias", "fail", trace_id=TRACE, span_id=LLM_SPAN)], now=NOW)
    assert store.labelled_results(metric="bias") == []
    later = result("bias-llm", "bias", "llm", LLM_SPAN, TRACE, LLM_SPAN, "pass")
    complete(store, later)
    [(found, given)] = store.labelled_results(metric="bias")
    assert (found.rule, found.label, given.label) == ("bias-llm", "pass", "fail")


def test_a_persons_later_label_replaces_their_earlier_one(seeded: Seeded) -> None:
    store = seeded.store
    target = {"trace_id": TRACE, "span_id": LLM_SPAN, "rule": "faith"}
    store.add_feedback([label("faithfulness", "pass", annotator="dana", **target)], now=NOW)
    store.add_feedback([label("faithfulness", "fail", annotator="dana", **target)], now=NOW + 5)
    store.add_feedback([label("faithfulness", "pass", annotator="li", **target)], now=NOW + 1)
    pairs = [(f.annotator, f.label) for _, f in store.labelled_results()]
    assert pairs == [("li", "pass"), ("dana", "fail")]  # by time of the kept label


def test_feedback_on_lists_each_results_labels_in_order(seeded: Seeded) -> None:
    store = seeded.store
    store.add_feedback(
        [label("faithfulness", "fail", trace_id=TRACE, span_id=LLM_SPAN, annotator="x")],
        now=NOW + 2,
    )
    store.add_feedback(
        [label("faithfulness", "pass", trace_id=TRACE, rule="faith", annotator="y"),
         label("topic_adherence", "fail", conversation_id=CONVERSATION, trace_id=TURN_TRACE)],
        now=NOW,
    )  # fmt: skip
    results = [seeded.faith, seeded.faith_strict, seeded.bias, seeded.topics]
    on = store.feedback_on(results)
    assert [[f.label for f in labels] for labels in on] == [
        ["pass", "fail"],
        ["fail"],
        [],
        ["fail"],
    ]
    assert store.feedback_on([]) == []


def test_unemitted_feedback_until_marked(seeded: Seeded) -> None:
    store = seeded.store
    first, second = store.add_feedback(
        [label("bias", "pass", trace_id=TRACE), label("bias", "fail", trace_id=TRACE)], now=NOW
    )
    assert [f.feedback_id for f in store.unemitted_feedback()] == [first, second]
    assert [f.feedback_id for f in store.unemitted_feedback(limit=1)] == [first]
    store.mark_feedback_emitted([first], now=NOW + 3)
    store.mark_feedback_emitted([first], now=NOW + 9)  # once: the first time is kept
    assert [f.feedback_id for f in store.unemitted_feedback()] == [second]
    assert store.feedback()[0].emitted_at == NOW + 3
    store.mark_feedback_emitted([], now=NOW)


def test_a_label_sent_again_counts_once_and_the_window_reads_every_label(
    seeded: Seeded,
) -> None:
    """Issue 41: one label replayed 10,000 times froze the agreement figures at the labels of
    the oldest 10,000 rows; each (annotator, target, metric) now counts once, the latest, and
    every label of the window is read."""
    store = seeded.store
    target = {"trace_id": TRACE, "span_id": LLM_SPAN, "rule": "faith"}
    replayed = label("faithfulness", "pass", annotator="mallory", **target)
    store.add_feedback([replayed] * 10_000, now=NOW)
    # later, other people's labels, and mallory changing her mind
    others = [label("faithfulness", "fail", annotator=f"p{i}", **target) for i in range(40)]
    store.add_feedback(others, now=NOW + 1)
    store.add_feedback([label("faithfulness", "fail", annotator="mallory", **target)], now=NOW + 2)
    pairs = store.labelled_results(metric="faithfulness", rule="faith", since=NOW - 1)
    assert sorted(f.annotator or "" for _, f in pairs) == sorted(
        ["mallory"] + [f"p{i}" for i in range(40)]
    )
    assert {f.label for _, f in pairs} == {"fail"}  # mallory's latest, not her 10,000 passes
