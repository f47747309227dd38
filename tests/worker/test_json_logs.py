"""``log_format = "json"``: the worker's log lines as one JSON object a line, for log
pipelines; a forged newline in a message stays inside its line."""

from __future__ import annotations

import json
import logging

from spanjudge.settings import load_settings
from spanjudge.worker.service import JsonLines


def test_a_log_record_is_one_json_object_on_one_line() -> None:
    record = logging.LogRecord(
        "spanjudge.worker", logging.WARNING, __file__, 1, "judge down: %s", ("a\nb",), None
    )
    line = JsonLines().format(record)
    assert "\n" not in line
    parsed = json.loads(line)
    assert parsed["level"] == "WARNING" and parsed["logger"] == "spanjudge.worker"
    assert parsed["message"] == "judge down: a\nb"
    assert parsed["time"].endswith("+00:00")


def test_a_traceback_goes_in_its_own_field() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        import sys

        record = logging.LogRecord("x", logging.ERROR, __file__, 1, "failed", (), sys.exc_info())
    parsed = json.loads(JsonLines().format(record))
    assert "ValueError: boom" in parsed["traceback"]


def test_log_format_is_a_worker_setting() -> None:
    assert load_settings(None, store_url="sqlite:///:memory:").log_format == "text"
    assert load_settings(None, store_url="sqlite:///:memory:", log_format="json").log_format == (
        "json"
    )
