"""Consistent probability sampling against the specification's and the Collector's examples.

Every vector below is data transcribed from a reference, with the file and test it comes from:

* SPEC: open-telemetry/opentelemetry-specification, specification/trace/
  tracestate-probability-sampling.md (the 1-in-N table under "Converting floating-point
  probability to threshold value", and the 1% example under "Rejection Threshold") and
  tracestate-handling.md (the ``th:c`` and ``rv:6e6d1a75832a2f`` examples).
* PKG: open-telemetry/opentelemetry-collector-contrib, pkg/sampling/probability_test.go,
  threshold_test.go and randomness_test.go (test and example names given per vector).
* PROC: the same repository, processor/probabilisticsamplerprocessor/tracesprocessor_test.go,
  Test_tracesamplerprocessor_TraceState, the cases without an arriving threshold (there the
  proportional and equalizing modes decide alike, and alike with ours).
"""

from __future__ import annotations

import math
import struct

import pytest

from spanjudge.evaluators._plan.consistent import (
    MAX_ADJUSTED_COUNT,
    MIN_PROBABILITY,
    decode_th,
    encode_th,
    explicit_randomness,
    keeps,
    key_kept,
    key_randomness,
    probability_of,
    randomness_of,
    threshold_for,
    tracestate_threshold,
)

# SPEC 1-in-N table: probability -> th at precision 3, 4, 5
SPEC_TABLE = [
    (1.0, ("0", "0", "0")),
    (0.5, ("8", "8", "8")),
    (1 / 3, ("aab", "aaab", "aaaab")),
    (0.25, ("c", "c", "c")),
    (0.2, ("ccd", "cccd", "ccccd")),
    (0.125, ("e", "e", "e")),
    (0.1, ("e66", "e666", "e6666")),
    (0.0625, ("f", "f", "f")),
    (0.01, ("fd71", "fd70a", "fd70a4")),
    (0.001, ("ffbe7", "ffbe77", "ffbe76d")),
    (0.0001, ("fff972", "fff9724", "fff97247")),
    (0.00001, ("ffff584", "ffff583a", "ffff583a5")),
    (0.000001, ("ffffef4", "ffffef39", "ffffef391")),
]


@pytest.mark.parametrize(("probability", "expected"), SPEC_TABLE)
def test_spec_table_thresholds(probability: float, expected: tuple[str, str, str]) -> None:
    got = tuple(encode_th(threshold_for(probability, precision=p)) for p in (3, 4, 5))
    assert got == expected


# SPEC 1-in-N table, "Actual probability" at precision 4
SPEC_ACTUAL_P4 = [
    (1 / 3, 0.3333282470703125),
    (0.2, 0.1999969482421875),
    (0.1, 0.100006103515625),
    (0.01, 0.010000228881835938),
    (0.001, 0.0009999871253967285),
    (0.0001, 0.00010000169277191162),
    (0.00001, 1.00000761449337e-05),
    (0.000001, 1.00000761449337e-06),
]


@pytest.mark.parametrize(("probability", "actual"), SPEC_ACTUAL_P4)
def test_spec_table_actual_probabilities(probability: float, actual: float) -> None:
    assert probability_of(threshold_for(probability)) == pytest.approx(actual, rel=1e-14)


def test_spec_one_percent_example() -> None:
    # "(1-0.01) * 2^56 ≈ 71337018784743424 = 0xfd70a400000000", encoded "ot=th:fd70a4"
    assert threshold_for(0.01, precision=5) == 71337018784743424 == 0xFD70A400000000
    assert encode_th(threshold_for(0.01, precision=5)) == "fd70a4"


def test_spec_tracestate_handling_examples() -> None:
    # "ot=th:c": threshold 0xc0000000000000, 25% sampling; "ot=th:0": 100%
    assert tracestate_threshold("ot=th:c") == 0xC0000000000000
    assert probability_of(decode_th("c")) == 0.25
    assert decode_th("0") == 0 and probability_of(0) == 1.0
    # "ot=rv:6e6d1a75832a2f" replaces the trace id's randomness; it is kept at thresholds
    # 0x6e6d1a75832a2f through 0, i.e. probabilities 56.9% through 100%
    rv = "ot=rv:6e6d1a75832a2f"
    assert randomness_of("ffffffffffffffffffffffffffffffff", rv) == 0x6E6D1A75832A2F
    assert explicit_randomness(rv) == 0x6E6D1A75832A2F
    trace = "ffffffffffffffffffffffffffffffff"
    assert randomness_of(trace, rv) >= 0x6E6D1A75832A2F
    assert randomness_of(trace, rv) < 0x6E6D1A75832A30
    assert keeps(trace, 0.57, rv) and not keeps(trace, 0.56, rv)
    assert keeps(trace, 0.56)  # without rv the all-f trace id is kept at every probability


# PKG probability_test.go, TestProbabilityToThresholdWithPrecision: probability, the
# full-precision th, and the th at each precision (precision = digits after leading zeros)
PKG_PRECISION = [
    (1 - 0x456789A * 2.0**-28, "456789a", ["45678a", "45679", "4568", "456", "45", "4"]),
    (
        1 - 0x456789A * 2.0**-40,
        "000456789a",
        ["00045678a", "00045679", "0004568", "000456", "00045", "0004"],
    ),
    (
        1 - 0x789ABCDEF * 2.0**-40,
        "0789abcdef",
        [
            "0789abcdef",
            "0789abcdf",
            "0789abce",
            "0789abd",
            "0789ac",
            "0789b",
            "078a",
            "079",
            "08",
        ],
    ),
    (
        1 - 0x12345678 * 2.0**-32,
        "12345678",
        ["1234568", "123456", "12345", "1234", "123", "12", "1"],
    ),
    (1 - 0x80801 * 2.0**-28, "0080801", ["00808", "008"]),
    (1.0, "0", ["0"]),
]


@pytest.mark.parametrize(("probability", "exact", "rounded"), PKG_PRECISION)
def test_collector_precision_vectors(probability: float, exact: str, rounded: list[str]) -> None:
    assert encode_th(threshold_for(probability, precision=0)) == exact
    for want in rounded:
        precision = len(want.lstrip("0")) or 1
        assert encode_th(threshold_for(probability, precision=precision)) == want


def test_collector_examples() -> None:
    # PKG ExampleProbabilityToThresholdWithPrecision: 1/3, 2/3, 3/3 at precision 3
    assert [encode_th(threshold_for(d / 3.0, precision=3)) for d in (1.0, 2.0, 3.0)] == [
        "aab",
        "555",
        "0",
    ]
    # PKG ExampleProbabilityToThreshold_rounding: full precision 1/3 ends in c, not b
    assert encode_th(threshold_for(1.0 / 3.0, precision=0)) == "aaaaaaaaaaaaac"
    # PKG ExampleProbabilityToThreshold_verysmall, precision 3
    small = [MIN_PROBABILITY, 2 * 2.0**-56, 3 * 2.0**-56, 4 * 2.0**-56, 8 * 2.0**-56, 16 * 2.0**-56]
    assert [encode_th(threshold_for(p, precision=3)) for p in small] == [
        "ffffffffffffff",
        "fffffffffffffe",
        "fffffffffffffd",
        "fffffffffffffc",
        "fffffffffffff8",
        "fffffffffffff",
    ]


def test_collector_limited_precision_example() -> None:
    # PKG ExampleProbabilityToThreshold_limitedprecision: the next 3 floats below each of
    # 15/16, 8/16, 4/16, 2/16, 1/16, at full precision
    def below(x: float, n: int) -> float:
        for _ in range(n):
            x = math.nextafter(x, 0.0)
        return x

    cases = {
        15 / 16: ["1", "10000000000008", "1000000000001", "10000000000018"],
        8 / 16: ["8", "80000000000004", "80000000000008", "8000000000000c"],
        4 / 16: ["c", "c0000000000002", "c0000000000004", "c0000000000006"],
        2 / 16: ["e", "e0000000000001", "e0000000000002", "e0000000000003"],
        1 / 16: ["f", "f", "f0000000000001", "f0000000000001"],
    }
    for start, want in cases.items():
        got = [encode_th(threshold_for(below(start, n), precision=0)) for n in range(4)]
        assert got == want, start


def test_collector_threshold_and_randomness_examples() -> None:
    # PKG threshold_test.go ExampleTValueToThreshold: "c" is 25%
    assert probability_of(decode_th("c")) == 0.25
    # ExampleThreshold_ShouldSample: th c, rv d29d6a7215ced0 -> sampled
    assert randomness_of("00000000000000000000000000000001", "ot=rv:d29d6a7215ced0") >= decode_th(
        "c"
    )
    # ExampleThreshold_ShouldSample_traceid and randomness_test.go ExampleTraceIDToRandomness:
    # only the last 14 hex digits of the trace id count
    trace = "abababababababababd29d6a7215ced0"
    assert f"{randomness_of(trace):014x}" == "d29d6a7215ced0"
    assert randomness_of(trace) >= decode_th("c")


def _float32(x: float) -> float:
    # the processor's sampling_percentage is a float32
    return float(struct.unpack("f", struct.pack("f", x))[0])


# PROC Test_tracesamplerprocessor_TraceState, cases without an arriving th: (case name,
# trace id, tracestate, sampling_percentage, sampling_precision (0: full), sampled, th out)
DEFAULT_TID = "fefefefefefefefefe80000000000000"
PROC_CASES = [
    ("100 percent", DEFAULT_TID, "", 100, 0, True, "0"),
    ("50 percent sampled", DEFAULT_TID, "", 50, 0, True, "8"),
    ("25 percent sampled", "ddddddddddddddddddc0000000000000", "", 25, 0, True, "c"),
    ("25 percent unsampled", "ddddddddddddddddddb0000000000000", "", 25, 0, False, None),
    ("1 percent sampled", DEFAULT_TID, "ot=rv:FD70A3D70A3D71", 1, 0, True, "fd70a3d70a3d71"),
    (
        "1 percent sampled with rvalue and precision 4",
        DEFAULT_TID,
        "ot=rv:FD70A3D70A3D71",
        1,
        4,
        True,
        "fd70a",
    ),
    (
        "1 percent sampled with rvalue and precision 3",
        DEFAULT_TID,
        "ot=rv:FD70A3D70A3D71",
        1,
        3,
        False,
        None,
    ),
    ("1 percent not sampled with rvalue", DEFAULT_TID, "ot=rv:FD70A3D70A3D70", 1, 0, False, None),
    ("49 percent not sampled with default tid", DEFAULT_TID, "", 49, 0, False, None),
    (
        "1 percent sampled with rvalue",
        DEFAULT_TID,
        "ot=rv:fd70B000000000",
        1,
        0,
        True,
        "fd70a3d70a3d71",
    ),
    ("1 percent sampled with tid", "a0a0a0a0a0a0a0a0a0fe000000000000", "", 1, 4, True, "fd70a"),
    ("40 percent precision 3 with rvalue", DEFAULT_TID, "ot=rv:a0000000000000", 40, 3, True, "99a"),
    ("200 percent equals 100 percent", DEFAULT_TID, "", 200, 0, True, "0"),
    (
        "almost 100pct sampling",
        "111111111111111111ffffffffffffff",
        "",
        (1 - 8e-7) * 100,
        10,
        True,
        "00000cccccccd",
    ),
]


@pytest.mark.parametrize(
    ("name", "trace_id", "tracestate", "percent", "precision", "sampled", "th"),
    PROC_CASES,
    ids=[case[0] for case in PROC_CASES],
)
def test_collector_processor_vectors(
    name: str,
    trace_id: str,
    tracestate: str,
    percent: float,
    precision: int,
    sampled: bool,
    th: str | None,
) -> None:
    ratio = min(_float32(percent), 100.0) / 100  # the processor's float32 percentage
    threshold = threshold_for(ratio, precision=precision)
    assert (randomness_of(trace_id, tracestate or None) >= threshold) is sampled
    if th is not None:
        assert encode_th(threshold) == th
    if precision == 4:  # keeps() decides at the Collector's default precision
        assert keeps(trace_id, ratio, tracestate or None) is sampled


def test_proportional_product_rounds_like_the_collector() -> None:
    # PROC "tiny probability rounding" and "arriving 50 percent sampled at 40 percent
    # precision 6 with tid": the proportional mode multiplies the arriving probability
    assert encode_th(threshold_for(probability_of(decode_th("fffc")) * 2.0**-14)) == "fffffff"
    assert encode_th(threshold_for(0.5 * 0.4, precision=6)) == "cccccd"
    assert encode_th(threshold_for(0.4, precision=6)) == "99999a"


def test_keeps_is_nested_across_rates() -> None:
    # a trace kept at p is kept at every p' >= p: the rates' samples nest
    ids = [f"{(i * 0x9E3779B97F4A7C15) % (1 << 128):032x}" for i in range(1, 3000)]
    small = {t for t in ids if keeps(t, 0.02)}
    large = {t for t in ids if keeps(t, 0.1)}
    assert small and small < large


def test_keeps_edges_and_fallbacks() -> None:
    trace = "0af7651916cd43dd8448eb211c80319c"
    assert keeps(trace, 1.0) and keeps(trace, 5.0)
    assert not keeps(trace, 0.0) and not keeps(trace, -1.0)
    # below 2**-56 counts as 2**-56 (the Collector rounds such rates up)
    assert keeps("ffffffffffffffffffffffffffffffff", 1e-30)
    # a trace id that is not W3C-shaped is decided by a stable hash of it, never raising
    assert keeps("t1", 0.5) == keeps("t1", 0.5) == (key_randomness("t1") >= 1 << 55)
    # a malformed rv is ignored: the trace id decides (as the JavaScript SDK does)
    assert randomness_of(trace, "ot=rv:xyz") == randomness_of(trace)
    assert randomness_of(trace, "vendor=a,ot=th:8;rv:00000000000001 , b=c") == 1


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: threshold_for(0.0), "probability must be in"),
        (lambda: threshold_for(1.5), "probability must be in"),
        (lambda: threshold_for(float("nan")), "probability must be in"),
        (lambda: threshold_for("0.5"), "probability must be a number"),  # type: ignore[arg-type]
        (lambda: threshold_for(0.5, precision=15), "precision must be"),
        (lambda: threshold_for(0.5, precision=-1), "precision must be"),
        (lambda: keeps("0af7651916cd43dd8448eb211c80319c", float("nan")), "probability"),
        (lambda: randomness_of("xyz"), "trace_id must be 32 hex digits"),
        (lambda: randomness_of("0" * 32), "not all zero"),
        (lambda: randomness_of("0x" + "1" * 30), "trace_id must be 32 hex digits"),
        (lambda: decode_th(""), "th must be 1 to 14 hex digits"),
        (lambda: decode_th("abababababababab"), "th must be 1 to 14 hex digits"),
        (lambda: decode_th("-1"), "th must be 1 to 14 hex digits"),
        (lambda: encode_th(MAX_ADJUSTED_COUNT), "threshold must be"),
        (lambda: probability_of(-1), "threshold must be"),
        (lambda: key_randomness(7), "key must be a string"),  # type: ignore[arg-type]
    ],
)
def test_bad_inputs_name_the_field(call: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()  # type: ignore[operator]


def test_tracestate_threshold_reads_th_or_nothing() -> None:
    assert tracestate_threshold(None) is None
    assert tracestate_threshold("ot=rv:00000000000001") is None
    assert tracestate_threshold("ot=th:zz") is None
    assert tracestate_threshold("ot=th:80000000000000") == 1 << 55


def test_key_randomness_is_stable_and_spread() -> None:
    assert key_randomness("conv-42") == key_randomness("conv-42")
    values = [key_randomness(f"conv-{i}") for i in range(4000)]
    assert all(0 <= v < MAX_ADJUSTED_COUNT for v in values)
    share = sum(key_kept(f"conv-{i}", 0.25) for i in range(4000)) / 4000
    assert 0.22 < share < 0.28
