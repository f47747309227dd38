"""Untrusted text made safe for one log line: what a received span, log record, request or label
carries (a service name, a span or scope name, an attribute key, a conversation id) is escaped
and cut before it is formatted into a log message.

A newline in a ``service.name`` would otherwise forge a whole worker log line, and a 1 MB name
would be written out in full each time it is logged. :func:`log_text` escapes every character
``repr`` escapes (control characters, ``\\n``, ``\\r``, line and paragraph separators, bidi
overrides, other non-printable code points) plus the backslash itself, so an escape in the output
always stands for one character of the input; and it keeps at most :data:`LIMIT` characters of
output, marking a cut with the original length.

Example::

    log_text("shop\\n2026-01-01 ERROR forged")  # -> 'shop\\\\n2026-01-01 ERROR forged'
    log_text("x" * 1_000_000)  # -> 'xxx...x...(cut, 1000000 chars)', 200 x's
"""

from __future__ import annotations

LIMIT = 200
"""Characters of escaped text kept from one untrusted string (before the cut marker)."""


def log_text(value: object, limit: int = LIMIT) -> str:
    """``value`` as text fit for a log line: non-printable characters and backslashes escaped
    as ``repr`` spells them, at most ``limit`` characters of it kept, then
    ``...(cut, N chars)`` when the original (``N`` characters) was longer."""
    text = value if isinstance(value, str) else str(value)
    if len(text) <= limit and text.isprintable() and "\\" not in text:
        return text  # the common case: nothing to escape or cut
    out: list[str] = []
    used = 0
    # only the first ``limit`` input characters can contribute: each is at least one out
    for ch in text[:limit]:
        piece = ch if ch.isprintable() and ch != "\\" else repr(ch)[1:-1]
        if used + len(piece) > limit:
            break
        out.append(piece)
        used += len(piece)
    else:
        if len(text) <= limit:
            return "".join(out)
    return "".join(out) + f"...(cut, {len(text)} chars)"
