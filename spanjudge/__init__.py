"""spanjudge: LLM-as-a-judge scores for production traces, written back into the traces.

``import spanjudge`` stays light: the tracer is imported eagerly (it only needs OpenTelemetry);
evaluation, stores and judges load on first use of their names.
"""

from __future__ import annotations

from typing import Any

from spanjudge._version import __version__

__all__ = ["__version__"]


# name -> module that defines it; loaded on first attribute access (PEP 562) so that the
# tracer's import path never pulls in pydantic models, SQLite, litellm or APScheduler.
_LAZY: dict[str, str] = {}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'spanjudge' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
