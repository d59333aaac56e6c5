"""Frames: a 4-byte big-endian length, then that many bytes of msgpack body."""

from __future__ import annotations

import struct
from typing import Optional, Protocol

__all__ = ["HEADER_SIZE", "MAX_BODY", "Readable", "frame", "body_length", "read_frame"]

HEADER_SIZE = 4
# The length field is 32 bits; the sidecar's own limit (hello's maxFrameBytes)
# is lower, 16 MiB by default.
MAX_BODY = 0xFFFFFFFF

_LENGTH = struct.Struct(">I")


def frame(body: bytes) -> bytes:
    """The frame carrying body."""
    if not 1 <= len(body) <= MAX_BODY:
        raise ValueError(f"a frame body is 1 to {MAX_BODY} bytes, not {len(body)}")
    return _LENGTH.pack(len(body)) + body


def body_length(header: bytes) -> int:
    """The body length announced by a 4-byte header."""
    return int(_LENGTH.unpack(header)[0])


class Readable(Protocol):
    def read(self, size: int, /) -> bytes: ...


def read_frame(stream: Readable) -> Optional[bytes]:
    """Read one frame's body; None at a clean end of stream.

    An end in the middle of a frame raises EOFError: the bytes after it
    could not be split into frames any more.
    """
    header = stream.read(HEADER_SIZE)
    if not header:
        return None
    if len(header) < HEADER_SIZE:
        raise EOFError("connection ended inside a frame header")
    size = body_length(header)
    body = stream.read(size)
    if len(body) < size:
        raise EOFError("connection ended inside a frame body")
    return body
