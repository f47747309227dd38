"""A function run every interval on APScheduler, in a daemon thread or on the running event loop.

::

    scheduler = every(tick, seconds=30, kind=None, job_id="spanjudge-monitor")
    ...
    scheduler.shutdown(wait=True)
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

from spanjudge.errors import ConfigError

APSCHEDULER_LOGGER = "apscheduler"


def quiet_apscheduler() -> None:
    """Keep APScheduler's per-run INFO lines ("Running job ...", "... executed successfully",
    two every tick) out of the worker's log at the default level, where they drowned its own
    messages. Its warnings (a missed or skipped run) still show. Left alone when the user set
    the ``apscheduler`` logger's level themselves."""
    quiet = logging.getLogger(APSCHEDULER_LOGGER)
    if quiet.level == logging.NOTSET:
        quiet.setLevel(logging.WARNING)


def every(run: Callable[[], None], *, seconds: float, kind: str | None, job_id: str) -> Any:
    """Start a scheduler that calls ``run`` every ``seconds``, the first time at once.

    ``kind="background"`` runs it on a daemon thread; ``"asyncio"`` schedules on the running
    event loop, each call in a worker thread so blocking I/O never stalls the loop; ``None``
    picks ``"asyncio"`` inside a running loop, else ``"background"``. Missed runs collapse into
    one (``coalesce``); a second run may start while one is in flight (``max_instances=2``), so
    ``run`` must return at once when it finds itself already running. Returns the started
    APScheduler scheduler (``shutdown(wait=True)`` stops it).
    """
    if kind is None:
        try:
            asyncio.get_running_loop()
            kind = "asyncio"
        except RuntimeError:
            kind = "background"
    quiet_apscheduler()
    job: Callable[..., Any]
    if kind == "asyncio":
        from apscheduler.schedulers.asyncio import AsyncIOScheduler

        scheduler: Any = AsyncIOScheduler(event_loop=asyncio.get_running_loop())

        async def job() -> None:
            await asyncio.to_thread(run)

    elif kind == "background":
        from apscheduler.schedulers.background import BackgroundScheduler

        scheduler = BackgroundScheduler(daemon=True)
        job = run
    else:
        raise ConfigError(f"scheduler must be 'background' or 'asyncio', got {kind!r}")
    scheduler.add_job(
        job,
        "interval",
        seconds=seconds,
        max_instances=2,
        coalesce=True,
        next_run_time=datetime.now(timezone.utc),  # at once, not one interval after the start
        id=job_id,
    )
    scheduler.start()
    return scheduler
