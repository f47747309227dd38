"""What every ``spanjudge`` command shares: the exit codes, how a command fails, ``--since``,
the store options, loading the settings and opening the store.

Exit codes (the same for every command, as click itself uses 2 for a bad option):

* 0: done;
* 1: the command ran and failed (the worker or a store call failed, the demo's evaluations did),
  or what the settings name is not available now (PostgreSQL down, the worker's port in use);
* 2: usage or configuration error: a bad option or argument, invalid settings, a refused
  label, or something the arguments name that is not there (the store file, the trace).

A command ends with :func:`usage_error` or :func:`command_failed`; a :class:`SpanjudgeError`
that escapes a command is mapped by the group (:class:`SpanjudgeGroup`): a ``ConfigError`` or a
``FeedbackError`` is a usage error, any other is a failure. Either way the message is printed as
``error: <message>`` on stderr, without a traceback.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, NoReturn, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import click

from spanjudge.errors import ConfigError, FeedbackError, SpanjudgeError

if TYPE_CHECKING:
    from spanjudge._store.sql import SpanStore
    from spanjudge.settings import WorkerSettings

__all__ = [
    "EXIT_CODES_HELP",
    "EXIT_FAILED",
    "EXIT_OK",
    "EXIT_USAGE",
    "TRACE_ID_CHARS",
    "CommandError",
    "SpanjudgeGroup",
    "command_failed",
    "load_cli_settings",
    "missing_sqlite_file",
    "opened_store",
    "opened_stores",
    "parse_since",
    "resolve_trace_id",
    "since_option_value",
    "store_options",
    "stores_options",
    "usage_error",
]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2

# \b keeps click from re-wrapping the lines
EXIT_CODES_HELP = (
    "\b\nExit codes:\n"
    "  0  done\n"
    "  1  the command ran and failed (the worker, a store call, the demo's evaluations),\n"
    "     or what the settings name is not available now (PostgreSQL, the worker's port)\n"
    "  2  usage or configuration error: a bad option or argument, invalid settings,\n"
    "     a refused label, or a store file or trace that is not there"
)

_F = TypeVar("_F", bound=Callable[..., Any])


class CommandError(SpanjudgeError, click.ClickException):
    """Ends a command: ``error: <message>`` on stderr, then exit with ``exit_code``.

    A SpanjudgeError like every exception of the package; click handles it (its base
    ClickException), so it never reaches a caller of the CLI."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code

    def show(self, file: IO[Any] | None = None) -> None:
        click.echo(f"error: {self.format_message()}", err=True)


def usage_error(message: str) -> NoReturn:
    """Exit 2: the arguments, the settings or what they name are wrong."""
    raise CommandError(message, EXIT_USAGE)


def command_failed(message: str) -> NoReturn:
    """Exit 1: the command ran and failed."""
    raise CommandError(message, EXIT_FAILED)


class SpanjudgeGroup(click.Group):
    """A click group that turns our exceptions into the exit-code convention, not tracebacks."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except CommandError:
            raise  # already carries its exit code
        except (ConfigError, FeedbackError) as exc:
            raise CommandError(str(exc), EXIT_USAGE) from exc
        except SpanjudgeError as exc:
            raise CommandError(str(exc), EXIT_FAILED) from exc


# ------------------------------------------------------------------------------ --since
_SINCE_HELP = "expected e.g. 30m, 6h, 2d or a Unix time"
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_since(text: str, *, now: float) -> float:
    """``"90m"``, ``"6h"``, ``"2d"`` -> that long before ``now``; a plain number is a Unix time."""
    value = text.strip().lower()
    if value and value[-1] in _UNITS:
        try:
            amount = float(value[:-1])
        except ValueError:
            raise ConfigError(f"--since {text!r}: {_SINCE_HELP}") from None
        if amount < 0:
            raise ConfigError(f"--since {text!r}: a duration cannot be negative")
        return now - amount * _UNITS[value[-1]]
    try:
        return float(value)
    except ValueError:
        raise ConfigError(f"--since {text!r}: {_SINCE_HELP}") from None


def since_option_value(text: str | None) -> float | None:
    """``--since`` as a Unix time (None: no limit); a bad value is a usage error."""
    if text is None:
        return None
    try:
        return parse_since(text, now=time.time())
    except ValueError as exc:
        usage_error(str(exc))


# ------------------------------------------------------------------------------ the store
def store_options(func: _F) -> _F:
    """``--store URL`` and ``--config FILE``, as the commands that read the store take them."""
    func = click.option(
        "--store",
        "store_url",
        default=None,
        metavar="URL",
        help="Span store (default: the settings' store_url, else $SPANJUDGE_STORE_URL, "
        "else ./spanjudge.db).",
    )(func)
    return click.option(
        "--config",
        "config_path",
        type=click.Path(exists=True, dir_okay=False),
        default=None,
        help="Worker settings file (its store_url and rules).",
    )(func)


def stores_options(func: _F) -> _F:
    """``--store URL`` given any number of times (one per worker group, each with its own
    store; the commands add their sums up) and ``--config FILE``."""
    func = click.option(
        "--store",
        "store_urls",
        multiple=True,
        metavar="URL",
        help="Span store; give it once per worker group to read several (PostgreSQL: "
        "postgresql://host/db?schema=NAME names a group's store_schema). Default: the "
        "settings' store_url.",
    )(func)
    return click.option(
        "--config",
        "config_path",
        type=click.Path(exists=True, dir_okay=False),
        default=None,
        help="Worker settings file (its store_url, store_schema and defaults).",
    )(func)


def split_schema(url: str) -> tuple[str, str | None]:
    """``postgresql://host/db?schema=b`` -> (``postgresql://host/db``, ``"b"``); a URL without
    a ``schema`` parameter is returned as it is, with None."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    schemas = [value for name, value in query if name == "schema"]
    if not schemas:
        return url, None
    rest = urlencode([(name, value) for name, value in query if name != "schema"])
    return urlunsplit(parts._replace(query=rest)), schemas[-1]


@contextmanager
def opened_stores(settings: WorkerSettings, urls: tuple[str, ...]) -> Iterator[list[SpanStore]]:
    """The stores ``--store`` named (the settings' own store when none), all closed on exit.

    A URL's ``?schema=`` names its PostgreSQL schema, else the settings' ``store_schema``
    applies; a store named twice is a usage error (its results would count twice)."""
    if not urls:
        with opened_store(settings.store_url, schema=settings.store_schema) as store:
            yield [store]
        return
    seen: set[tuple[str, str | None]] = set()
    with ExitStack() as stack:
        stores = []
        for url in urls:
            plain, schema = split_schema(url)
            if schema is not None and not plain.startswith(("postgresql://", "postgres://")):
                usage_error(f"--store {url}: ?schema= is for PostgreSQL stores")
            schema = schema if schema is not None else settings.store_schema
            if (plain, schema) in seen:
                usage_error(f"--store {url} is given twice: its results would count twice")
            seen.add((plain, schema))
            stores.append(stack.enter_context(opened_store(plain, schema=schema)))
        yield stores


def load_cli_settings(config_path: str | None, store_url: str | None = None) -> WorkerSettings:
    """The worker settings, with ``--store`` over the file's store_url (ConfigError: exit 2)."""
    from spanjudge.settings import load_settings

    overrides = {"store_url": store_url} if store_url else {}
    return load_settings(config_path, **overrides)


def missing_sqlite_file(url: str) -> str | None:
    """The path of a SQLite store URL whose file does not exist, else None."""
    if url.startswith("sqlite://"):
        path = url[len("sqlite://") :]
        path = path[1:] if path.startswith("/") else path
    elif "://" in url:
        return None
    else:
        path = url
    if not path or path == ":memory:" or Path(path).exists():
        return None
    return path


@contextmanager
def opened_store(
    url: str, *, hint: str = "pass --store", schema: str | None = None
) -> Iterator[SpanStore]:
    """The store at ``url`` (in ``schema`` on PostgreSQL: a worker's ``store_schema``), closed
    on exit; a SQLite file that is not there is a usage error (opening it would create an
    empty database and report nothing found)."""
    from spanjudge._core.urls import redact_url
    from spanjudge._store import open_store

    missing = missing_sqlite_file(url)
    if missing is not None:
        usage_error(f"no span store at {missing} ({redact_url(url)}); {hint}")
    store = open_store(url, schema=schema) if schema else open_store(url)
    try:
        yield store
    finally:
        store.close()


# ------------------------------------------------------------------------------ trace ids
TRACE_ID_CHARS = 32


def resolve_trace_id(store: SpanStore, given: str, *, where: str) -> str:
    """The stored trace id that starts with ``given`` (the demo's table prints 12 characters);
    a whole id is returned as it is, for the command to report when it is not stored.

    No match or several is a usage error; ``where`` names the store in the message."""
    prefix = given.strip().lower()
    if len(prefix) >= TRACE_ID_CHARS:
        return prefix
    found = store.trace_ids_with_prefix(prefix, limit=2)
    if len(found) == 1:
        return found[0]
    if not found:
        usage_error(
            f"no trace starting with {prefix!r} in the store {where} (a trace id is "
            f"{TRACE_ID_CHARS} hex characters; wrong id or store, or not arrived yet)"
        )
    usage_error(f"several traces start with {prefix}: {', '.join(found)}, ...; give more of it")
