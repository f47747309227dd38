"""What the OTLP routes share about HTTP: reading a bounded body, gunzip within a limit, and
answering with an OTLP status body (protobuf or JSON, with its google.rpc code).

The receiver (``/v1/traces``, ``/v1/logs``) and the feedback route (``/v1/feedback``) both use
these, so they live apart from either route.
"""

from __future__ import annotations

import logging
import math
import zlib
from collections.abc import AsyncIterator

from google.rpc import status_pb2
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response

from spanjudge._receive.decode import PROTOBUF
from spanjudge._receive.serving import BODY_TIMED_OUT
from spanjudge.errors import SpanjudgeError

__all__ = [
    "DEFAULT_RETRY_AFTER",
    "Backpressure",
    "Rejected",
    "gunzip_limited",
    "media_type",
    "read_limited",
    "rejection",
    "retry_after_header",
    "status_body",
    "store_failed",
]

logger = logging.getLogger("spanjudge.receiver")

# The google.rpc.Code of each HTTP status the Status body goes with: clients read the code, and
# UNKNOWN (2), the answer for any status not listed, tells them nothing.
_GRPC_CODE = {
    400: 3,  # INVALID_ARGUMENT
    401: 16,  # UNAUTHENTICATED
    403: 7,  # PERMISSION_DENIED
    404: 5,  # NOT_FOUND
    405: 12,  # UNIMPLEMENTED
    408: 4,  # DEADLINE_EXCEEDED
    413: 8,  # RESOURCE_EXHAUSTED
    415: 3,  # INVALID_ARGUMENT
    429: 8,  # RESOURCE_EXHAUSTED
    500: 13,  # INTERNAL
    501: 12,  # UNIMPLEMENTED
    503: 14,  # UNAVAILABLE
    504: 4,  # DEADLINE_EXCEEDED
}
DEFAULT_RETRY_AFTER = 1.0


class Backpressure(SpanjudgeError):
    """Raise from the sink when the store cannot take more now: the client gets 503 with
    ``Retry-After: retry_after`` and sends the batch again later."""

    def __init__(self, retry_after: float = DEFAULT_RETRY_AFTER, message: str = "") -> None:
        super().__init__(message or "store is not keeping up")
        self.retry_after = retry_after


class Rejected(SpanjudgeError):
    """A request refused with an HTTP status and a message (raised by :func:`gunzip_limited`)."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers or {}


def media_type(header: str | None) -> str:
    return (header or "").split(";", 1)[0].strip().lower()


def retry_after_header(seconds: float) -> str:
    return str(max(1, math.ceil(seconds)))


def status_body(status: int, message: str, media_type: str) -> Response:
    code = _GRPC_CODE.get(status, 2)
    if media_type == PROTOBUF:
        body = status_pb2.Status(code=code, message=message).SerializeToString()
        return Response(body, status_code=status, media_type=PROTOBUF)
    return JSONResponse({"code": code, "message": message}, status_code=status)


async def read_limited(request: Request, limit: int) -> bytes:
    """The raw body, refusing (413) as soon as more than ``limit`` bytes arrived; 408 when it
    did not arrive within the body deadline (:class:`~spanjudge._receive.serving.BodyDeadline`).
    A client that goes away mid-body is one INFO line and a 400 nobody reads, not a traceback."""
    declared = request.headers.get("content-length")
    if declared is not None:
        try:
            size = int(declared)
        except ValueError:
            raise Rejected(400, "invalid Content-Length") from None
        if size > limit:
            raise Rejected(413, f"body of {size} bytes exceeds the limit of {limit} bytes")
    chunks: list[bytes] = []
    total = 0
    stream: AsyncIterator[bytes] = request.stream()
    try:
        async for chunk in stream:
            total += len(chunk)
            if total > limit:
                raise Rejected(413, f"body exceeds the limit of {limit} bytes")
            chunks.append(chunk)
    except ClientDisconnect:
        seconds = request.scope.get(BODY_TIMED_OUT)
        if seconds is not None:
            raise Rejected(
                408,
                f"request body not received within {seconds:g} s",
                {"Connection": "close"},
            ) from None
        client = request.client.host if request.client else "?"
        logger.info(
            "client %s disconnected after %d of %s body bytes of %s",
            client,
            total,
            declared or "?",
            request.url.path,
        )
        raise Rejected(400, "client disconnected before the body was complete") from None
    return b"".join(chunks)


def gunzip_limited(data: bytes, limit: int) -> bytes:
    """Decompress gzip (one or more members) without ever holding more than ``limit`` output
    bytes: a bomb fails with 413 after ``limit`` bytes, not after inflating it all."""
    out: list[bytes] = []
    total = 0
    pending = data
    while True:
        inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
        try:
            piece = inflater.decompress(pending, limit - total + 1)
            while True:
                total += len(piece)
                if total > limit:
                    raise Rejected(413, f"decompressed body exceeds the limit of {limit} bytes")
                out.append(piece)
                if not inflater.unconsumed_tail:
                    break
                piece = inflater.decompress(inflater.unconsumed_tail, limit - total + 1)
        except zlib.error as exc:
            raise Rejected(400, f"malformed gzip body: {exc}") from None
        if not inflater.eof:
            raise Rejected(400, "malformed gzip body: truncated stream")
        pending = inflater.unused_data
        if not pending.strip(b"\x00"):  # trailing zero padding is tolerated, like gzip(1)
            return b"".join(out)


def store_failed(what: str, exc: BaseException) -> Rejected:
    """A sink that raised: 503 with ``Retry-After``, since a failing store is transient from the
    client's view and 503 makes the SDK and the Collector retry instead of dropping the batch.
    Only the exception's type is said: its message may carry data from the request."""
    return Rejected(
        503,
        f"could not store {what}: {type(exc).__name__}",
        {"Retry-After": retry_after_header(DEFAULT_RETRY_AFTER)},
    )


def rejection(reject: Rejected, media_type: str) -> Response:
    """The status body a refused request gets, with the headers the refusal carries."""
    response = status_body(reject.status, reject.message, media_type)
    response.headers.update(reject.headers)
    return response
