"""Consistent probability sampling, the way OpenTelemetry defines it.

A trace carries 56 bits of randomness ``R``: the ``rv`` sub-key of the ``ot`` entry of its W3C
``tracestate`` when present, else the low 56 bits of its trace id. A sampling probability ``p``
becomes a rejection threshold ``T`` (about ``(1 - p) * 2**56``, rounded to a few hexadecimal
digits the way the Collector's ``pkg/sampling`` rounds it), and the trace is kept iff
``R >= T``. Every participant that follows these rules (an SDK's trace-id-ratio sampler, the
Collector's ``probabilistic_sampler`` in proportional mode, a rule sampling by trace) keeps the
same traces at the same probability, and a trace kept at ``p`` is kept at every ``p' >= p``.

Specification: "TraceState: Probability Sampling" (tracestate-probability-sampling.md) and
"TraceState Handling" (tracestate-handling.md) in open-telemetry/opentelemetry-specification.

Example::

    >>> threshold_for(0.25)
    54043195528445952
    >>> encode_th(threshold_for(0.01))
    'fd70a'
    >>> keeps("4bf92f3577b34da6a3ce929d0e0e4736", 0.5)  # R = 0xce929d0e0e4736 >= 0x80...
    True
    >>> keeps("4bf92f3577b34da6a3ce929d0e0e4736", 0.5, tracestate="ot=rv:10000000000000")
    False
"""

from __future__ import annotations

import hashlib
import math
import re
from functools import lru_cache

from spanjudge.errors import ConfigError

__all__ = [
    "DEFAULT_PRECISION",
    "MAX_ADJUSTED_COUNT",
    "MIN_PROBABILITY",
    "decode_th",
    "encode_th",
    "explicit_randomness",
    "keeps",
    "key_kept",
    "key_randomness",
    "probability_of",
    "randomness_of",
    "threshold_for",
    "tracestate_threshold",
]

MAX_ADJUSTED_COUNT = 1 << 56  # number of distinct 56-bit randomness values
MIN_PROBABILITY = 1.0 / MAX_ADJUSTED_COUNT  # the smallest probability a threshold can express
NUM_HEX_DIGITS = 14  # 56 bits
DEFAULT_PRECISION = 4  # the Collector's probabilistic_sampler default (sampling_precision)
_HEX_BITS = 4
_HEX = frozenset("0123456789abcdef")
_MASK56 = MAX_ADJUSTED_COUNT - 1
_TRACE_ID = re.compile(r"[0-9a-fA-F]{32}|[0-9a-fA-F]{16}")


def _round_half_away(x: float) -> int:
    # x is non-negative and exact (a float times a power of two); Python's round() rounds
    # halves to even, the Collector's math.Round rounds them away from zero
    whole = math.floor(x)
    return int(whole) + (1 if x - whole >= 0.5 else 0)


def threshold_for(probability: float, precision: int = DEFAULT_PRECISION) -> int:
    """The 56-bit rejection threshold for sampling ``probability``.

    ``precision`` is the number of significant hexadecimal digits kept (0 means all 14); like
    the Collector, one digit more is kept for each leading ``0`` or ``f`` digit of the
    threshold, so that probabilities near 0 or 1 keep their relative accuracy. (The
    specification's example code adds digits for leading ``f`` only and keeps at most 12: at
    precision 4 the two differ above a probability of 15/16 and below about 2**-32, measured;
    this follows the Collector, which is what drops the traces.)
    Probability 1 gives threshold 0 (keep everything).

    Raises ``ValueError`` naming ``probability`` outside ``[2**-56, 1]`` (0 is not a
    probability here: "never" is not a sampling probability in the specification) and
    ``precision`` outside ``0..14``.

    Example::

        >>> hex(threshold_for(0.01))  # 1% has a leading f: 5 digits kept
        '0xfd70a000000000'
        >>> hex(threshold_for(0.01, precision=0))
        '0xfd70a3d70a3d71'
    """
    if isinstance(probability, bool) or not isinstance(probability, (int, float)):
        raise ConfigError(f"probability must be a number, got {probability!r}")
    if isinstance(precision, bool) or not isinstance(precision, int):
        raise ConfigError(f"precision must be an integer 0..14, got {precision!r}")
    if not 0 <= precision <= NUM_HEX_DIGITS:
        raise ConfigError(f"precision must be an integer 0..14, got {precision!r}")
    fraction = float(probability)
    if not (MIN_PROBABILITY <= fraction <= 1.0):  # also NaN
        raise ConfigError(f"probability must be in [2**-56, 1], got {probability!r}")
    if precision == 0:
        precision = NUM_HEX_DIGITS
    if fraction == 1.0:
        return 0
    # each factor of 16 below 1 (in the probability or in its complement) is one leading
    # 0 or f digit that carries no information, so it does not count towards the precision
    _, exp_keep = math.frexp(fraction)
    _, exp_reject = math.frexp(1.0 - fraction)
    precision = min(
        NUM_HEX_DIGITS,
        max(precision + (-exp_keep) // _HEX_BITS, precision + (-exp_reject) // _HEX_BITS),
    )
    threshold = MAX_ADJUSTED_COUNT - _round_half_away(fraction * MAX_ADJUSTED_COUNT)
    shift = _HEX_BITS * (NUM_HEX_DIGITS - precision)
    if shift:
        threshold = ((threshold + (1 << (shift - 1))) >> shift) << shift
    return threshold


@lru_cache(maxsize=256)
def _cached_threshold(probability: float) -> int:
    return threshold_for(probability)


def probability_of(threshold: int) -> float:
    """The sampling probability a rejection threshold stands for: ``(2**56 - T) / 2**56``."""
    if isinstance(threshold, bool) or not isinstance(threshold, int):
        raise ConfigError(f"threshold must be an integer in [0, 2**56], got {threshold!r}")
    if not 0 <= threshold <= MAX_ADJUSTED_COUNT:
        raise ConfigError(f"threshold must be an integer in [0, 2**56], got {threshold!r}")
    return (MAX_ADJUSTED_COUNT - threshold) / MAX_ADJUSTED_COUNT


def encode_th(threshold: int) -> str:
    """The ``th`` sub-key value for a threshold: 14 lowercase hex digits, trailing zeros
    dropped; ``"0"`` for threshold 0 (keep everything).

    Example::

        >>> encode_th(0xC0000000000000), encode_th(0)
        ('c', '0')
    """
    if isinstance(threshold, bool) or not isinstance(threshold, int):
        raise ConfigError(f"threshold must be an integer in [0, 2**56), got {threshold!r}")
    if not 0 <= threshold < MAX_ADJUSTED_COUNT:
        # 2**56 (never sample) has no th encoding: nothing sampled carries it
        raise ConfigError(f"threshold must be an integer in [0, 2**56), got {threshold!r}")
    if threshold == 0:
        return "0"
    return f"{threshold:014x}".rstrip("0")


def decode_th(value: str) -> int:
    """The threshold a ``th`` value encodes: 1 to 14 hex digits, right-padded with zeros to 14
    (uppercase is read too, as the Collector does). ``ValueError`` naming ``th`` otherwise.

    Example::

        >>> decode_th("c") == 0xC0000000000000
        True
    """
    if (
        not isinstance(value, str)
        or not 1 <= len(value) <= NUM_HEX_DIGITS
        or not set(value.lower()) <= _HEX
    ):
        raise ConfigError(f"th must be 1 to 14 hex digits, got {value!r}")
    return int(value, 16) << (_HEX_BITS * (NUM_HEX_DIGITS - len(value)))


def _ot_fields(tracestate: str | None) -> dict[str, str]:
    # W3C tracestate: comma-separated key=value members with optional spaces; OpenTelemetry's
    # member is "ot", its value ";"-separated key:value pairs
    if not tracestate:
        return {}
    for member in tracestate.split(","):
        key, sep, value = member.strip().partition("=")
        if sep and key == "ot":
            out: dict[str, str] = {}
            for pair in value.split(";"):
                k, colon, v = pair.partition(":")
                if colon and k not in out:
                    out[k] = v
            return out
    return {}


def explicit_randomness(tracestate: str | None) -> int | None:
    """The ``rv`` value of the ``ot`` tracestate entry, or ``None`` when there is none.

    ``rv`` is 14 hex digits (the specification writes them lowercase; uppercase is read too,
    as the Collector and the JavaScript SDK do). A malformed one is ignored (``None``), so the
    trace id's randomness applies, as in the JavaScript SDK (the Collector instead reports the
    tracestate as unparseable and, by default, drops the span).
    """
    rv = _ot_fields(tracestate).get("rv")
    if rv is None or len(rv) != NUM_HEX_DIGITS or not set(rv.lower()) <= _HEX:
        return None
    return int(rv, 16)


def tracestate_threshold(tracestate: str | None) -> int | None:
    """The ``th`` threshold recorded in the tracestate, or ``None`` when absent or malformed."""
    th = _ot_fields(tracestate).get("th")
    if th is None:
        return None
    try:
        return decode_th(th)
    except ValueError:
        return None


def randomness_of(trace_id: str, tracestate: str | None = None) -> int:
    """The trace's 56-bit randomness: ``rv`` from the tracestate when present, else the least
    significant 56 bits (the last 14 hex digits) of the trace id.

    ``trace_id`` is 32 hex digits (16 are accepted too: 64-bit ids from older tracers); any
    other shape, or the all-zero id (invalid in W3C), raises ``ValueError`` naming
    ``trace_id`` unless ``rv`` is given.

    Example::

        >>> hex(randomness_of("4bf92f3577b34da6a3ce929d0e0e4736"))
        '0xce929d0e0e4736'
        >>> hex(randomness_of("4bf92f3577b34da6a3ce929d0e0e4736", "ot=th:8;rv:0123456789abcd"))
        '0x123456789abcd'
    """
    if tracestate:
        rv = explicit_randomness(tracestate)
        if rv is not None:
            return rv
    if not isinstance(trace_id, str) or _TRACE_ID.fullmatch(trace_id) is None:
        raise ConfigError(f"trace_id must be 32 hex digits, got {trace_id!r}")
    value = int(trace_id, 16)
    if value == 0:
        raise ConfigError(f"trace_id must be 32 hex digits, not all zero, got {trace_id!r}")
    return value & _MASK56


def key_randomness(key: str) -> int:
    """56 bits of randomness for any stable key (a conversation id): BLAKE2b of the key.

    The same value in every process and every run; independent of the trace ids, so a
    conversation's decision does not depend on which of its traces arrives first.

    Example::

        >>> key_randomness("conv-42") == key_randomness("conv-42")
        True
    """
    if not isinstance(key, str):
        raise ConfigError(f"key must be a string, got {key!r}")
    digest = hashlib.blake2b(key.encode(), digest_size=7, person=b"spanjudge-key").digest()
    return int.from_bytes(digest, "big")


def key_kept(key: str, probability: float) -> bool:
    """Whether a key (a conversation id) is in the consistent sample at ``probability``:
    ``key_randomness(key) >= threshold_for(probability)``, with :func:`keeps`' edge cases.

    Example::

        >>> key_kept("conv-42", 1.0), key_kept("conv-42", 0.0)
        (True, False)
    """
    edge = _edge(probability)
    if edge is not None:
        return edge
    return key_randomness(key) >= _cached_threshold(max(float(probability), MIN_PROBABILITY))


def _edge(probability: float) -> bool | None:
    # True/False for the probabilities decided without randomness, None for the others
    if isinstance(probability, bool) or not isinstance(probability, (int, float)):
        raise ConfigError(f"probability must be a number, got {probability!r}")
    if math.isnan(probability):
        raise ConfigError("probability must be a number in [0, 1], got nan")
    if probability >= 1.0:
        return True
    if probability <= 0.0:
        return False
    return None


def keeps(trace_id: str, probability: float, tracestate: str | None = None) -> bool:
    """Whether the trace is in the consistent sample at ``probability`` (R >= T).

    ``probability`` 1 (or more) keeps every trace and 0 none; values between 0 and 2**-56 are
    raised to 2**-56, as the Collector does. The threshold is the Collector's default
    4-digit rounding, so a Collector ``probabilistic_sampler`` in proportional mode at the
    same percentage keeps the same traces (for spans arriving without an earlier ``th``).
    A trace id that is not W3C-shaped (tests, replays) falls back to :func:`key_randomness`
    of the id, so the decision stays deterministic instead of raising.

    Example::

        >>> trace_id = "0af7651916cd43dd8448eb211c80319c"
        >>> keeps(trace_id, 1.0), keeps(trace_id, 0.0)
        (True, False)
    """
    edge = _edge(probability)
    if edge is not None:
        return edge
    try:
        randomness = randomness_of(trace_id, tracestate)
    except ValueError:
        randomness = key_randomness(str(trace_id))
    return randomness >= _cached_threshold(max(float(probability), MIN_PROBABILITY))
