"""Deterministic transaction ids: the same parts always give the same id.

A push retried with the same ``transactionId`` is stored once (inside the
queue's deduplication window), so ids derived from what the message *is*
(an order number, the id of the message it was made from) make retries and
redeliveries harmless.

The Go (``queenside.TransactionID``) and Node (``transactionId``) clients
compute the same ids from the same parts: the shared cases of
clients/testdata/cases.json pin them.
"""

from __future__ import annotations

import hashlib
from typing import Union

__all__ = ["transaction_id"]

Part = Union[str, int, bytes, bytearray]


def transaction_id(*parts: Part) -> str:
    """A stable id for the given parts: the first 32 hex digits of a SHA-256.

    Each part is taken as bytes (a str as UTF-8, an int in decimal ASCII,
    bytes as they are) and prefixed with its length as 4 big-endian bytes
    before hashing, so that ``("ab", "c")`` and ``("a", "bc")`` differ
    while ``("1",)`` and ``(1,)`` are the same. Anything else (no part at
    all, a bool, a float, None, any other type) raises ``TypeError``
    naming the part's position and type.
    """
    if not parts:
        raise TypeError("transaction_id needs at least one part (a str, an int or bytes)")
    digest = hashlib.sha256()
    for position, part in enumerate(parts):
        data = _as_bytes(position, part)
        digest.update(len(data).to_bytes(4, "big"))
        digest.update(data)
    return digest.hexdigest()[:32]


def _as_bytes(position: int, part: object) -> bytes:
    if isinstance(part, (bytes, bytearray)):
        return bytes(part)
    # A bool is an int to Python, but no other client could tell what id
    # True should give.
    if isinstance(part, int) and not isinstance(part, bool):
        return str(part).encode("ascii")
    if isinstance(part, str):
        return part.encode("utf-8")
    kind = "None" if part is None else type(part).__name__
    raise TypeError(f"transaction_id part {position}: a str, an int or bytes, not {kind}")
