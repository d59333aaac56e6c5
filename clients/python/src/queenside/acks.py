"""Ack items from popped messages: the helpers the three clients share
(clients/README.md, "Side by side").

``ack`` and ``transaction`` take popped messages as they are, as completed
ones (protocol revision 1.2): a message carries both its offset and its
transaction id, and an item naming both is refused, so it is sent as
``{leaseId, offset, status: "completed"}``.
"""

from __future__ import annotations

from typing import Iterable, List, Union

from .items import AckItem
from .results import Message

__all__ = ["completed", "failed", "AckLike", "ack_items"]

# What ack and transaction take: ack items, or messages as pop returned them.
AckLike = Union[AckItem, Message]


def completed(message: Message) -> AckItem:
    """``message.completed()``: the ack item reporting it processed."""
    return message.completed()


def failed(message: Message, reason: Union[str, BaseException, None] = "") -> AckItem:
    """``message.failed(reason)``: the ack item reporting it failed (delivered again, its retry budget charged)."""
    return message.failed(reason)


def ack_items(items: Iterable[AckLike]) -> List[AckItem]:
    """The items to send: each message becomes its completed item."""
    out: List[AckItem] = []
    for item in items:
        if isinstance(item, Message):
            out.append(item.completed())
        elif isinstance(item, AckItem):
            out.append(item)
        else:
            raise TypeError(f"ack takes AckItem or popped Message objects, not {type(item).__name__}")
    return out
