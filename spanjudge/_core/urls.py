"""Store URLs made safe to print: :func:`redact_url` hides the password wherever it is given.

It is the one redactor for store URLs: the PostgreSQL store's error messages, the worker's
start-up log and the CLI's messages all use it.

Example::

    from spanjudge._core.urls import redact_url

    redact_url("postgresql://app:s3cret@db:5432/spans?sslmode=require")
    # 'postgresql://app:***@db:5432/spans?sslmode=require'
"""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, urlencode

__all__ = ["redact_url"]

# libpq's names for a password (a URL parameter or a key=value connection string)
_SECRET_KEYS = frozenset({"password", "passwd", "pass", "sslpassword"})
# key = value in a libpq connection string; a value may be quoted with '...' and \' inside
_CONNINFO_SECRET = re.compile(
    r"\b(" + "|".join(sorted(_SECRET_KEYS)) + r")(\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)",
    re.IGNORECASE,
)


def redact_url(url: str) -> str:
    """``url`` with ``***`` for its password: in the user info (``user:pw@host``), in a
    ``password=`` query parameter, or in a libpq ``key=value`` string; the rest unchanged."""
    if "://" not in url:  # a file path, or a libpq connection string
        return _CONNINFO_SECRET.sub(r"\1\2***", url)
    base, sep, query = url.partition("?")
    scheme, rest = base.split("://", 1)
    if "@" in rest:
        creds, host = rest.rsplit("@", 1)
        user = creds.split(":", 1)[0]
        base = f"{scheme}://{user}:***@{host}" if ":" in creds else f"{scheme}://{user}@{host}"
    if sep:
        pairs = parse_qsl(query, keep_blank_values=True)
        query = urlencode(
            [(k, "***" if k.lower() in _SECRET_KEYS else v) for k, v in pairs], safe="*/"
        )
    return base + sep + query
