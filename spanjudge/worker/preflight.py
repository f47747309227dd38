"""What ``spanjudge worker`` checks before it listens: the store opens, the receiver's address can
be bound, the judge answers. Each failure is one line naming the setting to fix.

Settings that are wrong whatever the machine (a bad URL, a misspelt option) are refused when
they are read (:mod:`spanjudge.settings_checks`). What is checked here depends on the world at
start: the exit code tells the two kinds apart (``docs/reference/cli.md``):

* a :class:`~spanjudge.errors.ConfigError` (exit 2) when the settings must change: a SQLite path
  that cannot be a database, PostgreSQL refusing the role or password or not knowing the
  database, a host that is not this machine's, a port the worker may not bind;
* a :class:`~spanjudge.errors.StoreError` or :class:`UnavailableError` (exit 1) when the settings
  are right but what they name is not available now: PostgreSQL down, the port in use. Trying
  again later may work;
* a warning, and the worker starts, when the judge does not answer: it may come up later, and
  evaluations wait and retry until it does.

Example::

    from spanjudge.settings import load_settings
    from spanjudge.worker.preflight import bind_receiver, open_worker_store

    settings = load_settings("worker.toml")
    store = open_worker_store(settings)
    sockets = bind_receiver(settings.receiver_host, settings.receiver_port)
"""

from __future__ import annotations

import errno
import os
import re
import socket
import sqlite3
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from spanjudge._core.urls import redact_url
from spanjudge.errors import ConfigError, SpanjudgeError, StoreError
from spanjudge.settings_checks import is_postgres_url, unknown_judge_options
from spanjudge.settings_files import file_warnings

if TYPE_CHECKING:
    from spanjudge._store.sql import SpanStore
    from spanjudge.settings import WorkerSettings

__all__ = [
    "UnavailableError",
    "bind_receiver",
    "judge_unreachable",
    "open_worker_store",
    "start_warnings",
]

# seconds: a judge or a database that takes longer to accept a connection is reported as down
CONNECT_TIMEOUT = 3.0
_BACKLOG = 2048  # uvicorn's default
_MAX_REASON = 300
# the server's answers that no retry changes: the role, the password, the database or pg_hba.conf
# (a failed connection carries no SQLSTATE to tell them by, only libpq's English text)
_REFUSED_LOGIN = re.compile(
    r"FATAL:\s+(role .* does not exist|database .* does not exist|password authentication "
    r"failed|no pg_hba\.conf entry)"
)


class UnavailableError(SpanjudgeError):
    """Something the settings name is not available now (the receiver's port is in use); the
    command exits 1, as for a store that is down."""


def _one_line(text: object) -> str:
    return " ".join(str(text).split())[:_MAX_REASON]


# ------------------------------------------------------------------------------ the store
def open_worker_store(settings: WorkerSettings) -> SpanStore:
    """The store ``store_url`` names, opened (created or migrated); a failure names store_url.

    PostgreSQL is first tried with one plain connection, which says why it failed at once
    (the connection pool retries for its whole timeout and logs each attempt)."""
    from spanjudge._store import open_store

    url = settings.store_url
    options: dict[str, Any] = {}
    if settings.store_schema is not None:
        options["schema"] = settings.store_schema
    if is_postgres_url(url):
        _probe_postgres(url)
    try:
        return open_store(url, **options)
    except OSError as exc:  # the SQLite file's folder cannot be created
        raise ConfigError(
            f"store_url: cannot create the folder of the SQLite file {redact_url(url)}: "
            f"{exc.strerror or exc}"
        ) from exc
    except StoreError as exc:
        message = f"store_url: {_one_line(exc)}"
        cause = exc.__cause__
        if isinstance(cause, sqlite3.DatabaseError) and _not_a_usable_file(cause):
            raise ConfigError(message) from exc
        raise StoreError(message) from exc


def _not_a_usable_file(exc: sqlite3.DatabaseError) -> bool:
    """A SQLite error no retry fixes: the path is a folder, unwritable, or another kind of file
    (a locked or full database is worth another try)."""
    if not isinstance(exc, sqlite3.OperationalError):
        return True  # "file is not a database"
    text = str(exc).lower()
    return "unable to open" in text or "readonly" in text


def _probe_postgres(url: str) -> None:
    import psycopg

    dsn = url.replace("postgresql+psycopg://", "postgresql://", 1)
    try:
        psycopg.connect(dsn, connect_timeout=max(2, int(CONNECT_TIMEOUT))).close()
    except psycopg.Error as exc:
        reason = _one_line((str(exc).strip().splitlines() or [""])[0])  # not libpq's hint
        password = urlsplit(dsn).password
        if password:
            reason = reason.replace(password, "***")
        message = f"store_url: PostgreSQL at {redact_url(url)}: {reason}"
        if _REFUSED_LOGIN.search(reason):
            raise ConfigError(message) from None
        raise StoreError(message) from None


# ------------------------------------------------------------------------------ the receiver
def bind_receiver(host: str, port: int) -> list[socket.socket]:
    """Sockets bound to ``host:port`` and listening, one per address the host resolves to (as
    asyncio's ``create_server`` binds them), for uvicorn to serve on.

    Binding here, before the worker says it listens, turns a port in use into one line naming
    ``receiver_port`` (uvicorn would log an error and exit 3 after the worker had started)."""
    try:
        infos = socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except socket.gaierror as exc:
        raise ConfigError(f"receiver_host: cannot resolve {host!r}: {exc.strerror}") from None
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in dict.fromkeys(infos):
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                sock.bind(address)
            except OSError as exc:
                # "localhost" on a machine without IPv6: serve the addresses that exist
                if (
                    exc.errno == errno.EADDRNOTAVAIL
                    and family == socket.AF_INET6
                    and len(infos) > 1
                ):
                    sockets.pop().close()
                    continue
                raise
            sock.listen(_BACKLOG)
    except OSError as exc:
        for sock in sockets:
            sock.close()
        raise _bind_error(exc, host, port) from None
    return sockets


def _bind_error(exc: OSError, host: str, port: int) -> SpanjudgeError:
    where = f"{host}:{port}"
    if exc.errno == errno.EADDRINUSE:
        return UnavailableError(
            f"receiver_port: {where} is already in use (another worker, or another program, "
            "listens there)"
        )
    if exc.errno == errno.EACCES:
        return ConfigError(
            f"receiver_port: not allowed to listen on {where} (ports under 1024 need privileges)"
        )
    if exc.errno == errno.EADDRNOTAVAIL:
        return ConfigError(
            f"receiver_host: {host} is not an address of this machine (0.0.0.0: every interface)"
        )
    return ConfigError(f"receiver_host: cannot listen on {where}: {exc.strerror or exc}")


# ------------------------------------------------------------------------------ warnings
def judge_unreachable(endpoint: str, timeout: float = CONNECT_TIMEOUT) -> str | None:
    """Why nothing accepts a connection at the judge's ``endpoint`` URL, or None when something
    does (a TCP connection only: no request, no key sent)."""
    parts = urlsplit(endpoint)
    if not parts.hostname:
        return None
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
        socket.create_connection((parts.hostname, port), timeout=timeout).close()
    except (OSError, ValueError) as exc:
        return _one_line(getattr(exc, "strerror", None) or exc)
    return None


def start_warnings(settings: WorkerSettings, judge: Any) -> list[str]:
    """What the worker warns about at start without refusing to run: a judge that does not
    answer now (it may come up later) and judge_options spanjudge does not know (passed to
    litellm as they are: provider-specific ones are fine, a typo is not), and a config file
    every user can read that holds secrets."""
    warnings = file_warnings()
    endpoint = judge.endpoint() if callable(getattr(judge, "endpoint", None)) else ""
    if endpoint:
        reason = judge_unreachable(endpoint)
        if reason is not None:
            warnings.append(
                f"{_endpoint_key(settings)}: the judge at {redact_url(endpoint)} does not "
                f"answer now ({reason}); starting anyway: evaluations are retried until it does"
            )
    unknown = unknown_judge_options(settings.judge_options)
    if unknown:
        warnings.append(
            f"judge_options: {', '.join(unknown)} not options spanjudge knows; passed to litellm "
            "as they are (a provider-specific option is fine; check the spelling otherwise)"
        )
    return warnings


def _endpoint_key(settings: WorkerSettings) -> str:
    """The setting (or variable) the judge's endpoint came from."""
    if settings.judge_base_url:
        return "judge_base_url"
    for option in ("api_base", "base_url"):
        if option in settings.judge_options:
            return f"judge_options.{option}"
    return "OPENAI_API_BASE" if os.environ.get("OPENAI_API_BASE") else "OPENAI_BASE_URL"
