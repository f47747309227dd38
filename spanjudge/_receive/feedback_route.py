"""``POST /v1/feedback``: a person's label in as JSON, the stored label's id out.

Served by the receiver (:func:`~spanjudge._receive.receiver.create_receiver_app` with
``feedback_sink``) under the same bearer token and error answers as ``/v1/traces``: 401 without
the token, 413 over :data:`MAX_FEEDBACK_BYTES` plain or inflated (or the receiver's limits
when lower: a label is a few hundred bytes), 415 for a body that is not
``application/json`` (gzip allowed), 503 with ``Retry-After`` when the store fails; the sink's
``ValueError`` is the client's mistake: 400, or its ``status`` attribute (404 for an unknown
target). Errors come as ``{"code": ..., "message": ...}`` (``google.rpc.Status`` in JSON).
The body's schema is in ``docs/feedback.md``.

Example::

    app = create_receiver_app(sink=store.write_spans, feedback_sink=feedback_http_sink(store))
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from spanjudge._receive.decode import JSON
from spanjudge._receive.http import (
    Rejected,
    gunzip_limited,
    media_type,
    read_limited,
    rejection,
    store_failed,
)

logger = logging.getLogger("spanjudge.receiver")

FeedbackSink = Callable[[bytes], dict[str, Any]]

# A label with a long note is a few KB. Under the receiver's 64 MiB inflated, a body of
# ``[[],[],...]`` made 22 million lists (about 1.2 GB) before the sink could refuse it; 1 MiB
# of it loads as 26 MB at most (measured: lists or objects; numbers 12 MB, strings 4 MB), and
# still takes JSON nested 100,000 deep to the sink's 400 "nested too deeply".
MAX_FEEDBACK_BYTES = 2**20


def feedback_endpoint(
    sink: FeedbackSink,
    check_auth: Callable[[Request], None],
    answer: Callable[[int, str, str], None],
    limits: tuple[int, int],
) -> Callable[[Request], Awaitable[Response]]:
    """The request handler; ``check_auth``, ``answer`` (telemetry) and ``limits`` (body bytes,
    decompressed bytes) are the receiver's."""
    max_body_bytes = min(limits[0], MAX_FEEDBACK_BYTES)
    max_decompressed_bytes = min(limits[1], MAX_FEEDBACK_BYTES)

    async def feedback(request: Request) -> Response:
        media = media_type(request.headers.get("content-type"))
        try:
            check_auth(request)
            if media != JSON:
                raise Rejected(415, f"unsupported Content-Type {media!r}; use {JSON}")
            encoding = request.headers.get("content-encoding", "identity").strip().lower()
            if encoding not in ("identity", "gzip", ""):
                raise Rejected(415, f"unsupported Content-Encoding {encoding!r}")
            body = await read_limited(request, max_body_bytes)
            if encoding == "gzip":
                body = gunzip_limited(body, max_decompressed_bytes)
            try:
                stored = await run_in_threadpool(sink, body)
            except ValueError as exc:
                raise Rejected(getattr(exc, "status", 400), str(exc)) from None
            except Exception as exc:
                logger.warning("feedback sink failed", exc_info=True)
                raise store_failed("feedback", exc) from None
        except Rejected as reject:
            answer(reject.status, media, "json")
            return rejection(reject, JSON)
        answer(200, media, "json")
        return JSONResponse(stored)

    return feedback
