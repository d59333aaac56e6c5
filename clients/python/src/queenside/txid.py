"""Deterministic transaction ids: the same parts always give the same id.

A push retried with the same ``transactionId`` is stored once (inside the
queue's deduplication window), so ids derived from what the message *is*
(an order number, the id of the message it was made from) make retries and
redeliveries harmless.
"""

from __future__ import annotations

import hashlib
from typing import Union

__all__ = ["transaction_id"]

Part = Union[str, int, bytes]


def transaction_id(*parts: Part) -> str:
    """A stable id for the given parts: 32 hex digits of SHA-256.

    Each part is taken as bytes (str as UTF-8, int in decimal) and prefixed
    with its length as 4 big-endian bytes before hashing, so that
    ``("ab", "c")`` and ``("a", "bc")`` differ. Any client can compute the
    same ids from this description.
    """
    if not parts:
        raise ValueError("transaction_id needs at least one part")
    digest = hashlib.sha256()
    for part in parts:
        data = _as_bytes(part)
        digest.update(len(data).to_bytes(4, "big"))
        digest.update(data)
    return digest.hexdigest()[:32]


def _as_bytes(part: Part) -> bytes:
    if isinstance(part, bytes):
        return part
    if isinstance(part, bool):  # a bool is an int; "True" would be a Python-only spelling
        raise TypeError("a transaction id part is a str, an int or bytes, not a bool")
    if isinstance(part, int):
        return str(part).encode("ascii")
    if isinstance(part, str):
        return part.encode("utf-8")
    raise TypeError(f"a transaction id part is a str, an int or bytes, not {type(part).__name__}")
