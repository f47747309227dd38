"""What makes two metric objects judge alike: a JSON-able identity for the judge-result cache.

A result may be reused only when the metric, its parameters, its prompts and the judge are the
same. Prompts live in code (a template class's functions), so they are fingerprinted from the
compiled code itself: every code object's instructions, constants (the prompt text) and names,
recursively. Any change to a template, even one word in a subclass, changes the digest, and it
does so without reading source files (which a wheel or a zipapp may not ship).

Example::

    from spanjudge.evaluators._judge.metrics.bias import BiasTemplate

    class Terse(BiasTemplate):
        @staticmethod
        def generate_reason(score: float, biases: list[str]) -> str:
            return f"In one sentence: why {score}? {biases}"

    assert class_digest(Terse) != class_digest(BiasTemplate)
"""

from __future__ import annotations

import enum
import hashlib
import json
import types
from functools import lru_cache
from typing import Any

# Parameters that change how a metric runs, never what it answers: not part of an identity.
EXECUTION_ONLY = frozenset({"async_mode", "verbose_mode", "model"})

_dumps = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode


def canonical_json(value: Any) -> str:
    """``value`` as JSON text with sorted keys and no spaces: equal values, equal text."""
    return _dumps(value)


def digest(value: Any) -> str:
    """SHA-256 (hex) of ``value``'s canonical JSON."""
    return hashlib.sha256(canonical_json(value).encode("ascii")).hexdigest()


def _stable_repr(value: Any) -> str:
    """``repr`` that does not depend on the process: a set's order follows string hashing,
    which differs between processes (``PYTHONHASHSEED``), so its members are sorted."""
    if isinstance(value, (set, frozenset)):
        return "{" + ",".join(sorted(_stable_repr(v) for v in value)) + "}"
    if isinstance(value, tuple):
        return "(" + ",".join(_stable_repr(v) for v in value) + ")"
    return repr(value)


def _feed_text(h: Any, value: Any) -> None:
    h.update(_stable_repr(value).encode("utf-8", "backslashreplace"))


def _feed_code(h: Any, code: types.CodeType) -> None:
    h.update(code.co_code)
    h.update(repr(code.co_names).encode())
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            _feed_code(h, const)
        else:
            _feed_text(h, const)


def _feed_value(h: Any, value: Any, seen: set[int]) -> None:
    if isinstance(value, (staticmethod, classmethod)):
        value = value.__func__
    if isinstance(value, property):
        value = value.fget
    if isinstance(value, types.FunctionType):
        _feed_code(h, value.__code__)
        for default in value.__defaults__ or ():
            _feed_text(h, default)
    elif isinstance(value, type):
        if id(value) not in seen:
            seen.add(id(value))
            _feed_class(h, value, seen)
    elif isinstance(value, (str, int, float, bool, bytes, tuple, frozenset)) or value is None:
        _feed_text(h, value)


def _feed_class(h: Any, cls: type, seen: set[int], stop: type | None = None) -> None:
    for klass in cls.__mro__:
        if klass is object or klass is stop:
            break
        h.update(f"{klass.__module__}.{klass.__qualname__}".encode())
        for name in sorted(vars(klass)):
            if name in ("__dict__", "__weakref__", "__doc__", "__module__", "__qualname__"):
                continue
            h.update(name.encode())
            _feed_value(h, vars(klass)[name], seen)


@lru_cache(maxsize=256)
def class_digest(cls: type, stop: type | None = None) -> str:
    """Fingerprint of a class and its bases (up to, not including, ``stop``): the code and
    constants of every method and the value of every plain class attribute.

    Two classes differing in one prompt word, one default or one method differ here.
    """
    h = hashlib.sha256()
    _feed_class(h, cls, set(), stop)
    return h.hexdigest()


def identity_value(value: Any) -> Any:
    """A parameter value as stable JSON data: classes by their digest, enums by value,
    pydantic models by their JSON, containers recursively. Anything else by ``repr``
    (an object whose repr holds a memory address then never matches: a miss, never a wrong
    hit)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, enum.Enum):
        return identity_value(value.value)
    if isinstance(value, type):
        return {"class": f"{value.__module__}.{value.__qualname__}", "code": class_digest(value)}
    if isinstance(value, dict):
        return {str(k): identity_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [identity_value(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted((identity_value(v) for v in value), key=canonical_json)
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return {"model": type(value).__qualname__, "data": identity_value(dump(mode="json"))}
    return {"repr": repr(value)}
