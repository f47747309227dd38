"""The monitor's scheduler keeps APScheduler's per-tick INFO lines out of the worker's log
(issue 30 item 10: two of them every tick drowned the worker's own messages), unless the user
set the ``apscheduler`` logger's level themselves."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator

import pytest

from spanjudge.evaluators._loop.schedule import APSCHEDULER_LOGGER, every

# importing litellm sets these two children to WARNING itself; a worker that has not imported
# it yet (the judge is imported lazily) logs through them at INFO
_CHILDREN = ("apscheduler.scheduler", "apscheduler.executors.default")


@pytest.fixture
def apscheduler_logger() -> Iterator[logging.Logger]:
    """The ``apscheduler`` loggers unconfigured (as in a fresh worker), restored after."""
    loggers = [logging.getLogger(name) for name in (APSCHEDULER_LOGGER, *_CHILDREN)]
    before = [log.level for log in loggers]
    for log in loggers:
        log.setLevel(logging.NOTSET)
    yield loggers[0]
    for log, level in zip(loggers, before, strict=True):
        log.setLevel(level)


def _one_tick() -> None:
    ran = threading.Event()
    scheduler = every(ran.set, seconds=3600, kind="background", job_id="log-test")
    assert ran.wait(10), "the first run is due at once"
    scheduler.shutdown(wait=True)  # the executor's "executed successfully" line is written


def _apscheduler_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name.startswith(APSCHEDULER_LOGGER)]


def test_a_tick_at_info_logs_no_apscheduler_line(
    apscheduler_logger: logging.Logger, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)  # the root logger, as a worker run at INFO has it
    _one_tick()
    assert _apscheduler_records(caplog) == []
    assert apscheduler_logger.level == logging.WARNING


def test_a_level_the_user_set_is_kept(
    apscheduler_logger: logging.Logger, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    apscheduler_logger.setLevel(logging.INFO)
    _one_tick()
    assert apscheduler_logger.level == logging.INFO
    messages = [r.getMessage() for r in _apscheduler_records(caplog)]
    assert any("executed successfully" in m for m in messages), messages
