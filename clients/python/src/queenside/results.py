"""What the sidecar answers to push, pop, ack, renew, release and transaction.

Result keys this client does not know are ignored, so a newer sidecar that
adds keys does not break it (PROTOCOL.md, section 8).
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Union

from ._codes import ACK_ITEM_CODES  # each per-item code in words, generated from protocol/
from .codec import decode_payload, opt_datetime, payload_bytes, to_datetime
from .errors import QueensideError, error_from_wire
from .items import COMPLETED, FAILED, AckItem

__all__ = [
    "QUEUED",
    "DUPLICATE",
    "BUFFERED",
    "ALREADY_ACKED",
    "LEASE_EXPIRED",
    "NOT_IN_LEASE",
    "UNRESOLVABLE",
    "REWOUND",
    "UNAVAILABLE",
    "ACK_ITEM_CODES",
    "PushResult",
    "Message",
    "Lease",
    "PopResult",
    "AckItemResult",
    "AckLeaseState",
    "AckResult",
    "LeaseResult",
    "TransactionResult",
]

QUEUED = "queued"
DUPLICATE = "duplicate"
BUFFERED = "buffered"

# Why an ack item did not succeed (AckItemResult.code; PROTOCOL.md, ack).
ALREADY_ACKED = "already_acked"
LEASE_EXPIRED = "lease_expired"
NOT_IN_LEASE = "not_in_lease"
UNRESOLVABLE = "unresolvable"
REWOUND = "rewound"
UNAVAILABLE = "unavailable"


_UNDECODED: Any = object()


def _reason_text(reason: Union[str, BaseException, None]) -> Optional[str]:
    if isinstance(reason, BaseException):
        reason = str(reason) or type(reason).__name__
    if not reason:
        return None
    # The sidecar refuses an error text that is not UTF-8 (a lone
    # surrogate) or holds a NUL, and the whole ack with it: a reason must
    # never cost the ack.
    return reason.encode("utf-8", "replace").decode("utf-8").replace("\x00", "\ufffd")


@dataclass
class PushResult:
    """The outcome of one push item: ``queued``, ``duplicate``, ``buffered`` or ``failed``."""

    index: int
    status: str
    queue: str
    partition: str
    transaction_id: str
    message_id: Optional[str] = None
    offset: Optional[int] = None
    committed_at: Optional[_dt.datetime] = None
    error: Optional[QueensideError] = None

    @property
    def ok(self) -> bool:
        """True when the message is stored (or spooled, for ``buffered``)."""
        return self.status in (QUEUED, DUPLICATE, BUFFERED)

    def raise_for_status(self) -> "PushResult":
        """Raise the item's error if it failed; return self otherwise."""
        if self.error is not None:
            raise self.error
        if self.status == FAILED:
            raise QueensideError(f"push item {self.index} failed without an error object")
        return self

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> "PushResult":
        err = d.get("error")
        return cls(
            index=d.get("index", 0),
            status=d.get("status", ""),
            queue=d.get("queue", ""),
            partition=d.get("partition", ""),
            transaction_id=d.get("transactionId", ""),
            message_id=d.get("messageId"),
            offset=d.get("offset"),
            committed_at=opt_datetime(d.get("committedAt")),
            error=error_from_wire(err) if err is not None else None,
        )


@dataclass
class Message:
    """A delivered message.

    ``payload`` is the decoded value; ``payload_raw`` the exact msgpack bytes
    that were pushed. ``transaction_id`` survives redelivery unchanged: it is
    the key for idempotent handlers.
    """

    queue: str
    partition: str
    offset: int
    message_id: str
    transaction_id: str
    payload_raw: bytes
    committed_at: _dt.datetime
    trace_id: Optional[str] = None
    headers: Dict[str, str] = field(default_factory=dict)
    lease_id: Optional[str] = None
    redelivered: bool = False
    #: The PostgreSQL role that pushed the message, stamped by PostgreSQL
    #: (never by a client); None for a message stored before it was kept.
    producer: Optional[str] = None
    _payload: Any = field(default=_UNDECODED, init=False, repr=False, compare=False)

    @property
    def payload(self) -> Any:
        # Decoded on first use: a payload a producer encoded oddly then
        # fails in the handler that touches it, not in the pop that
        # delivered the whole batch.
        if self._payload is _UNDECODED:
            self._payload = decode_payload(self.payload_raw)
        return self._payload

    def completed(self) -> AckItem:
        """An ack item reporting this message processed (what ``ack`` makes of the message itself)."""
        return AckItem(lease_id=self._lease(), offset=self.offset, status=COMPLETED)

    def failed(self, reason: Union[str, BaseException, None] = "") -> AckItem:
        """An ack item reporting this message failed: it is delivered again, and its retry budget charged.

        ``reason`` (a text, or an exception for its text) is kept with the
        message if it is dead-lettered.
        """
        return AckItem(lease_id=self._lease(), offset=self.offset, status=FAILED, error=_reason_text(reason))

    def _lease(self) -> str:
        if not self.lease_id:
            raise ValueError("this message has no lease (it was popped with auto_ack): there is nothing to ack")
        return self.lease_id

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> "Message":
        return cls(
            queue=d.get("queue", ""),
            partition=d.get("partition", ""),
            offset=d.get("offset", 0),
            message_id=d.get("messageId", ""),
            transaction_id=d.get("transactionId", ""),
            payload_raw=payload_bytes(d.get("payload")),
            committed_at=to_datetime(d["committedAt"]),
            trace_id=d.get("traceId"),
            headers=dict(d.get("headers") or {}),
            lease_id=d.get("leaseId") or None,
            redelivered=bool(d.get("redelivered", False)),
            producer=d.get("producer"),
        )


@dataclass
class Lease:
    """A partition's span held by a group until ``expires_at``."""

    lease_id: str
    queue: str
    partition: str
    group: str
    from_offset: int
    to_offset: int
    expires_at: _dt.datetime
    head_attempts: int

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> "Lease":
        return cls(
            lease_id=d.get("leaseId", ""),
            queue=d.get("queue", ""),
            partition=d.get("partition", ""),
            group=d.get("group", ""),
            from_offset=d.get("fromOffset", 0),
            to_offset=d.get("toOffset", 0),
            expires_at=to_datetime(d["expiresAt"]),
            head_attempts=d.get("headAttempts", 0),
        )


@dataclass
class PopResult:
    """Messages partition by partition, ascending offsets within each, and their leases."""

    messages: List[Message]
    leases: List[Lease]

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> "PopResult":
        return cls(
            messages=[Message.from_wire(m) for m in d.get("messages") or []],
            leases=[Lease.from_wire(x) for x in d.get("leases") or []],
        )


@dataclass
class AckItemResult:
    """One ack item's outcome; ``code`` says why when ``success`` is false."""

    index: int
    success: bool
    code: Optional[str] = None
    dead_lettered: bool = False

    def __str__(self) -> str:
        """``"ack item 0: already acknowledged (already_acked)"``: the outcome, for logs and error messages."""
        if self.success:
            return f"ack item {self.index}: " + ("accepted, dead-lettered" if self.dead_lettered else "accepted")
        code = self.code or "unknown"
        return f"ack item {self.index}: {ACK_ITEM_CODES.get(code, code)} ({code})"

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> "AckItemResult":
        return cls(
            index=d.get("index", 0),
            success=bool(d.get("success", False)),
            code=d.get("code") or None,
            dead_lettered=bool(d.get("deadLettered", False)),
        )


@dataclass
class AckLeaseState:
    """Where an ack left a lease: ``cursor`` is the next offset the group will be given."""

    lease_id: str
    released: bool
    cursor: int

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> "AckLeaseState":
        return cls(lease_id=d.get("leaseId", ""), released=bool(d.get("released", False)), cursor=d.get("cursor", 0))


@dataclass
class AckResult:
    """Per-item results in item order, and one entry per lease the sidecar could trace.

    ``pop`` and ``pop_error`` are those of a call that carried the next pop
    (``ack_and_pop``, protocol revision 1.2): the pop's result, or, when the
    pop failed once the acks were applied, why (``pop`` is then empty). A
    plain ``ack`` leaves both None.
    """

    results: List[AckItemResult]
    leases: List[AckLeaseState]
    pop: Optional[PopResult] = None
    pop_error: Optional[QueensideError] = None

    @property
    def all_succeeded(self) -> bool:
        return all(r.success for r in self.results)

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> "AckResult":
        pop, pop_error = d.get("pop"), d.get("popError")
        return cls(
            results=[AckItemResult.from_wire(r) for r in d.get("results") or []],
            leases=[AckLeaseState.from_wire(x) for x in d.get("leases") or []],
            pop=PopResult.from_wire(pop) if isinstance(pop, Mapping) else None,
            pop_error=error_from_wire(pop_error) if pop_error is not None else None,
        )


@dataclass
class LeaseResult:
    """One lease's outcome in renew or release."""

    lease_id: str
    success: bool
    expires_at: Optional[_dt.datetime] = None
    code: Optional[str] = None

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> "LeaseResult":
        return cls(
            lease_id=d.get("leaseId", ""),
            success=bool(d.get("success", False)),
            expires_at=opt_datetime(d.get("expiresAt")),
            code=d.get("code") or None,
        )


@dataclass
class TransactionResult:
    """A committed transaction: its ack results and push results, in item order."""

    acks: List[AckItemResult]
    pushes: List[PushResult]

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> "TransactionResult":
        return cls(
            acks=[AckItemResult.from_wire(r) for r in d.get("acks") or []],
            pushes=[PushResult.from_wire(r) for r in d.get("pushes") or []],
        )
