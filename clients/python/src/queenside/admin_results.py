"""What the sidecar answers to hello, queues, stats, groups, seek, dlq, dlqReplay and health."""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field
from typing import Any, List, Mapping, Optional

from .codec import decode_payload, opt_datetime, payload_bytes, to_datetime
from .errors import QueensideError, error_from_wire
from .items import QueueOptions

__all__ = [
    "HelloResult",
    "QueueInfo",
    "GroupStats",
    "PartitionStats",
    "StatsResult",
    "GroupInfo",
    "CursorPosition",
    "DLQEntry",
    "DLQPage",
    "DLQReplayResult",
    "DatabaseHealth",
    "SpoolHealth",
    "HealthResult",
]


@dataclass
class HelloResult:
    protocol: int
    server: str
    version: str
    sidecar_id: str
    max_frame_bytes: int

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> "HelloResult":
        return cls(
            protocol=d.get("protocol", 0),
            server=d.get("server", ""),
            version=d.get("version", ""),
            sidecar_id=d.get("sidecarId", ""),
            max_frame_bytes=d.get("maxFrameBytes", 0),
        )


@dataclass
class QueueInfo:
    queue: str
    partitions: int
    options: QueueOptions

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> "QueueInfo":
        return cls(
            queue=d.get("queue", ""),
            partitions=d.get("partitions", 0),
            options=QueueOptions.from_wire(d.get("options") or {}),
        )


@dataclass
class GroupStats:
    """A group in one partition; ``group`` is ``""`` for queue mode."""

    group: str
    cursor: int
    lag: int
    leased: bool

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> "GroupStats":
        return cls(
            group=d.get("group", ""),
            cursor=d.get("cursor", 0),
            lag=d.get("lag", 0),
            leased=bool(d.get("leased", False)),
        )


@dataclass
class PartitionStats:
    partition: str
    head_offset: int
    messages: int
    groups: List[GroupStats]

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> "PartitionStats":
        return cls(
            partition=d.get("partition", ""),
            head_offset=d.get("headOffset", 0),
            messages=d.get("messages", 0),
            groups=[GroupStats.from_wire(g) for g in d.get("groups") or []],
        )


@dataclass
class StatsResult:
    queue: str
    partitions: List[PartitionStats]

    def partition(self, name: str) -> Optional[PartitionStats]:
        """The stats of one partition, or None."""
        return next((p for p in self.partitions if p.partition == name), None)

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> "StatsResult":
        return cls(
            queue=d.get("queue", ""),
            partitions=[PartitionStats.from_wire(p) for p in d.get("partitions") or []],
        )


@dataclass
class GroupInfo:
    """A group of a queue: messages its cursors have not passed, and its live leases."""

    queue: str
    group: str
    lag: int
    leased_partitions: int
    oldest_unacked_at: Optional[_dt.datetime] = None

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> "GroupInfo":
        return cls(
            queue=d.get("queue", ""),
            group=d.get("group", ""),
            lag=d.get("lag", 0),
            leased_partitions=d.get("leasedPartitions", 0),
            oldest_unacked_at=opt_datetime(d.get("oldestUnackedAt")),
        )


@dataclass
class CursorPosition:
    partition: str
    cursor: int

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> "CursorPosition":
        return cls(partition=d.get("partition", ""), cursor=d.get("cursor", 0))


_UNDECODED: Any = object()


@dataclass
class DLQEntry:
    """A dead-lettered message, copied with its last failure reason."""

    id: int
    queue: str
    partition: str
    group: str
    offset: int
    message_id: str
    transaction_id: str
    payload_raw: bytes
    error: str
    failures: int
    committed_at: _dt.datetime
    dead_at: _dt.datetime
    replayed_at: Optional[_dt.datetime] = None
    replayed_message_id: Optional[str] = None
    replayed_transaction_id: Optional[str] = None
    replayed_offset: Optional[int] = None
    #: The PostgreSQL role that pushed the message (see Message.producer).
    producer: Optional[str] = None
    _payload: Any = field(default=_UNDECODED, init=False, repr=False, compare=False)

    @property
    def payload(self) -> Any:
        if self._payload is _UNDECODED:
            self._payload = decode_payload(self.payload_raw)
        return self._payload

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> "DLQEntry":
        return cls(
            id=d.get("id", 0),
            queue=d.get("queue", ""),
            partition=d.get("partition", ""),
            group=d.get("group", ""),
            offset=d.get("offset", 0),
            message_id=d.get("messageId", ""),
            transaction_id=d.get("transactionId", ""),
            payload_raw=payload_bytes(d.get("payload")),
            error=d.get("error", ""),
            failures=d.get("failures", 0),
            committed_at=to_datetime(d["committedAt"]),
            dead_at=to_datetime(d["deadAt"]),
            replayed_at=opt_datetime(d.get("replayedAt")),
            replayed_message_id=d.get("replayedMessageId"),
            replayed_transaction_id=d.get("replayedTransactionId"),
            replayed_offset=d.get("replayedOffset"),
            producer=d.get("producer"),
        )


@dataclass
class DLQPage:
    """One page of dead letters; pass ``next_after_id`` as ``after_id`` for the next."""

    entries: List[DLQEntry]
    next_after_id: Optional[int] = None
    # Asked with count (revision 1.2): how many entries the filter matches,
    # and how many of them were replayed already.
    count: Optional[int] = None
    replayed_count: Optional[int] = None

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> "DLQPage":
        return cls(
            entries=[DLQEntry.from_wire(e) for e in d.get("entries") or []],
            next_after_id=d.get("nextAfterId"),
            count=d.get("count"),
            replayed_count=d.get("replayedCount"),
        )


@dataclass
class DLQReplayResult:
    """One replayed entry; ``status`` and ``error`` mean what they mean in push."""

    id: int
    status: str
    message_id: Optional[str] = None
    transaction_id: Optional[str] = None
    offset: Optional[int] = None
    committed_at: Optional[_dt.datetime] = None
    error: Optional[QueensideError] = None

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> "DLQReplayResult":
        err = d.get("error")
        return cls(
            id=d.get("id", 0),
            status=d.get("status", ""),
            message_id=d.get("messageId"),
            transaction_id=d.get("transactionId"),
            offset=d.get("offset"),
            committed_at=opt_datetime(d.get("committedAt")),
            error=error_from_wire(err) if err is not None else None,
        )


@dataclass
class DatabaseHealth:
    ok: bool
    latency_ms: Optional[float] = None
    error: Optional[str] = None

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> "DatabaseHealth":
        return cls(ok=bool(d.get("ok", False)), latency_ms=d.get("latencyMs"), error=d.get("error"))


@dataclass
class SpoolHealth:
    records: int
    bytes: int
    replaying: bool
    oldest_at: Optional[_dt.datetime] = None
    warnings: List[str] = field(default_factory=list)

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> "SpoolHealth":
        return cls(
            records=d.get("records", 0),
            bytes=d.get("bytes", 0),
            replaying=bool(d.get("replaying", False)),
            oldest_at=opt_datetime(d.get("oldestAt")),
            warnings=list(d.get("warnings") or []),
        )


@dataclass
class HealthResult:
    """``status`` is ``"ok"``, ``"unavailable"`` or ``"draining"``."""

    status: str
    database: DatabaseHealth
    spool: SpoolHealth
    version: str
    uptime_seconds: float

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> "HealthResult":
        return cls(
            status=d.get("status", ""),
            database=DatabaseHealth.from_wire(d.get("database") or {}),
            spool=SpoolHealth.from_wire(d.get("spool") or {}),
            version=d.get("version", ""),
            uptime_seconds=float(d.get("uptimeSeconds", 0.0)),
        )
