"""Bulk actions on dead letters (revision 1.2): the filter they share, and
what dlqReplay, dlqDelete and dlqSummary answer."""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Union

from .admin_results import DLQReplayResult
from .codec import time_arg, to_datetime

__all__ = ["DLQFilter", "DLQReplayReply", "DLQDeleteReply", "DLQErrorCount"]

# A time argument: an aware datetime, epoch milliseconds or an RFC 3339 string.
TimeArg = Union[_dt.datetime, int, str]


@dataclass(frozen=True)
class DLQFilter:
    """Which dead letters of a queue: ``error_contains`` is a case-sensitive
    substring of the error; ``dead_from`` is inclusive, ``dead_to`` exclusive."""

    queue: str
    group: Optional[str] = None
    partition: Optional[str] = None
    error_contains: Optional[str] = None
    dead_from: Optional[TimeArg] = None
    dead_to: Optional[TimeArg] = None

    def to_wire(self) -> Dict[str, Any]:
        args: Dict[str, Any] = {"queue": self.queue}
        for key, value in (("group", self.group), ("partition", self.partition), ("errorContains", self.error_contains)):
            if value is not None:
                args[key] = value
        for key, value in (("deadFrom", self.dead_from), ("deadTo", self.dead_to)):
            if value is not None:
                args[key] = time_arg(value)
        return args


@dataclass
class DLQReplayReply:
    """One batch of dlqReplay, or the sums of a whole run (without results)."""

    results: List[DLQReplayResult] = field(default_factory=list)
    replayed: int = 0
    skipped: int = 0
    failed: int = 0
    next_after_id: Optional[int] = None

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> "DLQReplayReply":
        return cls(
            results=[DLQReplayResult.from_wire(x) for x in d.get("results") or []],
            replayed=d.get("replayed", 0),
            skipped=d.get("skipped", 0),
            failed=d.get("failed", 0),
            next_after_id=d.get("nextAfterId"),
        )

    def add(self, batch: "DLQReplayReply") -> None:
        """Adds a batch's counts to these sums."""
        self.replayed += batch.replayed
        self.skipped += batch.skipped
        self.failed += batch.failed


@dataclass
class DLQDeleteReply:
    deleted: int
    next_after_id: Optional[int] = None

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> "DLQDeleteReply":
        return cls(deleted=d.get("deleted", 0), next_after_id=d.get("nextAfterId"))


@dataclass
class DLQErrorCount:
    """How many dead letters of a queue's group died of one error."""

    queue: str
    group: str
    error: str
    count: int
    replayed: int
    first_dead_at: _dt.datetime
    last_dead_at: _dt.datetime

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> "DLQErrorCount":
        return cls(
            queue=d.get("queue", ""),
            group=d.get("group", ""),
            error=d.get("error", ""),
            count=d.get("count", 0),
            replayed=d.get("replayed", 0),
            first_dead_at=to_datetime(d["firstDeadAt"]),
            last_dead_at=to_datetime(d["lastDeadAt"]),
        )
