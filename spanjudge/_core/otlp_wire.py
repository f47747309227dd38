"""OTLP trace requests at the wire level: each span's protobuf bytes as received, and requests
put together again from them, so enrich mode forwards spans without decoding and re-encoding;
and :func:`count_messages`, the messages of a request counted before a parser builds them
(the receiver's limits, :mod:`~spanjudge._receive.limits`).

Protobuf concatenates: two serialized messages of one type, one after the other, parse as one
message whose repeated fields hold both lists. So a request is rebuilt by concatenating its
pieces, and attributes are added to a span by appending ``KeyValue`` fields to its bytes: the
span's own bytes are sent unchanged (links, trace state, flags, dropped counts, unknown fields).

Example::

    spans = split_request(body)          # one WireSpan per span, in the order of the body
    one = spans[0]
    scored = frame(with_attributes(unframe(one.span), {"k": 1.0}))
    body = request_body([(one.envelope, scored)])
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from spanjudge.errors import ConfigError, ConfigTypeError

__all__ = [
    "MessageTree",
    "WireSpan",
    "count_messages",
    "frame",
    "indexed_request_body",
    "request_body",
    "split_request",
    "unframe",
    "with_attributes",
]

# Field numbers: ExportTraceServiceRequest.resource_spans, ResourceSpans.scope_spans,
# ScopeSpans.spans (each 1, 2, 2, length-delimited).
_RESOURCE_SPANS = 1
_SCOPE_SPANS = 2
_SPANS = 2


class WireSpan(NamedTuple):
    """A received span: ``span``, its ``Span`` message as it arrived, framed as a field of
    ``ScopeSpans`` (:func:`unframe` gives the message); ``envelope``, its resource and scope
    (every other field of its ``ResourceSpans`` and ``ScopeSpans``), shared by the spans of one
    scope. (A named tuple: one is made per received span, three times cheaper than a frozen
    dataclass.)"""

    span: bytes
    envelope: bytes


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _skip(data: bytes, pos: int, wire: int, number: int) -> int:
    """Where the value of a field (already past its key) ends."""
    if wire == 0:
        return _varint(data, pos)[1]
    if wire == 1:
        return pos + 8
    if wire == 5:
        return pos + 4
    if wire == 2:
        size, pos = _varint(data, pos)
        return pos + size
    if wire == 3:  # a group (an unknown field from an old sender): up to its end marker
        while True:
            key, pos = _varint(data, pos)
            if key & 7 == 4:
                if key >> 3 != number:
                    raise ConfigError("mismatched protobuf group end")
                return pos
            pos = _skip(data, pos, key & 7, key >> 3)
    raise ConfigError(f"invalid protobuf wire type {wire}")


def _message(data: bytes, number: int) -> tuple[bytes, list[bytes]]:
    """Split one message: (every field but ``number``, the fields ``number`` (length-delimited)
    with their key and length, as in ``data``)."""
    rest: list[bytes] = []
    inner: list[bytes] = []
    pos, end = 0, len(data)
    wanted = number << 3 | 2  # below 0x80 for every field split here: a one-byte key
    while pos < end:
        start = pos
        if data[pos] == wanted:
            # the hot path, once per span: its length inline (varint of one or two bytes)
            size = data[pos + 1]
            if size < 0x80:
                pos += 2 + size
            elif data[pos + 2] < 0x80:
                pos += 3 + ((size & 0x7F) | data[pos + 2] << 7)
            else:
                size, pos = _varint(data, pos + 1)
                pos += size
            inner.append(data[start:pos])
            continue
        key, pos = _varint(data, pos)
        if key == wanted:  # pragma: no cover - a key of one byte is never spelled in two
            size, pos = _varint(data, pos)
            pos += size
            inner.append(data[start:pos])
        else:
            pos = _skip(data, pos, key & 7, key >> 3)
            rest.append(data[start:pos])
    return b"".join(rest), inner


def split_request(body: bytes) -> list[WireSpan]:
    """Every span of a serialized ``ExportTraceServiceRequest``, in the order a parser lists
    them (resource by resource, scope by scope), with its envelope. ``body`` must already have
    parsed as a request (the receiver decodes it first)."""
    out: list[WireSpan] = []
    _, resources = _message(body, _RESOURCE_SPANS)
    for resource in resources:
        resource_head, scopes = _message(unframe(resource), _SCOPE_SPANS)
        prefix = _encode_varint(len(resource_head)) + resource_head
        for scope in scopes:
            scope_head, spans = _message(unframe(scope), _SPANS)
            envelope = prefix + scope_head
            out.extend(WireSpan(span, envelope) for span in spans)
    return out


def _delimited(number: int, payload: bytes) -> bytes:
    return _encode_varint(number << 3 | 2) + _encode_varint(len(payload)) + payload


def frame(span: bytes) -> bytes:
    """A serialized ``Span`` as the field of ``ScopeSpans`` that holds it."""
    return _delimited(_SPANS, span)


def unframe(field: bytes) -> bytes:
    """The message inside one length-delimited field (key, length, message)."""
    _, pos = _varint(field, 0)
    _, pos = _varint(field, pos)
    return field[pos:]


def request_body(spans: Iterable[tuple[bytes, bytes]]) -> bytes:
    """A serialized ``ExportTraceServiceRequest`` of ``(envelope, framed span)`` pairs
    (:attr:`WireSpan.span`, :func:`frame`); spans sharing an envelope go in one ``ScopeSpans``,
    in the order given."""
    return _grouped_body(_groups(spans))


def indexed_request_body(spans: Sequence[tuple[bytes, bytes]]) -> tuple[bytes, list[int]]:
    """:func:`request_body` and, for each pair given, where :func:`split_request` lists its
    span in that body (spans sharing an envelope are grouped, so the order may change)."""
    groups: dict[bytes, list[int]] = {}
    for n, (envelope, _) in enumerate(spans):
        groups.setdefault(envelope, []).append(n)
    places = [0] * len(spans)
    for place, n in enumerate(n for members in groups.values() for n in members):
        places[n] = place
    body = _grouped_body({e: [spans[n][1] for n in members] for e, members in groups.items()})
    return body, places


def _groups(spans: Iterable[tuple[bytes, bytes]]) -> dict[bytes, list[bytes]]:
    groups: dict[bytes, list[bytes]] = {}
    for envelope, span in spans:
        groups.setdefault(envelope, []).append(span)
    return groups


def _grouped_body(groups: Mapping[bytes, Sequence[bytes]]) -> bytes:
    """The request of framed spans grouped by envelope: one resource and scope per group."""
    parts = []
    for envelope, members in groups.items():
        size, pos = _varint(envelope, 0)
        resource_head, scope_head = envelope[pos : pos + size], envelope[pos + size :]
        scope = scope_head + b"".join(members)
        parts.append(_delimited(_RESOURCE_SPANS, resource_head + _delimited(_SCOPE_SPANS, scope)))
    return b"".join(parts)


def _any_value(value: Any) -> AnyValue:
    if isinstance(value, bool):
        return AnyValue(bool_value=value)
    if isinstance(value, int):
        return AnyValue(int_value=value)
    if isinstance(value, float):
        return AnyValue(double_value=value)
    if isinstance(value, str):
        return AnyValue(string_value=value)
    if isinstance(value, Sequence):
        out = AnyValue()
        out.array_value.values.extend(_any_value(v) for v in value)
        return out
    raise ConfigTypeError(f"attribute value {value!r} is not an OTel attribute type")


def with_attributes(span: bytes, attributes: Mapping[str, Any]) -> bytes:
    """``span`` (a serialized ``Span``) with ``attributes`` appended after its own; a key the
    span already has is replaced (the span is then parsed and serialized once)."""
    if not attributes:
        return span
    extra = Span(attributes=[KeyValue(key=k, value=_any_value(v)) for k, v in attributes.items()])
    if not any(key.encode() in span for key in attributes):
        return span + extra.SerializeToString()
    message = Span.FromString(span)
    kept = [kv for kv in message.attributes if kv.key not in attributes]
    del message.attributes[:]
    message.attributes.extend(kept)
    message.MergeFrom(extra)
    return message.SerializeToString()


# --- counting a request's messages before a parser builds them ----------------------------------
# A parser builds every message of a body: an empty one takes 2 bytes on the wire and 45-175
# bytes in memory (upb, measured: a ResourceSpans 65, a KeyValue 55, a Span 175), so 30 MiB of
# empty ResourceSpans took 1 GB before a single span was read. These count first.

_Node = dict[int, tuple[Any, bool]]  # field number -> (child node, child is a record)


class MessageTree:
    """The message-typed fields of a request type, read once from its descriptor: what
    :func:`count_messages` descends into, and which message type is the record (``Span``,
    ``LogRecord``) counted apart.

    Example::

        tree = MessageTree(ExportTraceServiceRequest.DESCRIPTOR, Span.DESCRIPTOR)
    """

    def __init__(self, root: Descriptor, record: Descriptor) -> None:
        nodes: dict[str, _Node] = {}
        pending = [root]
        while pending:
            descriptor = pending.pop()
            node = nodes.setdefault(descriptor.full_name, {})
            for field in descriptor.fields:
                child = field.message_type
                if field.type != FieldDescriptor.TYPE_MESSAGE or child is None:
                    continue
                if child.full_name not in nodes:
                    nodes[child.full_name] = {}
                    pending.append(child)
                node[field.number] = (nodes[child.full_name], child.full_name == record.full_name)
        self.root = nodes[root.full_name]
        # the first byte of each message field's key, and of the fields holding records
        # (ScopeSpans.spans, ScopeLogs.log_records): counting them bounds what a walk would count
        fields = [
            (number, is_record)
            for node in nodes.values()
            for number, (_, is_record) in node.items()
        ]
        self.message_keys = frozenset(_first_key_byte(number) for number, _ in fields)
        self.record_keys = frozenset(_first_key_byte(n) for n, is_record in fields if is_record)


def _first_key_byte(number: int) -> int:
    key = number << 3 | 2
    return key if key < 0x80 else (key & 0x7F) | 0x80


def _bounded_varint(data: bytes, pos: int) -> tuple[int, int]:
    # at most 10 bytes, as the parser allows: a run of 0x80 bytes is not walked to its end
    value = shift = 0
    while shift < 70:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
    raise ConfigError("varint longer than 10 bytes")


def count_messages(
    data: bytes,
    tree: MessageTree,
    *,
    max_messages: int,
    max_records: int,
    max_fields: int,
    into_records: bool = True,
) -> tuple[int, int, int]:
    """``(messages, records, fields)`` in ``data``, a serialized request of ``tree``'s type,
    without building any of them. The walk stops as soon as a count passes its ``max_`` (the
    counts returned then say which), so its work is bounded too. ``into_records=False`` counts
    records without walking inside them. :class:`ValueError` if ``data`` is not a message.

    Example::

        messages, records, fields = count_messages(
            body, tree, max_messages=10**6, max_records=10**5, max_fields=8 * 10**6
        )
    """
    messages = records = fields = 0
    stack: list[tuple[int, int, _Node]] = [(0, len(data), tree.root)]
    groups: list[int] = []  # field numbers of the groups we are inside (unknown fields)
    try:
        while stack:
            pos, end, node = stack.pop()
            while pos < end:
                fields += 1
                if fields > max_fields:
                    return messages, records, fields
                key = data[pos]
                pos += 1
                if key >= 0x80:
                    key, pos = _bounded_varint(data, pos - 1)
                wire = key & 7
                if groups or wire in (3, 4):
                    pos = _group_field(data, pos, key, groups)
                elif wire == 2:
                    size = data[pos]
                    pos += 1
                    if size >= 0x80:
                        size, pos = _bounded_varint(data, pos - 1)
                    child = node.get(key >> 3)
                    if child is not None:
                        messages += 1
                        if child[1]:
                            records += 1
                            if records > max_records:
                                return messages, records, fields
                        if messages > max_messages:
                            return messages, records, fields
                        if size and (into_records or not child[1]):
                            stack.append((pos, pos + size, child[0]))
                    pos += size
                else:
                    pos = _skip_scalar(data, pos, wire)
            if pos != end or groups:
                raise ConfigError("a field runs past the end of its message")
    except IndexError:
        raise ConfigError("truncated message") from None
    return messages, records, fields


def _group_field(data: bytes, pos: int, key: int, groups: list[int]) -> int:
    """Past one field inside or around an unknown group (a group's fields are unknown too)."""
    wire = key & 7
    if wire == 3:
        groups.append(key >> 3)
        return pos
    if wire == 4:
        if not groups or groups.pop() != key >> 3:
            raise ConfigError("mismatched protobuf group end")
        return pos
    if wire == 2:
        size, pos = _bounded_varint(data, pos)
        return pos + size
    return _skip_scalar(data, pos, wire)


def _skip_scalar(data: bytes, pos: int, wire: int) -> int:
    if wire == 0:
        return _bounded_varint(data, pos)[1]
    if wire == 1:
        return pos + 8
    if wire == 5:
        return pos + 4
    if wire == 2:
        size, pos = _bounded_varint(data, pos)
        return pos + size
    raise ConfigError(f"invalid protobuf wire type {wire}")
