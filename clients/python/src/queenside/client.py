"""The synchronous client: one connection, safe to share between threads."""

from __future__ import annotations

import datetime as _dt
import time
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterable, List, Mapping, Optional, TypeVar, Union

from . import ops
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
from .acks import AckLike
from .dlq_bulk import DLQDeleteReply, DLQErrorCount, DLQFilter, DLQReplayReply
from .connection import DEFAULT_MAX_IN_FLIGHT, Connection, NoticeHandler
from .errors import QueensideError
from .items import PushItem, PushLike, QueueOptions
from .results import AckResult, LeaseResult, PopResult, PushResult, TransactionResult
from .retry import DEFAULT_RETRY, Attempts, RetryPolicy
from .socket_path import default_socket_path
from .version import CLIENT_NAME

if TYPE_CHECKING:
    import threading

    from .consumer import ConsumeStats, Handler

__all__ = ["Client"]

T = TypeVar("T")


class Client:
    """A connection to a queenside sidecar.

    Requests are pipelined on the one connection, so many threads may call
    at once; each call waits only for its own answer. ``timeout`` (seconds)
    is the default deadline of every call, sent to the sidecar as
    ``timeoutMs``; None means none. ``retry`` says how a call answered
    ``unavailable`` or ``draining`` is sent again when that cannot do harm
    (see ``retry.py``); None turns retries off.

    >>> with Client() as qs:
    ...     qs.push_one("orders", {"id": 1}, transaction_id="order-1")
    """

    def __init__(
        self,
        socket_path: Optional[str] = None,
        *,
        timeout: Optional[float] = 30.0,
        connect_timeout: Optional[float] = 5.0,
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
        on_notice: Optional[NoticeHandler] = None,
        retry: Optional[RetryPolicy] = DEFAULT_RETRY,
    ) -> None:
        self.socket_path = socket_path or default_socket_path()
        self.timeout = timeout
        # None: every answer goes to the caller, never retried.
        self.retry = retry
        self._conn = Connection(
            self.socket_path, connect_timeout=connect_timeout, max_in_flight=max_in_flight, on_notice=on_notice
        )

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection; calls still waiting fail with ConnectionClosedError."""
        self._conn.close()

    @property
    def closed(self) -> bool:
        return self._conn.closed

    @property
    def draining(self) -> bool:
        """True once the sidecar announced that it is shutting down."""
        return self._conn.draining.is_set()

    @property
    def draining_event(self) -> "threading.Event":
        """Set when the sidecar announces that it is shutting down."""
        return self._conn.draining

    def _run(self, op: "ops.Op[T]", timeout: Optional[float]) -> T:
        # An answer of unavailable or draining is sent again when the rule
        # of retry.py allows it, within the call's timeout.
        attempts = Attempts(self.retry, op.name, op.args, self.timeout if timeout is None else timeout)
        while True:
            try:
                result = self._conn.request(op.name, op.args, timeout=attempts.timeout(), wait_seconds=op.wait_seconds)
                return op.parse(result)
            except QueensideError as err:
                pause = attempts.pause_after(err.code, self._conn.drain_announced)
                if pause is None:
                    raise
                time.sleep(pause)
                if self._conn.drain_announced or self._conn.closed:
                    raise

    def call(self, op: str, args: Optional[Dict[str, Any]] = None, *, timeout: Optional[float] = None) -> Dict[str, Any]:
        """Send any operation with a raw argument map; return the raw result map."""
        return self._run(ops.raw(op, args), timeout)

    # -- hello, push, pop, ack ------------------------------------------------

    def hello(self, client: str = CLIENT_NAME, *, protocol: int = ops.PROTOCOL_VERSION, timeout: Optional[float] = None) -> HelloResult:
        """Announce the client; learn the sidecar's version and frame limit."""
        res = self._run(ops.hello(client, protocol), timeout)
        self._conn.max_frame_bytes = res.max_frame_bytes or None
        return res

    def push(self, items: Union[PushLike, Iterable[PushLike]], *, timeout: Optional[float] = None) -> List[PushResult]:
        """Push one item or a list of them; one result per item, in order. Items fail alone: check each ``status``.

        An item is a ``PushItem`` or a dict with the same fields (the
        protocol's keys, ``transactionId``, or the Python names). One
        without a queue or a payload, or a dict with an unknown key, is
        refused before anything is sent (``InvalidArgumentError``).
        """
        return self._run(ops.push(items), timeout)

    def push_one(
        self,
        queue: str,
        payload: Any,
        *,
        partition: Optional[str] = None,
        transaction_id: Optional[str] = None,
        trace_id: Optional[str] = None,
        headers: Optional[Mapping[str, str]] = None,
        timeout: Optional[float] = None,
    ) -> PushResult:
        """Push one message and raise its error if it failed."""
        item = PushItem(queue, payload, partition, transaction_id, trace_id, headers)
        return self.push([item], timeout=timeout)[0].raise_for_status()

    def pop(
        self,
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
        timeout: Optional[float] = None,
    ) -> PopResult:
        """Lease up to ``batch`` messages (long-polling up to ``wait_ms``) for ``group``."""
        op = ops.pop(
            queue,
            group=group,
            partition=partition,
            batch=batch,
            partitions=partitions,
            wait_ms=wait_ms,
            auto_ack=auto_ack,
            lease_seconds=lease_seconds,
            subscription_mode=subscription_mode,
            subscription_from=subscription_from,
        )
        return self._run(op, timeout)

    def ack(self, items: Iterable[AckLike], *, timeout: Optional[float] = None) -> AckResult:
        """Report messages completed or failed; check each result's ``success``.

        Items are ``AckItem``s (``message.completed()``, ``message.failed(reason)``)
        or popped messages themselves, acked completed: ``ack(pop(...).messages)``.
        """
        return self._run(ops.ack(items), timeout)

    def ack_and_pop(
        self,
        items: Iterable[AckLike],
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
        timeout: Optional[float] = None,
    ) -> AckResult:
        """Ack ``items`` (as ``ack`` takes them) and pop again, in one request.

        The sidecar applies the acks and serves the pop (its arguments as
        ``pop`` takes them) in one transaction (protocol revision 1.2), so
        the pop may deliver what the acks released; a long-poll waits once
        the acks are committed. The pop's result is in ``.pop``; when it
        failed after the acks were applied, ``.pop_error`` says why and
        ``.pop`` is empty. A sidecar of revision 1.1 ignores the pop: the
        pop is then sent on its own, and its error, if any, is ``.pop_error``.
        """
        pop_op = ops.pop(
            queue,
            group=group,
            partition=partition,
            batch=batch,
            partitions=partitions,
            wait_ms=wait_ms,
            auto_ack=auto_ack,
            lease_seconds=lease_seconds,
            subscription_mode=subscription_mode,
            subscription_from=subscription_from,
        )
        res = self._run(ops.ack_and_pop(items, pop_op), timeout)
        if ops.answered_without_pop(res):
            try:
                res.pop = self._run(pop_op, timeout)
            except QueensideError as exc:
                # The acks were applied: their results are still the caller's.
                res.pop, res.pop_error = PopResult([], []), exc
        return res

    def renew(self, lease_ids: Iterable[str], seconds: Optional[int] = None, *, timeout: Optional[float] = None) -> List[LeaseResult]:
        """Extend live leases to ``seconds`` from now (default: the queue's lease time)."""
        return self._run(ops.renew(lease_ids, seconds), timeout)

    def release(self, lease_ids: Iterable[str], *, timeout: Optional[float] = None) -> List[LeaseResult]:
        """Give leases back without charging any retry budget."""
        return self._run(ops.release(lease_ids), timeout)

    def transaction(
        self, acks: Iterable[AckLike] = (), pushes: Union[PushLike, Iterable[PushLike]] = (), *, timeout: Optional[float] = None
    ) -> TransactionResult:
        """Commit acks and pushes together, or nothing (``ConflictError``, with ``.acks``)."""
        return self._run(ops.transaction(acks, pushes), timeout)

    # -- queues and groups ---------------------------------------------------

    def configure(self, queue: str, options: Optional[QueueOptions] = None, *, timeout: Optional[float] = None) -> QueueOptions:
        """Replace every option of ``queue`` (creating it); return the options now stored."""
        return self._run(ops.configure(queue, options), timeout)

    def queues(self, *, timeout: Optional[float] = None) -> List[QueueInfo]:
        return self._run(ops.queues(), timeout)

    def stats(self, queue: str, *, timeout: Optional[float] = None) -> StatsResult:
        return self._run(ops.stats(queue), timeout)

    def groups(self, queue: Optional[str] = None, *, timeout: Optional[float] = None) -> List[GroupInfo]:
        return self._run(ops.groups(queue), timeout)

    def seek(
        self,
        queue: str,
        group: str,
        to: ops.SeekTarget,
        *,
        partition: Optional[str] = None,
        timeout: Optional[float] = None,
    ) -> List[CursorPosition]:
        """Move a group's cursors to ``"beginning"``, ``"end"`` or a time; its leases there are released."""
        return self._run(ops.seek(queue, group, to, partition), timeout)

    def delete_group(self, queue: str, group: str, *, timeout: Optional[float] = None) -> bool:
        """Remove a group's cursors and leases; False when there was no such group."""
        return self._run(ops.delete_group(queue, group), timeout)

    def dlq(
        self,
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
        timeout: Optional[float] = None,
    ) -> DLQPage:
        """One page of dead letters, oldest first."""
        return self._run(ops.dlq(
                queue, group=group, partition=partition, limit=limit, after_id=after_id,
                error_contains=error_contains, dead_from=dead_from, dead_to=dead_to, count=count,
            ), timeout)

    def dlq_replay(self, ids: Iterable[int], *, timeout: Optional[float] = None) -> List[DLQReplayResult]:
        """Push dead letters again, each as a new message."""
        return self._run(ops.dlq_replay(ids), timeout)

    def dlq_replay_batch(
        self,
        selection: Union[DLQFilter, Iterable[int]],
        *,
        after_id: Optional[int] = None,
        limit: Optional[int] = None,
        include_replayed: Optional[bool] = None,
        timeout: Optional[float] = None,
    ) -> DLQReplayReply:
        """Replay dead letters named by ids, or one batch of a filter (revision 1.2)."""
        op = ops.dlq_replay_batch(selection, after_id=after_id, limit=limit, include_replayed=include_replayed)
        return self._run(op, timeout)

    def dlq_replay_all(
        self,
        filter: DLQFilter,
        *,
        include_replayed: bool = False,
        on_progress: Optional[Callable[[DLQReplayReply], Any]] = None,
        timeout: Optional[float] = None,
    ) -> DLQReplayReply:
        """Replay every dead letter the filter matches, a batch at a time; the sums of the batches."""
        total = DLQReplayReply()
        after_id: Optional[int] = None
        while True:
            batch = self.dlq_replay_batch(filter, after_id=after_id, include_replayed=include_replayed, timeout=timeout)
            total.add(batch)
            if on_progress is not None:
                on_progress(batch)
            if batch.next_after_id is None:
                return total
            after_id = batch.next_after_id

    def dlq_delete(
        self,
        selection: Union[DLQFilter, Iterable[int]],
        *,
        after_id: Optional[int] = None,
        limit: Optional[int] = None,
        timeout: Optional[float] = None,
    ) -> DLQDeleteReply:
        """Delete dead letters named by ids, or one batch of a filter (revision 1.2)."""
        return self._run(ops.dlq_delete(selection, after_id=after_id, limit=limit), timeout)

    def dlq_delete_all(self, filter: DLQFilter, *, timeout: Optional[float] = None) -> int:
        """Delete every dead letter the filter matches, a batch at a time; how many."""
        deleted = 0
        after_id: Optional[int] = None
        while True:
            batch = self.dlq_delete(filter, after_id=after_id, timeout=timeout)
            deleted += batch.deleted
            if batch.next_after_id is None:
                return deleted
            after_id = batch.next_after_id

    def dlq_summary(
        self, queue: Optional[str] = None, *, limit: Optional[int] = None, timeout: Optional[float] = None
    ) -> List[DLQErrorCount]:
        """Dead letters of a queue (every queue's without one) counted by group and error, most frequent first."""
        return self._run(ops.dlq_summary(queue, limit), timeout)

    def health(self, *, timeout: Optional[float] = None) -> HealthResult:
        """A real database round trip; answered even while the database is down or the sidecar drains."""
        return self._run(ops.health(), timeout)

    # -- the consume loop ----------------------------------------------------

    def consume(
        self,
        queue: str,
        handler: "Handler",
        *,
        group: str = "",
        stop: Optional["threading.Event"] = None,
        **options: Any,
    ) -> "ConsumeStats":
        """Run ``Consumer(self, queue, handler, ...)`` until stopped; see ``Consumer``."""
        from .consume_batch import check_options
        from .consumer import Consumer

        check_options(Consumer, options)
        return Consumer(self, queue, handler, group=group, stop=stop, **options).run()
