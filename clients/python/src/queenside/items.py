"""What a client sends: push items, ack items and queue options.

Each ``to_wire`` writes its keys in the order of the protocol's tables and
leaves unset options out rather than sending nil, as the encoding rules ask.
``QueueOptions`` is generated from the sidecar's own table
(``_queue_options.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional

from ._queue_options import QueueOptions
from .codec import Raw, encode_payload

__all__ = ["PushItem", "AckItem", "QueueOptions", "COMPLETED", "FAILED"]

COMPLETED = "completed"
FAILED = "failed"


@dataclass
class PushItem:
    """One message to push.

    ``payload`` is any value msgpack can encode (wrap bytes that are already
    msgpack in ``Raw`` to send them as they are). Give ``transaction_id``
    whenever the push may be retried: only then is a retry a ``duplicate``.
    """

    queue: str
    payload: Any = None
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
