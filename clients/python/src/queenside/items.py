"""What a client sends: push items, ack items and queue options.

Each ``to_wire`` writes its keys in the order of the protocol's tables and
leaves unset options out rather than sending nil, as the encoding rules ask.
``QueueOptions`` is generated from the sidecar's own table
(``_queue_options.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Mapping, Optional, Union

from ._queue_options import QueueOptions
from .codec import Raw, encode_payload
from .errors import InvalidArgumentError

__all__ = ["PushItem", "PushLike", "AckItem", "QueueOptions", "COMPLETED", "FAILED", "push_items"]

COMPLETED = "completed"
FAILED = "failed"


class _Missing:
    """What a ``PushItem`` holds where its queue or payload was not given."""

    def __repr__(self) -> str:
        return "MISSING"


_MISSING: Any = _Missing()


@dataclass
class PushItem:
    """One message to push.

    ``payload`` is any value msgpack can encode (wrap bytes that are already
    msgpack in ``Raw`` to send them as they are); ``None`` is a payload
    too (msgpack nil), but it must be given: an item without a payload, or
    without a queue, is refused before anything is sent. Give
    ``transaction_id`` whenever the push may be retried: only then is a
    retry a ``duplicate``.
    """

    queue: str = _MISSING
    payload: Any = _MISSING
    partition: Optional[str] = None
    transaction_id: Optional[str] = None
    trace_id: Optional[str] = None
    headers: Optional[Mapping[str, str]] = None

    def to_wire(self) -> Dict[str, Any]:
        item: Dict[str, Any] = {"queue": self.queue}
        if self.partition is not None:
            item["partition"] = self.partition
        item["payload"] = Raw(encode_payload(self.payload))
        if self.transaction_id is not None:
            item["transactionId"] = self.transaction_id
        if self.trace_id is not None:
            item["traceId"] = self.trace_id
        if self.headers:
            item["headers"] = dict(self.headers)
        return item


# What push and transaction take as an item: a PushItem, or a dict with the
# protocol's keys (transactionId, traceId) or the Python names
# (transaction_id, trace_id).
PushLike = Union[PushItem, Mapping[str, Any]]

# A dict item's keys, each with the PushItem field it sets.
_DICT_KEYS: Dict[str, str] = {
    "queue": "queue",
    "partition": "partition",
    "payload": "payload",
    "transactionId": "transaction_id",
    "transaction_id": "transaction_id",
    "traceId": "trace_id",
    "trace_id": "trace_id",
    "headers": "headers",
}
_KNOWN_KEYS = "queue, payload, partition, transactionId (or transaction_id), traceId (or trace_id), headers"


def push_items(items: Union[PushLike, Iterable[PushLike]]) -> List[PushItem]:
    """The items of a push: one item (a ``PushItem`` or a dict) or an iterable of them.

    Every item is checked here, before anything is sent: an item without a
    queue or without a payload is refused as the sidecar would refuse it
    (``InvalidArgumentError``, "push item N: payload is required"); a dict
    with a key push does not know, or a field under both its names, and an
    item of another type are mistakes in the call (``TypeError``, naming
    every unknown key and listing the known ones, as for an unknown keyword).
    """
    if isinstance(items, (PushItem, Mapping)):
        items = [items]
    elif isinstance(items, (str, bytes, bytearray)) or not isinstance(items, Iterable):
        raise TypeError(f"push takes a PushItem, a dict, or a list of them, not {type(items).__name__}")
    out: List[PushItem] = []
    for index, item in enumerate(items):
        if isinstance(item, Mapping):
            item = _from_dict(index, item)
        elif not isinstance(item, PushItem):
            raise TypeError(f"push item {index}: a PushItem or a dict, not {type(item).__name__}")
        if item.queue is _MISSING or item.queue is None:
            raise InvalidArgumentError(f"push item {index}: queue is required")
        if item.payload is _MISSING:
            raise InvalidArgumentError(f"push item {index}: payload is required")
        out.append(item)
    return out


def _from_dict(index: int, d: Mapping[str, Any]) -> PushItem:
    unknown = [key for key in d if key not in _DICT_KEYS]
    if unknown:
        names = ", ".join(repr(key) for key in unknown)
        raise TypeError(f"push item {index}: unknown key{'s' if len(unknown) > 1 else ''} {names} (known: {_KNOWN_KEYS})")
    fields: Dict[str, Any] = {}
    for key, value in d.items():
        name = _DICT_KEYS[key]
        if name in fields:
            raise TypeError(f"push item {index}: {name} is given twice (as {key!r} and under its other name)")
        fields[name] = value
    return PushItem(**fields)


@dataclass
class AckItem:
    """Completes a message of a lease, or reports it failed.

    Name the message by ``offset`` or by ``transaction_id``, not both.
    ``Message.completed()`` and ``Message.failed()`` build these, and
    ``ack`` takes a popped ``Message`` itself as a completed one.
    """

    lease_id: str
    offset: Optional[int] = None
    transaction_id: Optional[str] = None
    status: str = COMPLETED
    error: Optional[str] = None

    def to_wire(self) -> Dict[str, Any]:
        item: Dict[str, Any] = {"leaseId": self.lease_id}
        if self.offset is not None:
            item["offset"] = self.offset
        if self.transaction_id is not None:
            item["transactionId"] = self.transaction_id
        item["status"] = self.status
        if self.error is not None:
            item["error"] = self.error
        return item
