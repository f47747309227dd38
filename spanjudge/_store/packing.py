"""How the outbox keeps span bytes: compressed with Zstandard, read back whatever wrote them.

A write compresses its spans' bytes once (:func:`pack`) on the ingest thread, and the forwarder
opens them once (:func:`unpack`). Zstandard at level -1 takes a sixth of the CPU of zlib at
level 1 for slightly fewer bytes (figures in ``benchmarks/README.md``, issue 16). Payloads
written by earlier versions (zlib) are told by their first bytes and still open.

Example::

    payload = pack(body)
    assert unpack(payload) == body
"""

from __future__ import annotations

import threading
import zlib

import zstandard

from spanjudge.errors import ConfigError

# Zstandard's frame magic number (RFC 8878, 3.1.1), little-endian on the wire. No zlib stream
# starts with it: zlib's first byte is 0x?8 (deflate), this one is 0x28 with a second byte that
# fails zlib's header check.
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
# Zstandard's fast levels are negative. On the demo agent's spans (722 bytes each) level -1
# packs 65 spans into 3,780 bytes in 0.42 us a span; zlib level 1 needed 4,185 bytes and 2.5 us.
LEVEL = -1

_local = threading.local()  # a compression context is not safe to share between threads


def _contexts() -> tuple[zstandard.ZstdCompressor, zstandard.ZstdDecompressor]:
    pair = getattr(_local, "pair", None)
    if pair is None:
        # the frame records the content size, so one call reads it back without a stream
        pair = _local.pair = (
            zstandard.ZstdCompressor(level=LEVEL, write_content_size=True),
            zstandard.ZstdDecompressor(),
        )
    return pair


def pack(body: bytes) -> bytes:
    """``body`` compressed as one Zstandard frame."""
    return _contexts()[0].compress(body)


def unpack(payload: bytes) -> bytes:
    """The bytes :func:`pack` (or an earlier version's zlib) compressed into ``payload``.
    Raises ``ValueError`` for bytes that are neither."""
    if payload[:4] == ZSTD_MAGIC:
        try:
            return _contexts()[1].decompress(payload)
        except zstandard.ZstdError as exc:
            raise ConfigError(f"a damaged outbox payload: {exc}") from exc
    try:
        return zlib.decompress(payload)
    except zlib.error as exc:
        raise ConfigError(f"an outbox payload neither Zstandard nor zlib: {exc}") from exc
