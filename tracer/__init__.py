"""Capture side: ``@observe``, ``conversation()``, the current-span handle and capture policy.

Imports only OpenTelemetry and the standard library: this package sits on every request.

>>> from spanjudge.tracer import observe, conversation, current_span
>>> @observe(kind="tool")
... def add(a: int, b: int) -> int:
...     return a + b
>>> add(1, 2)
3
"""

from spanjudge.tracer._attributes import Kind
from spanjudge.tracer._capture import CapturePolicy, set_policy
from spanjudge.tracer._context import SpanHandle, conversation, current_span
from spanjudge.tracer._observe import observe

__all__ = [
    "CapturePolicy",
    "Kind",
    "SpanHandle",
    "conversation",
    "current_span",
    "observe",
    "set_policy",
]
