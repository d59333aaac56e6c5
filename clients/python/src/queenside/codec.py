"""Canonical msgpack, as every queenside implementation writes it.

The protocol asks all clients to produce the same bytes for the same value
(PROTOCOL.md, section 3): shortest integer forms, 64-bit floats, ``str`` for
text, ``bin`` for bytes, the shortest timestamp layout and keys in the order
given. msgpack-python's Packer already follows those rules; what it cannot do
is splice bytes that are already encoded, and payloads must travel as the
exact bytes that were pushed. ``Raw`` marks such bytes, and ``packb`` writes
them verbatim.
"""

from __future__ import annotations

import datetime as _dt
from typing import Any, List, Optional

import msgpack

__all__ = [
    "Raw",
    "packb",
    "unpack_body",
    "encode_payload",
    "decode_payload",
    "to_datetime",
    "opt_datetime",
    "payload_bytes",
    "time_arg",
]


class Raw:
    """A value already encoded as msgpack; written out byte for byte."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = bytes(data)

    def decode(self) -> Any:
        return decode_payload(self.data)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Raw) and other.data == self.data

    def __hash__(self) -> int:
        return hash(self.data)

    def __repr__(self) -> str:
        return f"Raw({self.data!r})"


def _packer() -> msgpack.Packer:
    # datetime=True writes aware datetimes as timestamps (extension -1); a
    # Packer is not thread-safe, so every caller gets its own.
    return msgpack.Packer(use_bin_type=True, datetime=True)


def encode_payload(value: Any) -> bytes:
    """Encode a Python value as a message payload (``Raw`` passes through)."""
    if isinstance(value, Raw):
        return value.data
    data: bytes = _packer().pack(value)
    return data


def decode_payload(data: bytes) -> Any:
    """Decode payload bytes: str as str, bin as bytes, timestamps as UTC datetimes."""
    return msgpack.unpackb(data, raw=False, timestamp=3, strict_map_key=False)


def packb(value: Any) -> bytes:
    """Encode value canonically, writing ``Raw`` parts as they are."""
    packer = _packer()
    out: List[bytes] = []
    _pack_into(value, packer, out)
    return b"".join(out)


def _pack_into(value: Any, packer: msgpack.Packer, out: List[bytes]) -> None:
    if isinstance(value, Raw):
        out.append(value.data)
    elif isinstance(value, dict):
        out.append(packer.pack_map_header(len(value)))
        for key, item in value.items():
            out.append(packer.pack(key))
            _pack_into(item, packer, out)
    elif isinstance(value, (list, tuple)):
        out.append(packer.pack_array_header(len(value)))
        for item in value:
            _pack_into(item, packer, out)
    else:
        out.append(packer.pack(value))


# Keys whose values are free-form maps: a "payload" key inside them is data,
# not a message payload.
_OPAQUE_KEYS = frozenset({"headers", "details"})
_MAP_CODES = frozenset({0xDE, 0xDF})
_ARRAY_CODES = frozenset({0xDC, 0xDD})


def unpack_body(body: bytes) -> Any:
    """Decode a frame body, keeping every ``payload`` as the exact bytes received.

    Timestamps come back as ``msgpack.Timestamp`` (nanoseconds intact), so
    that a decoded envelope encodes again to the same bytes.
    """
    if b"\xa7payload" not in body:
        # Nothing to keep raw: let the C decoder do it in one call.
        return msgpack.unpackb(body, raw=False, strict_map_key=False)
    unpacker = msgpack.Unpacker(
        None, raw=False, strict_map_key=False, max_buffer_size=max(len(body), 1 << 20)
    )
    unpacker.feed(body)
    value = _walk(unpacker, body)
    if unpacker.tell() != len(body):
        raise ValueError("bytes left after the msgpack value")
    return value


def _walk(unpacker: msgpack.Unpacker, body: bytes) -> Any:
    code = body[unpacker.tell()]
    if 0x80 <= code <= 0x8F or code in _MAP_CODES:
        out = {}
        for _ in range(unpacker.read_map_header()):
            key = unpacker.unpack()
            if key == "payload":
                start = unpacker.tell()
                unpacker.skip()
                out[key] = Raw(body[start : unpacker.tell()])
            elif key in _OPAQUE_KEYS:
                out[key] = unpacker.unpack()
            else:
                out[key] = _walk(unpacker, body)
        return out
    if 0x90 <= code <= 0x9F or code in _ARRAY_CODES:
        return [_walk(unpacker, body) for _ in range(unpacker.read_array_header())]
    return unpacker.unpack()


_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)


def to_datetime(value: Any) -> _dt.datetime:
    """A wire time (timestamp extension) as an aware UTC datetime."""
    if isinstance(value, msgpack.Timestamp):
        # Timestamp.to_datetime goes through a float and can round up a
        # microsecond; truncate exactly instead.
        return _EPOCH + _dt.timedelta(seconds=value.seconds, microseconds=value.nanoseconds // 1000)
    if isinstance(value, _dt.datetime):
        return value
    raise TypeError(f"expected a timestamp, got {type(value).__name__}")


def opt_datetime(value: Any) -> Optional[_dt.datetime]:
    """Like to_datetime, for a time that may be absent."""
    return None if value is None else to_datetime(value)


def payload_bytes(value: Any) -> bytes:
    """A decoded ``payload`` key as the bytes that were pushed."""
    # unpack_body hands payloads over as Raw; anything else came through a
    # decoder that did not keep them, so encode it again.
    if isinstance(value, Raw):
        return value.data
    return encode_payload(value)


def time_arg(value: Any) -> Any:
    """A time argument as the protocol takes it.

    Aware datetimes become timestamps; naive ones are refused, since the
    sidecar could only guess their zone. Integers (epoch milliseconds) and
    RFC 3339 strings pass as they are.
    """
    if isinstance(value, _dt.datetime):
        if value.tzinfo is None:
            raise ValueError("a naive datetime has no zone: give it a tzinfo (e.g. timezone.utc)")
        return msgpack.Timestamp.from_datetime(value)
    if isinstance(value, (int, str, msgpack.Timestamp)) and not isinstance(value, bool):
        return value
    raise TypeError(f"a time is a datetime, epoch milliseconds or an RFC 3339 string, not {type(value).__name__}")
