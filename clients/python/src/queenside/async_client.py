"""The asyncio client: the methods of ``Client``, as coroutines."""

from __future__ import annotations

import asyncio
import datetime as _dt
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
from .async_connection import AsyncConnection
from .connection import DEFAULT_MAX_IN_FLIGHT, NoticeHandler
from .acks import AckLike
from .dlq_bulk import DLQDeleteReply, DLQErrorCount, DLQFilter, DLQReplayReply
from .errors import ConnectionClosedError, QueensideError
from .items import PushItem, PushLike, QueueOptions
from .results import AckResult, LeaseResult, PopResult, PushResult, TransactionResult
from .retry import DEFAULT_RETRY, Attempts, RetryPolicy
from .socket_path import default_socket_path
from .version import CLIENT_NAME

if TYPE_CHECKING:
    from .async_consumer import AsyncHandler, ConsumeStats

__all__ = ["AsyncClient"]

T = TypeVar("T")


class AsyncClient:
    """A connection to a queenside sidecar for asyncio programs.

    ``async with AsyncClient() as qs: ...`` connects and closes; or
    ``qs = await AsyncClient.open()``. Any number of tasks may call at once:
    requests are pipelined on the one connection.
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
        self.retry = retry  # as Client's
        self._connect_timeout = connect_timeout
        self._max_in_flight = max_in_flight
        self._on_notice = on_notice
        self._conn: Optional[AsyncConnection] = None

    @classmethod
    async def open(cls, socket_path: Optional[str] = None, **options: Any) -> "AsyncClient":
        client = cls(socket_path, **options)
        await client.connect()
        return client

    async def connect(self) -> None:
        if self._conn is None:
            self._conn = await AsyncConnection.open(
                self.socket_path,
                connect_timeout=self._connect_timeout,
                max_in_flight=self._max_in_flight,
                on_notice=self._on_notice,
            )

    async def __aenter__(self) -> "AsyncClient":
        await self.connect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._conn is not None:
            await self._conn.close()

    @property
    def closed(self) -> bool:
        return self._conn is None or self._conn.closed

    @property
    def draining(self) -> bool:
        return self._conn is not None and self._conn.draining.is_set()

    @property
    def draining_event(self) -> asyncio.Event:
        return self._connected().draining

    def _connected(self) -> AsyncConnection:
        if self._conn is None:
            raise ConnectionClosedError("not connected: use `async with AsyncClient()` or `await AsyncClient.open()`")
        return self._conn

    async def _run(self, op: "ops.Op[T]", timeout: Optional[float]) -> T:
        # As Client._run; the pauses end at once when the task is cancelled.
        conn = self._connected()
        attempts = Attempts(self.retry, op.name, op.args, self.timeout if timeout is None else timeout)
        while True:
            try:
                result = await conn.request(op.name, op.args, timeout=attempts.timeout(), wait_seconds=op.wait_seconds)
                return op.parse(result)
            except QueensideError as err:
                pause = attempts.pause_after(err.code, conn.drain_announced)
                if pause is None:
                    raise
                await asyncio.sleep(pause)
                if conn.drain_announced or conn.closed:
                    raise

    async def call(self, op: str, args: Optional[Dict[str, Any]] = None, *, timeout: Optional[float] = None) -> Dict[str, Any]:
        return await self._run(ops.raw(op, args), timeout)

    async def hello(self, client: str = CLIENT_NAME, *, protocol: int = ops.PROTOCOL_VERSION, timeout: Optional[float] = None) -> HelloResult:
        res = await self._run(ops.hello(client, protocol), timeout)
        self._connected().max_frame_bytes = res.max_frame_bytes or None
        return res

    async def push(self, items: Union[PushLike, Iterable[PushLike]], *, timeout: Optional[float] = None) -> List[PushResult]:
        return await self._run(ops.push(items), timeout)

    async def push_one(
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
        item = PushItem(queue, payload, partition, transaction_id, trace_id, headers)
        return (await self.push([item], timeout=timeout))[0].raise_for_status()

    async def pop(
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
        return await self._run(op, timeout)

    async def ack(self, items: Iterable[AckLike], *, timeout: Optional[float] = None) -> AckResult:
        return await self._run(ops.ack(items), timeout)

    async def ack_and_pop(
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
        """As ``Client.ack_and_pop``: the acks and the next pop in one request."""
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
        res = await self._run(ops.ack_and_pop(items, pop_op), timeout)
        if ops.answered_without_pop(res):
            try:
                res.pop = await self._run(pop_op, timeout)
            except QueensideError as exc:
                res.pop, res.pop_error = PopResult([], []), exc  # the acks were applied
        return res

    async def renew(self, lease_ids: Iterable[str], seconds: Optional[int] = None, *, timeout: Optional[float] = None) -> List[LeaseResult]:
        return await self._run(ops.renew(lease_ids, seconds), timeout)

    async def release(self, lease_ids: Iterable[str], *, timeout: Optional[float] = None) -> List[LeaseResult]:
        return await self._run(ops.release(lease_ids), timeout)

    async def transaction(
        self, acks: Iterable[AckLike] = (), pushes: Union[PushLike, Iterable[PushLike]] = (), *, timeout: Optional[float] = None
    ) -> TransactionResult:
        return await self._run(ops.transaction(acks, pushes), timeout)

    async def configure(self, queue: str, options: Optional[QueueOptions] = None, *, timeout: Optional[float] = None) -> QueueOptions:
        return await self._run(ops.configure(queue, options), timeout)

    async def queues(self, *, timeout: Optional[float] = None) -> List[QueueInfo]:
        return await self._run(ops.queues(), timeout)

    async def stats(self, queue: str, *, timeout: Optional[float] = None) -> StatsResult:
        return await self._run(ops.stats(queue), timeout)

    async def groups(self, queue: Optional[str] = None, *, timeout: Optional[float] = None) -> List[GroupInfo]:
        return await self._run(ops.groups(queue), timeout)

    async def seek(
        self,
        queue: str,
        group: str,
        to: ops.SeekTarget,
        *,
        partition: Optional[str] = None,
        timeout: Optional[float] = None,
    ) -> List[CursorPosition]:
        return await self._run(ops.seek(queue, group, to, partition), timeout)

    async def delete_group(self, queue: str, group: str, *, timeout: Optional[float] = None) -> bool:
        return await self._run(ops.delete_group(queue, group), timeout)

    async def dlq(
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
        return await self._run(ops.dlq(
                queue, group=group, partition=partition, limit=limit, after_id=after_id,
                error_contains=error_contains, dead_from=dead_from, dead_to=dead_to, count=count,
            ), timeout)

    async def dlq_replay(self, ids: Iterable[int], *, timeout: Optional[float] = None) -> List[DLQReplayResult]:
        return await self._run(ops.dlq_replay(ids), timeout)

    async def dlq_replay_batch(
        self,
        selection: Union[DLQFilter, Iterable[int]],
        *,
        after_id: Optional[int] = None,
        limit: Optional[int] = None,
        include_replayed: Optional[bool] = None,
        timeout: Optional[float] = None,
    ) -> DLQReplayReply:
        op = ops.dlq_replay_batch(selection, after_id=after_id, limit=limit, include_replayed=include_replayed)
        return await self._run(op, timeout)

    async def dlq_replay_all(
        self,
        filter: DLQFilter,
        *,
        include_replayed: bool = False,
        on_progress: Optional[Callable[[DLQReplayReply], Any]] = None,
        timeout: Optional[float] = None,
    ) -> DLQReplayReply:
        total = DLQReplayReply()
        after_id: Optional[int] = None
        while True:
            batch = await self.dlq_replay_batch(filter, after_id=after_id, include_replayed=include_replayed, timeout=timeout)
            total.add(batch)
            if on_progress is not None:
                on_progress(batch)
            if batch.next_after_id is None:
                return total
            after_id = batch.next_after_id

    async def dlq_delete(
        self,
        selection: Union[DLQFilter, Iterable[int]],
        *,
        after_id: Optional[int] = None,
        limit: Optional[int] = None,
        timeout: Optional[float] = None,
    ) -> DLQDeleteReply:
        return await self._run(ops.dlq_delete(selection, after_id=after_id, limit=limit), timeout)

    async def dlq_delete_all(self, filter: DLQFilter, *, timeout: Optional[float] = None) -> int:
        deleted = 0
        after_id: Optional[int] = None
        while True:
            batch = await self.dlq_delete(filter, after_id=after_id, timeout=timeout)
            deleted += batch.deleted
            if batch.next_after_id is None:
                return deleted
            after_id = batch.next_after_id

    async def dlq_summary(
        self, queue: Optional[str] = None, *, limit: Optional[int] = None, timeout: Optional[float] = None
    ) -> List[DLQErrorCount]:
        return await self._run(ops.dlq_summary(queue, limit), timeout)

    async def health(self, *, timeout: Optional[float] = None) -> HealthResult:
        return await self._run(ops.health(), timeout)

    async def consume(
        self,
        queue: str,
        handler: "AsyncHandler",
        *,
        group: str = "",
        stop: Optional[asyncio.Event] = None,
        **options: Any,
    ) -> "ConsumeStats":
        """Run ``AsyncConsumer(self, queue, handler, ...)`` until stopped; see ``AsyncConsumer``."""
        from .consume_batch import check_options
        from .async_consumer import AsyncConsumer

        check_options(AsyncConsumer, options)
        return await AsyncConsumer(self, queue, handler, group=group, stop=stop, **options).run()
