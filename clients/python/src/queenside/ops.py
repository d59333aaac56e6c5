"""Every operation of protocol version 1, as an ``Op``: its name, its argument
map and how to read its result.

The synchronous and the asyncio client both send these; keeping them here
means each operation is spelled out once.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass
from typing import Any, Callable, Dict, Generic, Iterable, List, Optional, TypeVar, Union

from .admin_results import (
    CursorPosition,
    DLQPage,
    DLQReplayResult,
    GroupInfo,
    HealthResult,
    HelloResult,
    QueueInfo,
    StatsResult,
)
from .acks import AckLike, ack_items
from .codec import time_arg
from .dlq_bulk import DLQDeleteReply, DLQErrorCount, DLQFilter, DLQReplayReply
from .items import PushLike, QueueOptions, push_items
from .results import AckResult, LeaseResult, PopResult, PushResult, TransactionResult
from .tracing import with_trace_context

__all__ = ["Op", "PROTOCOL_VERSION", "SeekTarget"]

T = TypeVar("T")

PROTOCOL_VERSION = 1

# "beginning", "end", an aware datetime, epoch milliseconds or an RFC 3339 string.
SeekTarget = Union[str, int, _dt.datetime]


@dataclass(frozen=True)
class Op(Generic[T]):
    """One request to send and the reader of its result."""

    name: str
    args: Optional[Dict[str, Any]]
    parse: Callable[[Dict[str, Any]], T]
    # How long the sidecar may rightly hold the request before answering
    # (a pop's long-poll); added to the caller's timeout.
    wait_seconds: float = 0.0


def _identity(result: Dict[str, Any]) -> Dict[str, Any]:
    return result


def raw(name: str, args: Optional[Dict[str, Any]] = None) -> Op[Dict[str, Any]]:
    return Op(name, args, _identity)


def hello(client: str, protocol: int = PROTOCOL_VERSION) -> Op[HelloResult]:
    args: Dict[str, Any] = {"protocol": protocol}
    if client:
        args["client"] = client
    return Op("hello", args, HelloResult.from_wire)


def push(items: Union[PushLike, Iterable[PushLike]]) -> Op[List[PushResult]]:
    wire = [item.to_wire() for item in with_trace_context(push_items(items))]
    return Op("push", {"items": wire}, lambda r: [PushResult.from_wire(x) for x in r.get("results") or []])


def pop(
    queue: str,
    *,
    group: str = "",
    partition: Optional[str] = None,
    batch: int = 1,
    partitions: int = 1,
    wait_ms: int = 0,
    auto_ack: bool = False,
    lease_seconds: Optional[int] = None,
    subscription_mode: Optional[str] = None,
    subscription_from: Optional[Union[_dt.datetime, int, str]] = None,
) -> Op[PopResult]:
    args: Dict[str, Any] = {"queue": queue}
    if partition is not None:
        args["partition"] = partition
    if group:
        args["group"] = group
    args["batch"] = batch
    args["partitions"] = partitions
    if wait_ms:
        args["waitMs"] = wait_ms
    if auto_ack:
        args["autoAck"] = True
    if lease_seconds is not None:
        args["leaseSeconds"] = lease_seconds
    if subscription_mode is not None:
        args["subscriptionMode"] = subscription_mode
    if subscription_from is not None:
        args["subscriptionFrom"] = time_arg(subscription_from)
    return Op("pop", args, PopResult.from_wire, wait_seconds=max(wait_ms, 0) / 1000.0)


def ack(items: Iterable[AckLike]) -> Op[AckResult]:
    return Op("ack", {"items": [item.to_wire() for item in ack_items(items)]}, AckResult.from_wire)


def ack_and_pop(items: Iterable[AckLike], pop_op: Op[PopResult]) -> Op[AckResult]:
    """An ack carrying the next pop (revision 1.2): ``pop_op``'s arguments under ``pop``.

    It may wait as long as the pop it carries (a long-poll that starts once
    the acks are committed), so it takes the pop's ``wait_seconds``.
    """
    args = {"items": [item.to_wire() for item in ack_items(items)], "pop": pop_op.args}
    return Op("ack", args, AckResult.from_wire, wait_seconds=pop_op.wait_seconds)


def answered_without_pop(res: AckResult) -> bool:
    """Whether an ack that carried a pop came back without it: a sidecar of
    revision 1.1 ignores the argument, and the client must pop on its own."""
    return res.pop is None and res.pop_error is None


def _lease_results(result: Dict[str, Any]) -> List[LeaseResult]:
    return [LeaseResult.from_wire(x) for x in result.get("results") or []]


def renew(lease_ids: Iterable[str], seconds: Optional[int] = None) -> Op[List[LeaseResult]]:
    args: Dict[str, Any] = {"leaseIds": list(lease_ids)}
    if seconds is not None:
        args["seconds"] = seconds
    return Op("renew", args, _lease_results)


def release(lease_ids: Iterable[str]) -> Op[List[LeaseResult]]:
    return Op("release", {"leaseIds": list(lease_ids)}, _lease_results)


def transaction(acks: Iterable[AckLike] = (), pushes: Union[PushLike, Iterable[PushLike]] = ()) -> Op[TransactionResult]:
    args = {"acks": [a.to_wire() for a in ack_items(acks)], "pushes": [p.to_wire() for p in with_trace_context(push_items(pushes))]}
    return Op("transaction", args, TransactionResult.from_wire)


def configure(queue: str, options: Optional[QueueOptions] = None) -> Op[QueueOptions]:
    opts = options if options is not None else QueueOptions()
    return Op(
        "configure",
        {"queue": queue, "options": opts.to_wire()},
        lambda r: QueueOptions.from_wire(r.get("options") or {}),
    )


def queues() -> Op[List[QueueInfo]]:
    return Op("queues", {}, lambda r: [QueueInfo.from_wire(q) for q in r.get("queues") or []])


def stats(queue: str) -> Op[StatsResult]:
    return Op("stats", {"queue": queue}, StatsResult.from_wire)


def groups(queue: Optional[str] = None) -> Op[List[GroupInfo]]:
    args: Dict[str, Any] = {} if queue is None else {"queue": queue}
    return Op("groups", args, lambda r: [GroupInfo.from_wire(g) for g in r.get("groups") or []])


def seek(queue: str, group: str, to: SeekTarget, partition: Optional[str] = None) -> Op[List[CursorPosition]]:
    args: Dict[str, Any] = {"queue": queue, "group": group}
    if partition is not None:
        args["partition"] = partition
    args["to"] = to if to in ("beginning", "end") else time_arg(to)
    return Op("seek", args, lambda r: [CursorPosition.from_wire(c) for c in r.get("cursors") or []])


def delete_group(queue: str, group: str) -> Op[bool]:
    return Op("deleteGroup", {"queue": queue, "group": group}, lambda r: bool(r.get("deleted", False)))


def dlq(
    queue: str,
    *,
    group: Optional[str] = None,
    partition: Optional[str] = None,
    limit: Optional[int] = None,
    after_id: Optional[int] = None,
    error_contains: Optional[str] = None,
    dead_from: Any = None,
    dead_to: Any = None,
    count: bool = False,
) -> Op[DLQPage]:
    args = DLQFilter(queue, group, partition, error_contains, dead_from, dead_to).to_wire()
    if count:
        args["count"] = True
    if limit is not None:
        args["limit"] = limit
    if after_id is not None:
        args["afterId"] = after_id
    return Op("dlq", args, DLQPage.from_wire)


def dlq_replay(ids: Iterable[int]) -> Op[List[DLQReplayResult]]:
    return Op("dlqReplay", {"ids": list(ids)}, lambda r: [DLQReplayResult.from_wire(x) for x in r.get("results") or []])


def _selection(selection: Union[DLQFilter, Iterable[int]], after_id: Optional[int], limit: Optional[int]) -> Dict[str, Any]:
    """Ids, or a filter's batch: from after_id, limit entries."""
    if not isinstance(selection, DLQFilter):
        return {"ids": list(selection)}
    args = selection.to_wire()
    if after_id is not None:
        args["afterId"] = after_id
    if limit is not None:
        args["limit"] = limit
    return args


def dlq_replay_batch(
    selection: Union[DLQFilter, Iterable[int]],
    *,
    after_id: Optional[int] = None,
    limit: Optional[int] = None,
    include_replayed: Optional[bool] = None,
) -> Op[DLQReplayReply]:
    args = _selection(selection, after_id, limit)
    if include_replayed is not None:
        args["includeReplayed"] = include_replayed
    return Op("dlqReplay", args, DLQReplayReply.from_wire)


def dlq_delete(
    selection: Union[DLQFilter, Iterable[int]], *, after_id: Optional[int] = None, limit: Optional[int] = None
) -> Op[DLQDeleteReply]:
    return Op("dlqDelete", _selection(selection, after_id, limit), DLQDeleteReply.from_wire)


def dlq_summary(queue: Optional[str] = None, limit: Optional[int] = None) -> Op[List[DLQErrorCount]]:
    args: Dict[str, Any] = {}
    if queue is not None:
        args["queue"] = queue
    if limit is not None:
        args["limit"] = limit
    return Op("dlqSummary", args, lambda r: [DLQErrorCount.from_wire(x) for x in r.get("errors") or []])


def health() -> Op[HealthResult]:
    return Op("health", {}, HealthResult.from_wire)
