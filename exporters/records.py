"""The span as spanjudge stores and reads it, whatever produced it.

Three producers fill a :class:`SpanRecord`: the in-process store exporter (from the SDK's
``ReadableSpan``), the OTLP/HTTP receiver (from protobuf or JSON bodies) and the stores (from
their rows). Case rebuild, sampling filters and the score emitter consume it. Ids are lower-case
hex (32 characters for trace ids, 16 for span ids), times are Unix nanoseconds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from spanjudge.tracer import attributes as attrs

AttributeValue = Any  # str | bool | int | float | list of those (OTel attribute values)


@dataclass(slots=True)
class SpanEvent:
    name: str
    time_unix_nano: int
    attributes: dict[str, AttributeValue] = field(default_factory=dict)


@dataclass(slots=True)
class SpanRecord:
    trace_id: str
    span_id: str
    name: str
    start_time_unix_nano: int
    end_time_unix_nano: int
    parent_span_id: str | None = None
    kind: str = "INTERNAL"  # OTel SpanKind name
    status_code: str = "UNSET"  # UNSET | OK | ERROR
    status_message: str | None = None
    attributes: dict[str, AttributeValue] = field(default_factory=dict)
    resource: dict[str, AttributeValue] = field(default_factory=dict)
    events: list[SpanEvent] = field(default_factory=list)
    scope_name: str | None = None

    @property
    def service_name(self) -> str | None:
        value = self.resource.get("service.name")
        return str(value) if value is not None else None

    @property
    def conversation_id(self) -> str | None:
        value = self.attributes.get(attrs.GEN_AI_CONVERSATION_ID)
        return str(value) if value not in (None, "") else None

    @property
    def operation(self) -> str | None:
        value = self.attributes.get(attrs.GEN_AI_OPERATION_NAME)
        return str(value) if value is not None else None

    @property
    def is_root(self) -> bool:
        return not self.parent_span_id
