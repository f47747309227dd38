"""``POST /v1/feedback``: a person's label in as JSON, the stored label's id out.

Served by the receiver (:func:`~spanjudge.exporters.otlp.receiver.create_receiver_app` with
``feedback_sink``) under the same bearer token, body limits and error answers as
``/v1/traces``: 401 without the token, 413 over the size limits, 415 for a body that is not
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

from spanjudge.exporters.otlp.decode import JSON
from spanjudge.exporters.otlp.http import (
    Rejected,
    gunzip_limited,
    media_type,
    read_limited,
    rejection,
    store_failed,
)

logger = logging.getLogger("spanjudge.receiver")

FeedbackSink = Callable[[bytes], dict[str, Any]]


def feedback_endpoint(
    sink: FeedbackSink,
    check_auth: Callable[[Request], None],
    answer: Callable[[int, str, str], None],
    limits: tuple[int, int],
) -> Callable[[Request], Awaitable[Response]]:
    """The request handler; ``check_auth``, ``answer`` (telemetry) and ``limits`` (body bytes,
    decompressed bytes) are the receiver's."""
    max_body_bytes, max_decompressed_bytes = limits

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
