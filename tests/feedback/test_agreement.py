"""Every agreement statistic against values worked out by hand.

Wilson interval: centre (p + z^2/2n) / (1 + z^2/n), half-width
z sqrt(p(1-p)/n + z^2/4n^2) / (1 + z^2/n), z = 1.959964 for 95%.
Cohen's kappa: (p_o - p_e) / (1 - p_e); its variance (Fleiss, Cohen & Everitt 1969), with
p_ij the share judged i by the judge and j by the person, p_i. and p_.j the marginals:
[sum_i p_ii (1 - (p_i. + p_.i)(1 - k))^2 + (1 - k)^2 sum_(i!=j) p_ij (p_.i + p_j.)^2
 - (k - p_e (1 - k))^2] / (n (1 - p_e)^2).
"""

from __future__ import annotations

import pytest

from spanjudge._core.span_record import EvaluationRecord, FeedbackRecord
from spanjudge.evaluators._review.agreement import (
    Estimate,
    agreement,
    cohen_kappa,
    gauge_rows,
    wilson,
)

approx = pytest.approx


def test_wilson_interval_of_8_out_of_10() -> None:
    # p = 0.8, z^2/n = 0.384146; centre 0.992073 / 1.384146 = 0.716740;
    # half = 1.959964 * sqrt(0.016 + 0.009604) / 1.384146 = 0.226578
    estimate = wilson(8, 10)
    assert estimate.value == 0.8
    assert estimate.low == approx(0.716740 - 0.226578, abs=1e-5)
    assert estimate.high == approx(0.716740 + 0.226578, abs=1e-5)


def test_wilson_interval_at_the_edges() -> None:
    # p = 0: the interval is [0, (z^2/n) / (1 + z^2/n)] = [0, 0.768292 / 1.768292]
    none = wilson(0, 5)
    assert (none.value, none.low) == (0.0, 0.0)
    assert none.high == approx(0.434482, abs=1e-5)
    every = wilson(5, 5)
    assert every.value == 1.0 and every.high == 1.0 and every.low == approx(0.565518, abs=1e-5)
    assert wilson(0, 0) == Estimate(None)


def test_wilson_interval_narrows_with_the_confidence_level() -> None:
    # 90%: z = 1.644854; half = 1.644854 * sqrt(0.0025 + 0.0000676) / 1.027055 = 0.081152
    estimate = wilson(50, 100, confidence=0.90)
    assert estimate.low == approx(0.5 - 0.081152, abs=1e-5)
    assert estimate.high == approx(0.5 + 0.081152, abs=1e-5)
    with pytest.raises(ValueError, match="confidence"):
        wilson(1, 2, confidence=1.5)


def test_cohens_kappa_of_the_textbook_table() -> None:
    # 50 items: both fail 20, judge only 5, person only 10, both pass 15.
    # p_o = 35/50 = 0.7; judge fails 25/50, person 30/50: p_e = 0.5*0.6 + 0.5*0.4 = 0.5
    # kappa = 0.2 / 0.5 = 0.4. Variance: agreement 0.4 (1 - 1.1*0.6)^2 + 0.3 (1 - 0.9*0.6)^2
    # = 0.04624 + 0.06348; across 0.36 (0.1 * 1.1^2 + 0.2 * 0.9^2) = 0.10188; minus
    # (0.4 - 0.5*0.6)^2 = 0.01: 0.2016 / (50 * 0.25) = 0.016128, SE 0.126996
    estimate = cohen_kappa(20, 5, 10, 15)
    assert estimate.value == approx(0.4)
    assert estimate.low == approx(0.4 - 1.959964 * 0.126996, abs=1e-5)
    assert estimate.high == approx(0.4 + 1.959964 * 0.126996, abs=1e-5)


def test_cohens_kappa_interval_is_clipped_to_its_range() -> None:
    # judge fails 1, person 2 of 8, both fail 1: p_o = 7/8, p_e = 0.125*0.25 + 0.875*0.75
    # = 0.6875, kappa = 0.1875 / 0.3125 = 0.6. Variance: 0.125 (1 - 0.375*0.4)^2
    # + 0.75 (1 - 1.625*0.4)^2 = 0.090313 + 0.091875; across 0.16 * 0.125 (0.75 + 0.125)^2
    # = 0.015313; minus (0.6 - 0.6875*0.4)^2 = 0.105625: 0.091875 / (8 * 0.3125^2) = 0.1176,
    # SE 0.342929
    estimate = cohen_kappa(1, 0, 1, 6)
    assert estimate.value == approx(0.6)
    assert estimate.low == approx(0.6 - 1.959964 * 0.342929, abs=1e-5)
    assert estimate.high == 1.0  # 0.6 + 0.689 is past the largest kappa there is


def test_cohens_kappa_edge_cases() -> None:
    perfect = cohen_kappa(3, 0, 0, 2)  # p_o = 1, p_e = 0.36 + 0.16: kappa 1, SE 0
    assert (perfect.value, perfect.low, perfect.high) == (approx(1.0), approx(1.0), approx(1.0))
    # both always said fail: chance agreement is 1 and kappa is undefined, not 0 or 1
    assert cohen_kappa(5, 0, 0, 0) == Estimate(None)
    assert cohen_kappa(0, 0, 0, 0) == Estimate(None)
    # total disagreement with balanced labels: p_o = 0, p_e = 0.5, kappa -1 (interval clipped)
    opposite = cohen_kappa(0, 2, 2, 0)
    assert opposite.value == approx(-1.0) and opposite.low == -1.0


def pair(
    rule: str, judge: str, person: str, status: str = "scored"
) -> tuple[EvaluationRecord, FeedbackRecord]:
    record = EvaluationRecord(rule, "faithfulness", "llm", "s", "t", "s", status=status,
                              label=judge if status == "scored" else None)  # fmt: skip
    return record, FeedbackRecord(metric="faithfulness", label=person)


def test_agreement_table_per_rule() -> None:
    # rule a: (judge, person) fail/fail x3, fail/pass x1, pass/fail x2, pass/pass x4
    a = (
        [pair("a", "fail", "fail")] * 3
        + [pair("a", "fail", "pass")]
        + [pair("a", "pass", "fail")] * 2
        + [pair("a", "pass", "pass")] * 4
    )
    b = [pair("b", "fail", "fail"), pair("b", "pass", "pass")]
    errors = [pair("a", "", "fail", status="error"), pair("b", "", "pass", status="skipped")]
    tables = agreement(b + errors + a)
    assert [(t.rule, t.metric, t.labels) for t in tables] == [
        ("a", "faithfulness", 10),
        ("b", "faithfulness", 2),
    ]
    ta = tables[0]
    counts = (ta.both_fail, ta.judge_only_fail, ta.judge_only_pass, ta.both_pass)
    assert counts == (3, 1, 2, 4)
    assert ta.accuracy.value == approx(0.7)  # 7 of 10
    assert ta.true_positive_rate.value == approx(0.6)  # 3 of the 5 the person failed
    assert ta.true_negative_rate.value == approx(0.8)  # 4 of the 5 the person passed
    # p_o 0.7; judge fails 0.4, person 0.5: p_e = 0.2 + 0.3 = 0.5; kappa 0.4
    assert ta.kappa.value == approx(0.4)
    assert ta.true_positive_rate == wilson(3, 5) and ta.accuracy == wilson(7, 10)
    tb = tables[1]
    assert tb.kappa.value == approx(1.0) and tb.accuracy.value == 1.0
    assert ta.stat("labels") == 10.0 and ta.stat("kappa") == approx(0.4)


def test_a_rate_without_a_denominator_is_undefined() -> None:
    # the person failed nothing: no failing answer to catch, so no true-positive rate
    [table] = agreement([pair("a", "pass", "pass"), pair("a", "fail", "pass")])
    assert table.true_positive_rate == Estimate(None)
    assert table.true_negative_rate.value == 0.5
    # p_o = 0.5; judge fails 0.5, person 0: p_e = 0 + 0.5 * 1 = 0.5, so kappa = 0
    assert table.kappa.value == approx(0.0)


def test_gauge_rows_carry_the_floor_and_minimum() -> None:
    tables = agreement([pair("a", "pass", "pass"), pair("a", "fail", "pass")])
    rows = gauge_rows(tables, floor=0.4, min_labels=20)
    by_stat = {stat: value for _, _, stat, value in rows}
    # no true-positive rate (the person failed nothing); kappa 0 as above
    assert by_stat == {
        "labels": 2.0,
        "accuracy": 0.5,
        "true_negative_rate": 0.5,
        "kappa": approx(0.0),
        "floor": 0.4,
        "min_labels": 20.0,
    }
    assert {(rule, metric) for rule, metric, _, _ in rows} == {("a", "faithfulness")}
    assert gauge_rows([], floor=0.4, min_labels=1) == []
