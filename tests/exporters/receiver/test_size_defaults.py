"""The receiver's size limits are spelt once: its defaults are the worker settings' defaults."""

from __future__ import annotations

import inspect

from spanjudge._receive.receiver import create_receiver_app
from spanjudge.settings import WorkerSettings


def test_the_receiver_defaults_are_the_settings_defaults() -> None:
    parameters = inspect.signature(create_receiver_app).parameters
    for name in ("max_body_bytes", "max_decompressed_bytes"):
        assert parameters[name].default == WorkerSettings.model_fields[name].default, name
    assert WorkerSettings.model_fields["max_body_bytes"].default == 8 * 2**20
    assert WorkerSettings.model_fields["max_decompressed_bytes"].default == 64 * 2**20
