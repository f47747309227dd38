"""``POST /v1/feedback``: a person's label in as JSON, the stored label's id out.

Served by the receiver (:func:`~spanjudge._receive.receiver.create_receiver_app` with
``feedback_sink``) under the same bearer token and error answers as ``/v1/traces``: 401 without
the token, 413 over :data:`MAX_FEEDBACK_BYTES` plain or inflated (or the receiver's limits
when lower: a label is a few hundred bytes), 415 for a body that is not
``application/json`` (gzip allowed), 503 with ``Retry-After`` when the store fails; the sink's
``ValueError`` is the client's mistake: 400, or its ``status`` attribute (404 for an unknown
target). Errors come as ``{"code": ..., "message": ...}`` (``google.rpc.Status`` in JSON).
With per-annotator tokens (:class:`AnnotatorTokens`, the worker's ``annotator_tokens``) the
route takes those instead of the bearer token, and the label's annotator is the token's.
The body's schema is in ``docs/feedback.md``.

Example::

    app = create_receiver_app(sink=store.write_spans, feedback_sink=feedback_http_sink(store))
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Awaitable, Callable, Mapping
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


class AnnotatorTokens:
    """One bearer token per annotator (the worker's ``annotator_tokens``): a request's token
    names who sent the label, so one token cannot speak for 50 made-up annotators. Every token
    is compared, in constant time, whichever matches.

    Example::

        tokens = AnnotatorTokens({"dana": "t-1", "li": "t-2"})
        tokens.annotator("Bearer t-2")   # "li"
    """

    def __init__(self, tokens: Mapping[str, str]) -> None:
        self._tokens = [(name, token.encode()) for name, token in tokens.items()]

    def annotator(self, authorization: str) -> str:
        """The annotator whose token ``authorization`` carries; :class:`Rejected` 401 if none."""
        scheme, _, token = authorization.partition(" ")
        given = token.strip().encode()
        found = None
        for name, expected in self._tokens:
            if hmac.compare_digest(given, expected) and found is None:
                found = name
        if found is None or scheme.lower() != "bearer":
            raise Rejected(
                401,
                "missing or invalid annotator token",
                {"WWW-Authenticate": 'Bearer realm="spanjudge-feedback"'},
            )
        return found


class AnnotatedSink:
    """A feedback sink that is told who sent the label: ``sink(body, annotator)``; with
    ``tokens``, the route authenticates by them instead of the receiver's bearer token."""

    def __init__(
        self,
        sink: Callable[[bytes, str | None], dict[str, Any]],
        tokens: AnnotatorTokens | None = None,
    ) -> None:
        self.sink = sink
        self.tokens = tokens

    def __call__(self, body: bytes, annotator: str | None = None) -> dict[str, Any]:
        return self.sink(body, annotator)


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

    tokens = sink.tokens if isinstance(sink, AnnotatedSink) else None

    async def feedback(request: Request) -> Response:
        media = media_type(request.headers.get("content-type"))
        annotator = None
        try:
            if tokens is None:
                check_auth(request)
            else:
                annotator = tokens.annotator(request.headers.get("authorization", ""))
            if media != JSON:
                raise Rejected(415, f"unsupported Content-Type {media!r}; use {JSON}")
            encoding = request.headers.get("content-encoding", "identity").strip().lower()
            if encoding not in ("identity", "gzip", ""):
                raise Rejected(415, f"unsupported Content-Encoding {encoding!r}")
            body = await read_limited(request, max_body_bytes)
            if encoding == "gzip":
                body = gunzip_limited(body, max_decompressed_bytes)
            try:
                if isinstance(sink, AnnotatedSink):
                    stored = await run_in_threadpool(sink, body, annotator)
                else:
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
