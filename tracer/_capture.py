"""Capture policy and serialisation: what leaves the process, and in what shape.

Every captured value goes through :func:`serialize` (any Python object -> a bounded JSON-ish
string that never raises) and :func:`finish` (PII masking, the user's redaction hook, the
per-value size limit with a visible marker). The policy is one module-level object, set by
``spanjudge.configure()`` and read by the tracer on every call, so nothing on the per-call path
reads the environment.

>>> from spanjudge.tracer import _capture as capture
>>> _ = capture.set_policy(max_value_length=20)
>>> capture.finish("k", "x" * 30)[0]
'xxxxxxxxxxxxxxxxxxxx...[truncated 10 chars]'
>>> _ = capture.reset_policy()
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
from collections.abc import Callable, Mapping
from json.encoder import encode_basestring  # C-accelerated; what the encoder below uses too
from typing import Any

from spanjudge.errors import ConfigError
from spanjudge.tracer._attributes import TRUNCATION_MARKER

logger = logging.getLogger("spanjudge.tracer")

CONTENT_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
DEFAULT_MAX_VALUE_LENGTH = 16_384
DEFAULT_MAX_DEPTH = 8
# Containers longer than this are cut: a 10^6-element list must not cost 10^6 steps per call.
MAX_ITEMS = 1_000
REDACTION_FAILED = "<redaction failed>"

Redactor = Callable[[str, str], str]


@dataclasses.dataclass
class CapturePolicy:
    """What the tracer records. ``content=False`` keeps ids, scores, token counts and names only."""

    content: bool = True
    max_value_length: int = DEFAULT_MAX_VALUE_LENGTH
    redact: Redactor | None = None
    pii: bool = False
    max_depth: int = DEFAULT_MAX_DEPTH

    def __setattr__(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)
        if name != "plain_limit":
            # Derived, for the per-call fast path: one comparison, ``len(text) <= plain_limit``,
            # says both "content is on and nothing rewrites it" and "it fits"; -1 when a value
            # must go through finish() (content off, PII masking or a redaction hook).
            plain = self.content and not self.pii and self.redact is None
            object.__setattr__(
                self, "plain_limit", getattr(self, "max_value_length", -1) if plain else -1
            )

    plain_limit: int = dataclasses.field(default=-1, init=False, repr=False, compare=False)


def _content_from_env() -> bool:
    # Unset means on: spanjudge exists to evaluate content. Only an explicit "false" turns it off.
    raw = os.environ.get(CONTENT_ENV)
    if raw is None or not raw.strip():
        return True
    return raw.strip().lower() not in ("false", "0", "no", "off")


POLICY = CapturePolicy(content=_content_from_env())


def set_policy(
    *,
    content: bool | None = None,
    max_value_length: int | None = None,
    redact: Redactor | None = None,
    pii: bool | None = None,
    max_depth: int | None = None,
) -> CapturePolicy:
    """Change the policy in place (``None`` leaves a field as it is); returns the policy."""
    if content is not None:
        POLICY.content = content
    if max_value_length is not None:
        if max_value_length < 1:
            raise ConfigError("max_value_length must be >= 1")
        POLICY.max_value_length = max_value_length
    if redact is not None:
        POLICY.redact = redact
    if pii is not None:
        POLICY.pii = pii
    if max_depth is not None:
        POLICY.max_depth = max(1, max_depth)
    return POLICY


def reset_policy() -> CapturePolicy:
    """Back to the defaults, re-reading the content switch from the environment."""
    POLICY.content = _content_from_env()
    POLICY.max_value_length = DEFAULT_MAX_VALUE_LENGTH
    POLICY.redact = None
    POLICY.pii = False
    POLICY.max_depth = DEFAULT_MAX_DEPTH
    return POLICY


# --- failure accounting -----------------------------------------------------------------------
failures = 0  # capture errors swallowed so far (the app never sees them)
_logged = False


def note_failure(exc: BaseException) -> None:
    """Count a swallowed capture failure; log the first one at debug level."""
    global failures, _logged
    failures += 1
    if not _logged:
        _logged = True
        logger.debug("spanjudge capture failed (further failures are counted only)", exc_info=exc)


# --- serialisation ------------------------------------------------------------------------------
_PRIMITIVES = (str, int, float, bool, type(None))
_INF = float("inf")


def _safe_repr(value: Any) -> str:
    try:
        return repr(value)
    except Exception:
        try:
            return f"<{type(value).__qualname__} object>"
        except Exception:
            return "<unrepresentable>"


def valid_text(text: str) -> str:
    """``text`` without lone surrogates (the OTLP encoder drops a whole attribute over one)."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace").decode("utf-8")
    return text


def _cut(text: str, limit: int) -> str:
    if len(text) > limit:
        text = text[:limit] + TRUNCATION_MARKER.format(dropped=len(text) - limit)
    return valid_text(text)


def to_jsonable(value: Any, depth: int = 0, seen: set[int] | None = None) -> Any:
    """A JSON-safe copy of ``value``: cycles, depth, size and odd objects handled; never raises."""
    try:
        return _jsonable(value, depth, seen if seen is not None else set(), POLICY)
    except Exception as exc:  # a __getattr__ or model_dump that explodes
        note_failure(exc)
        return _safe_repr(value)


def _jsonable(
    value: Any, depth: int, seen: set[int], policy: CapturePolicy, leaf: int | None = None
) -> Any:
    limit = leaf or policy.max_value_length
    if isinstance(value, str):
        return _cut(value, limit)
    if isinstance(value, _PRIMITIVES):
        if isinstance(value, float) and (value != value or value in (_INF, -_INF)):
            return str(value)  # NaN and infinities are not JSON: "nan", "inf", "-inf"
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        raw = bytes(value[:limit])
        return raw.decode("utf-8", errors="replace") + (
            TRUNCATION_MARKER.format(dropped=len(value) - len(raw)) if len(value) > len(raw) else ""
        )
    if depth >= policy.max_depth:
        return "<max depth>"
    ident = id(value)
    if ident in seen:
        return "<cycle>"
    seen.add(ident)
    try:
        if isinstance(value, Mapping):
            out: dict[str, Any] = {}
            for i, (k, v) in enumerate(value.items()):
                if i >= MAX_ITEMS:
                    out["<more>"] = len(value) - MAX_ITEMS
                    break
                key = valid_text(k) if isinstance(k, str) else _safe_repr(k)
                out[key] = _jsonable(v, depth + 1, seen, policy, leaf)
            return out
        if isinstance(value, (list, tuple, set, frozenset)):
            items = []
            for i, v in enumerate(value):
                if i >= MAX_ITEMS:
                    items.append(f"<{len(value) - MAX_ITEMS} more>")
                    break
                items.append(_jsonable(v, depth + 1, seen, policy, leaf))
            return items
        # pydantic v2 / v1 models, duck-typed so pydantic is never imported here
        cls = type(value)
        if hasattr(cls, "model_fields") and callable(getattr(cls, "model_dump", None)):
            return _jsonable(value.model_dump(), depth + 1, seen, policy, leaf)  # pydantic v2
        if hasattr(cls, "__fields__") and callable(getattr(cls, "dict", None)):
            return _jsonable(value.dict(), depth + 1, seen, policy, leaf)  # pydantic v1
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            fields = {f.name: getattr(value, f.name, None) for f in dataclasses.fields(value)}
            return _jsonable(fields, depth + 1, seen, policy, leaf)
        return _cut(_safe_repr(value), limit)
    finally:
        seen.discard(ident)


def _default(value: Any) -> Any:
    # json.dumps meets an object it does not know: convert just that object, bounded.
    return to_jsonable(value, 1)


_fast_encoder = json.JSONEncoder(
    ensure_ascii=False, separators=(",", ":"), allow_nan=False, default=_default
)
# json builds a new C encoder on every dumps()/encode(); build it once. Without a markers dict
# it keeps no state between calls (thread-safe); a cycle then ends in RecursionError, which
# sends the value down the careful path like any other oddity.
_c_make_encoder = getattr(json.encoder, "c_make_encoder", None)
if _c_make_encoder is not None:
    _encode_chunks = _c_make_encoder(
        None, _default, json.encoder.encode_basestring, None, ":", ",", False, False, False
    )

    def _fast_encode(value: Any) -> str:
        return "".join(_encode_chunks(value, 0))

else:  # pragma: no cover - CPython always has the C accelerator

    def _fast_encode(value: Any) -> str:
        return _fast_encoder.encode(value)


def scalar_json(value: Any) -> str | None:
    """JSON of a ``str``, ``int``, ``bool`` or ``None`` (exact types), as ``json`` writes it;
    ``None`` for anything else. Floats are left to the encoder (NaN and infinities)."""
    kind = type(value)
    if kind is str:
        return encode_basestring(value)
    if value is None:
        return "null"
    if kind is bool:
        return "true" if value else "false"
    if kind is int and -_BIG_INT < value < _BIG_INT:
        return int.__repr__(value)
    return None


# Ints up to 600 digits only: int -> str may refuse longer ones (sys.set_int_max_str_digits,
# at least 640); the encoder's careful path deals with those.
_BIG_INT = 10**600
_SMALL = 8  # containers up to this size are written item by item; longer ones by the C encoder


def small_json(value: Any) -> str | None:
    """``dumps(value)`` for a scalar or a short flat list or dict of scalars (str keys), without
    setting up the C encoder (which costs more than the work for one short string); ``None``
    for any other value. The text is the encoder's, byte for byte."""
    kind = type(value)
    if kind is dict:
        if len(value) > _SMALL:
            return None
        items = []
        for key, item in value.items():
            text = scalar_json(item)
            if text is None or type(key) is not str:
                return None
            items.append(encode_basestring(key) + ":" + text)
        return "{" + ",".join(items) + "}"
    if kind is list:
        if len(value) > _SMALL:
            return None
        items = []
        for item in value:
            text = scalar_json(item)
            if text is None:
                return None
            items.append(text)
        return "[" + ",".join(items) + "]"
    return scalar_json(value)


def dumps(value: Any) -> str:
    """``value`` as compact JSON, strings included; never raises.

    The common case (plain dicts, lists and short strings) is one C-accelerated ``json`` pass.
    Anything unusual (cycles, NaN, odd keys, very deep or over-long values) takes the careful
    path, which cuts every string so the document usually still fits the size limit as valid
    JSON instead of being cut mid-way.
    """
    limit = POLICY.max_value_length
    try:
        text = small_json(value)
        if text is None:
            text = _fast_encode(value)
        if len(text) <= limit:
            return text
    except (ValueError, TypeError, RecursionError):
        pass
    except Exception as exc:  # a model_dump() or __iter__ that explodes
        note_failure(exc)
    try:
        text = json.dumps(to_jsonable(value), ensure_ascii=False, separators=(",", ":"))
        if len(text) > limit and limit >= 256:
            shorter = _jsonable(value, 0, set(), POLICY, max(64, limit // 8))
            text = json.dumps(shorter, ensure_ascii=False, separators=(",", ":"))
        return text
    except Exception as exc:
        note_failure(exc)
        return json.dumps(_safe_repr(value))


def serialize(value: Any) -> str:
    """``value`` as a string: itself if it is a ``str``, else compact JSON (repr as fallback)."""
    if isinstance(value, str):
        return value
    return dumps(value)


# --- PII, redaction, truncation -----------------------------------------------------------------
_EMAIL = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}")
# 13-19 digits, optionally grouped by spaces or dashes; masked only when the Luhn check passes,
# so order numbers and timestamps stay readable.
_CARD = re.compile(r"(?<![\w])(?:\d[ -]?){12,18}\d(?![\w])")
# Candidates: a digit run with separators; masked when it has 9-15 digits and is not a date.
_PHONE = re.compile(r"(?<![\w+])\+?\(?\d[\d ().-]{6,}\d(?![\w])")
_DATE = re.compile(r"\d{4}[-./]\d{1,2}[-./]\d{1,2}|\d{1,2}[-./]\d{1,2}[-./]\d{2,4}")


def _luhn(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = ord(ch) - 48
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def _card(match: re.Match[str]) -> str:
    digits = "".join(c for c in match.group() if c.isdigit())
    return "<card>" if _luhn(digits) else match.group()


def _phone(match: re.Match[str]) -> str:
    text = match.group()
    digits = sum(c.isdigit() for c in text)
    if 9 <= digits <= 15 and not _DATE.fullmatch(text.strip()):
        return "<phone>"
    return text


def mask_pii(text: str) -> str:
    """Replace emails, card numbers (Luhn-valid) and phone numbers with placeholders.

    >>> mask_pii("jane@example.com or +1 415-555-0132, on 2024-05-01")
    '<email> or <phone>, on 2024-05-01'
    """
    text = _EMAIL.sub("<email>", text)
    text = _CARD.sub(_card, text)
    return _PHONE.sub(_phone, text)


def finish(key: str, text: str) -> tuple[str, bool]:
    """Apply PII masking, the redaction hook and the size limit; returns (value, was_truncated).

    A redaction hook that raises withholds the value: nothing unredacted leaves the process.
    """
    policy = POLICY
    if policy.pii:
        text = mask_pii(text)
    if policy.redact is not None:
        try:
            text = str(policy.redact(key, text))
        except Exception as exc:
            note_failure(exc)
            text = REDACTION_FAILED
    limit = policy.max_value_length
    if len(text) > limit:
        return _cut(text, limit), True
    return text, False
