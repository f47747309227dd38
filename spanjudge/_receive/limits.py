"""What one OTLP export request may hold, counted before its objects are built.

Bytes alone do not bound a decoder: an empty protobuf message is 2 bytes on the wire and 45-175
in memory once parsed (upb), an empty JSON object 2 bytes and 64 as a dict. A 61 KB gzip body
of empty ResourceSpans (30 MiB inflated) took 2 GB and half a minute before any span was read.
So the receiver counts first, at C speed where it can:

- protobuf: the bytes that could start a message field are counted (``bytes.translate``, 10 ms
  for 7 MB); only when those could pass ``max_objects`` (or the record fields ``max_records``)
  does a walk of the wire format (:func:`~spanjudge._core.otlp_wire.count_messages`)
  count exactly, stopping at the limit;
- JSON: brackets, commas and colons bound the values ``json.loads`` builds (counted again
  without the strings when the cheap count is over); the records are counted in the loaded
  document, before protobuf messages are made from it;
- both, once parsed: each record is stored with its resource and scope name, so a big resource
  over many spans is refused before it is copied onto each one (``max_repeated_bytes``).

Each check answers ``None`` or the reason the request is refused whole (the receiver's 413,
which OTLP clients do not retry: the sender must send smaller batches).

Example::

    bound = bound_for(ExportTraceServiceRequest(), DecodeLimits())
    problem = bound.protobuf(body)  # None, or why the body is refused
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from google.protobuf.message import Message
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from spanjudge._core.otlp_wire import MessageTree, count_messages
from spanjudge._core.span_record import SpanRecord

__all__ = [
    "DEFAULT_LIMITS",
    "LOGS",
    "MAX_BODY_BYTES",
    "MAX_CONVERSATION_ID_BYTES",
    "MAX_DECOMPRESSED_BYTES",
    "MAX_INFLIGHT_BYTES",
    "TRACES",
    "Bound",
    "DecodeLimits",
    "InFlight",
    "RequestShape",
    "bound_for",
    "unstorable_span",
]

# The receiver's size limits, spelt once: the worker settings ``max_body_bytes`` and
# ``max_decompressed_bytes`` take these as their defaults (spanjudge/settings.py sits above this
# package, so the value lives here and the settings model names it).
MAX_BODY_BYTES = 8 * 2**20
"""Largest request body accepted, on the wire."""
MAX_DECOMPRESSED_BYTES = 64 * 2**20
"""Largest request body once inflated."""
MAX_INFLIGHT_BYTES = 256 * 2**20
"""Request bodies (as received, and inflated) held at once by requests being read, decoded or
stored; a request that would pass it is answered 503 + Retry-After (the worker setting
``max_inflight_bytes``)."""
MAX_CONVERSATION_ID_BYTES = 1024
"""The longest conversation id the store takes, in UTF-8 bytes. It is a key in indexes
(PostgreSQL refuses an index entry over about 2,700 bytes): a span carrying a longer one is
refused alone (OTLP partial success), before the write, so the rest of its request is stored."""

_CHUNK = 2**20  # bytes counted at a time: a bounded copy, and an early stop


@dataclass(frozen=True)
class DecodeLimits:
    """The most one export request may hold; over any of them it is refused whole.

    ``max_objects``: protobuf messages (resources, scopes, records, attributes and each of their
    values, events, links) or, in OTLP/JSON, values (objects, arrays, strings, numbers);
    ``max_records``: spans or log records; ``max_repeated_bytes``: the resource and scope name
    that each record is stored with, summed over the records. The walk that counts protobuf
    exactly reads at most ``8 * max_objects`` fields (its work).

    At the defaults a request costs at most about 150 MB of decoder memory (1,000,000 upb
    messages, or JSON values, and the records made from them); a Collector batch of 8192
    spans with 20 attributes each holds about 350,000 messages.

    Example::

        create_receiver_app(sink=store.write_spans, limits=DecodeLimits(max_records=10_000))
    """

    max_objects: int = 1_000_000
    max_records: int = 100_000
    max_repeated_bytes: int = 128 * 2**20

    @property
    def max_fields(self) -> int:
        return 8 * self.max_objects


DEFAULT_LIMITS = DecodeLimits()


def unstorable_span(span: SpanRecord) -> str | None:
    """Why the store could not keep ``span`` (a key over what its indexes take), or None."""
    conversation = span.conversation_id
    if conversation is not None:
        size = len(conversation.encode("utf-8", "surrogatepass"))
        if size > MAX_CONVERSATION_ID_BYTES:
            return (
                f"span {span.span_id}: conversation id of {size} bytes exceeds the store's limit"
                f" of {MAX_CONVERSATION_ID_BYTES}"
            )
    return None


class InFlight:
    """Bytes held by requests in flight, bounded: :meth:`take` says whether ``size`` more fit
    (the first request always fits, so one at the body limit is never refused alone)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.bytes = 0
        self.refused = 0
        self._lock = threading.Lock()

    def take(self, size: int) -> bool:
        with self._lock:
            if self.bytes and self.bytes + size > self.limit:
                self.refused += 1
                return False
            self.bytes += size
            return True

    def give(self, size: int) -> None:
        with self._lock:
            self.bytes -= size


@dataclass(frozen=True)
class RequestShape:
    """Where a signal's records sit in its export request: ``levels`` are the protobuf field
    names (``resource_spans``, ``scope_spans``, ``spans``), ``tree`` its message fields."""

    levels: tuple[str, str, str]
    noun: str  # "spans" | "log records", for messages
    tree: MessageTree

    @property
    def json_keys(self) -> list[tuple[str, ...]]:
        """Each level's keys in OTLP/JSON: lowerCamelCase and the proto name, if they differ."""
        return [tuple(dict.fromkeys((_camel(name), name))) for name in self.levels]


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


TRACES = RequestShape(
    ("resource_spans", "scope_spans", "spans"),
    "spans",
    MessageTree(ExportTraceServiceRequest.DESCRIPTOR, Span.DESCRIPTOR),
)
LOGS = RequestShape(
    ("resource_logs", "scope_logs", "log_records"),
    "log records",
    MessageTree(ExportLogsServiceRequest.DESCRIPTOR, LogRecord.DESCRIPTOR),
)
_SHAPES = {ExportTraceServiceRequest: TRACES, ExportLogsServiceRequest: LOGS}


def _over_records(shape: RequestShape, limits: DecodeLimits) -> str:
    return (
        f"request holds more than {limits.max_records} {shape.noun}, the limit per request:"
        " send smaller batches"
    )


def _over_objects(limits: DecodeLimits, what: str) -> str:
    return (
        f"request holds more than {limits.max_objects} {what}, the limit per request:"
        " send smaller batches"
    )


def _kept_bytes(data: bytes, keep: Iterable[int], stop: int) -> int:
    """How many bytes of ``data`` are among ``keep``, counted a chunk at a time (stopping once
    past ``stop``)."""
    kept = set(keep)
    delete = bytes(b for b in range(256) if b not in kept)
    total = 0
    for start in range(0, len(data), _CHUNK):
        total += len(data[start : start + _CHUNK].translate(None, delete))
        if total > stop:
            break
    return total


# a JSON string, escapes included: what the exact count leaves out
_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
# every JSON value but the document itself follows one of these (a member's colon, an
# element's comma, an array's opening bracket): one more than their count bounds the values
_BEFORE_VALUE = b"[,:"


@dataclass(frozen=True)
class Bound:
    """``limits`` applied to requests of one ``shape``; each check answers None or why the
    request is refused."""

    shape: RequestShape
    limits: DecodeLimits

    def protobuf(self, body: bytes) -> str | None:
        """A binary request, before it is parsed; :class:`ValueError` if the walk finds the
        bytes malformed. Every message takes two bytes at least: a small body is not read."""
        shape, limits = self.shape, self.limits
        if len(body) // 2 <= min(limits.max_records, limits.max_objects):
            return None
        keys = _kept_bytes(body, shape.tree.message_keys, limits.max_objects)
        deep = keys > limits.max_objects
        if not deep:
            records = sum(body.count(bytes([key])) for key in shape.tree.record_keys)
            if records <= limits.max_records:
                return None
        messages, records, fields = count_messages(
            body,
            shape.tree,
            max_messages=limits.max_objects,
            max_records=limits.max_records,
            max_fields=limits.max_fields,
            into_records=deep,
        )
        if records > limits.max_records:
            return _over_records(shape, limits)
        if messages > limits.max_objects:
            return _over_objects(limits, "protobuf messages (attributes, values, events...)")
        if fields > limits.max_fields:
            return (
                f"request holds more than {limits.max_fields} protobuf fields, the limit per"
                " request: send smaller batches"
            )
        return None

    def json_text(self, body: bytes) -> str | None:
        """An OTLP/JSON body, before it is loaded: its values. The cheap count includes
        brackets and separators inside strings; only when it is over are the strings taken
        out and the rest counted again."""
        stop = self.limits.max_objects
        if (len(body) + 1) // 2 <= stop or _kept_bytes(body, _BEFORE_VALUE, stop) + 1 <= stop:
            return None
        if _kept_bytes(_JSON_STRING.sub(b'""', body), _BEFORE_VALUE, stop) + 1 <= stop:
            return None
        return _over_objects(self.limits, "JSON values")

    def json_records(self, data: Any) -> str | None:
        """A loaded OTLP/JSON document, before protobuf messages are made from it: its
        records. Values of the wrong type are left for the parser to refuse."""
        outer, middle, inner = self.shape.json_keys
        count = 0
        for resource in _items(data, outer):
            for scope in _items(resource, middle):
                count += sum(len(v) for v in _values(scope, inner) if isinstance(v, list))
        return _over_records(self.shape, self.limits) if count > self.limits.max_records else None

    def parsed(self, request: Message) -> str | None:
        """A parsed request, before any record is made: its records, and the resource and
        scope name each record is stored with (one resource of 1 MB on 100,000 spans would be
        100 GB in the store). Reads sizes only (``ByteSize``, ``len``)."""
        shape, limits = self.shape, self.limits
        outer, middle, inner = shape.levels
        records = repeated = 0
        for resource_group in getattr(request, outer):
            resource = resource_group.resource.ByteSize()
            for scope_group in getattr(resource_group, middle):
                count = len(getattr(scope_group, inner))
                records += count
                repeated += count * (resource + len(scope_group.scope.name))
        if records > limits.max_records:
            return _over_records(shape, limits)
        if repeated > limits.max_repeated_bytes:
            return (
                f"the resources and scope names of the request's {shape.noun}, stored with each"
                f" of them, come to {repeated} bytes; the limit per request is"
                f" {limits.max_repeated_bytes}: send smaller batches"
            )
        return None


def bound_for(request: Message, limits: DecodeLimits | None) -> Bound | None:
    """The checks for an (empty) export request message under ``limits``; None without limits
    or for a message that is not a trace or logs export request."""
    shape = _SHAPES.get(type(request))
    return Bound(shape, limits) if shape is not None and limits is not None else None


def _values(node: Any, keys: tuple[str, ...]) -> list[Any]:
    return [node[key] for key in keys if key in node] if isinstance(node, dict) else []


def _items(node: Any, keys: tuple[str, ...]) -> list[Any]:
    return [item for value in _values(node, keys) if isinstance(value, list) for item in value]
