"""The asyncio consume loop: ``Consumer``'s rules, with tasks instead of threads."""

from __future__ import annotations

import asyncio
import datetime as _dt
import inspect
import logging
import time
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Dict, List, Optional, Set, TypeVar, Union

from .ack_batcher import AckErrorHandler, AsyncAckBatcher
from .async_lease_keeper import AsyncLeaseKeeper
from .consume_batch import (
    DEFAULT_FAILURE_BACKOFF,
    AsyncHandler,
    Backoff,
    ConsumeStats,
    LeaseWork,
    Settlement,
    check_concurrency,
    check_handler,
    split_by_lease,
)
from .errors import ConnectionClosedError, DrainingError, QueensideError
from .results import AckResult, PopResult
from .stop_signals import install_stop_signals
from .tracing import consumer_span

if TYPE_CHECKING:
    from .async_client import AsyncClient

__all__ = ["AsyncConsumer", "AsyncHandler", "ConsumeStats"]

log = logging.getLogger("queenside")

T = TypeVar("T")


class AsyncConsumer:
    """Pops ``queue`` for ``group`` and awaits ``handler`` on each message.

    The handler may be a coroutine function or a plain function (which then
    runs on the event loop, so it must not block). One loop pops, and
    ``concurrency`` (1 to 100) is how many handlers are awaited at once over
    the leases of a pop, each lease's messages one after the other, in
    offset order; different leases run as tasks of their own (with 1, the
    default, the loop awaits one message at a time, in the order the pop
    returned them). Everything else, guarantees included, is as for
    ``Consumer``; with ``ack_async=True`` the acks are sent by a
    task of their own, and ``on_ack_error`` is called on the event loop.
    Without it, a batch's acks go with the next pop (``ack_and_pop``), as
    in ``Consumer``. A stop during a pop's long-poll stops awaiting it at
    once; the call goes on in a task, and what its answer leased is given
    back when it comes.
    """

    def __init__(
        self,
        client: "AsyncClient",
        queue: str,
        handler: AsyncHandler,
        *,
        group: str = "",
        partition: Optional[str] = None,
        batch: int = 100,
        partitions: int = 100,
        concurrency: int = 1,
        wait_ms: int = 5000,
        lease_seconds: Optional[int] = None,
        renew_every: Optional[float] = None,
        subscription_mode: Optional[str] = None,
        subscription_from: Optional[Union[_dt.datetime, int, str]] = None,
        stop: Optional[asyncio.Event] = None,
        stop_on_signals: bool = True,
        failure_backoff: Optional[Backoff] = DEFAULT_FAILURE_BACKOFF,
        retry_delay: float = 0.5,
        ack_async: bool = False,
        on_ack_error: Optional[AckErrorHandler] = None,
    ) -> None:
        check_handler(handler)
        check_concurrency(concurrency)
        self.client = client
        self.queue = queue
        self.handler = handler
        self.group = group
        self.partition = partition
        self.batch = batch
        self.partitions = partitions
        self.concurrency = concurrency
        self.wait_ms = wait_ms
        self.lease_seconds = lease_seconds
        self.renew_every = renew_every
        self.subscription_mode = subscription_mode
        self.subscription_from = subscription_from
        self.stop_on_signals = stop_on_signals
        self.failure_backoff = failure_backoff
        self.retry_delay = retry_delay
        self._stop = stop if stop is not None else asyncio.Event()
        self._fatal: Optional[BaseException] = None
        self._stats = ConsumeStats()
        self._keeper: Optional[AsyncLeaseKeeper] = None
        self.ack_async = ack_async
        self.on_ack_error = on_ack_error
        self._acks: Optional[AsyncAckBatcher] = None
        # Set while run() runs: a task that ends when the loop is asked to stop.
        self._stopped: Optional["asyncio.Future[Any]"] = None
        # Calls the loop stopped awaiting, and the releases of what they
        # leased: referenced until they end.
        self._late: Set["asyncio.Future[Any]"] = set()

    @property
    def stats(self) -> ConsumeStats:
        return self._stats

    def stop(self) -> None:
        self._stop.set()

    def _stopping(self) -> bool:
        return self._stop.is_set() or self._fatal is not None or self.client.draining

    async def run(self) -> ConsumeStats:
        loop = asyncio.get_running_loop()
        restore = install_stop_signals(self.stop, loop) if self.stop_on_signals else (lambda: None)
        self._stopped = asyncio.ensure_future(self._stop.wait())
        self._keeper = AsyncLeaseKeeper(self.client, self.lease_seconds, self.renew_every)
        self._keeper.start()
        if self.ack_async:
            self._acks = AsyncAckBatcher(self.client, self.on_ack_error, self._fail, self._stats.add)
            self._acks.start()
        try:
            await self._work()
        finally:
            if self._acks is not None:
                await self._acks.close()  # the pending acks go before the leases are left to lapse
            await self._keeper.stop()
            self._stopped.cancel()
            restore()
        if self._fatal is not None:
            raise self._fatal
        if self.client.draining and not self._stop.is_set():
            raise DrainingError("the sidecar is shutting down; consume stopped")
        return self._stats

    def _fail(self, exc: BaseException) -> None:
        if self._fatal is None:
            self._fatal = exc
        self._stop.set()

    async def _work(self) -> None:
        carried: Optional[Settlement] = None  # as in Consumer: for the next pop to carry
        try:
            while not self._stopping():
                # As in Consumer: pending acks hold their partitions, and an
                # ack wakes no waiting pop.
                waiting_acks = self._acks is not None and self._acks.busy
                if carried is not None:
                    sending, carried = carried, None
                    result = await self._ack_and_pop(sending)
                else:
                    result = await self._pop(0 if waiting_acks else self.wait_ms)
                if result is not None and result.leases:
                    carried = await self._handle(result)
                elif waiting_acks and result is not None:
                    assert self._acks is not None
                    await self._acks.wait()
            if carried is not None:
                await self._settle(carried)  # stopping: no next pop will carry them
        except BaseException as exc:
            self._fail(exc)

    def _pop_args(self) -> Dict[str, Any]:
        return dict(
            group=self.group,
            partition=self.partition,
            batch=self.batch,
            partitions=self.partitions,
            lease_seconds=self.lease_seconds,
            subscription_mode=self.subscription_mode,
            subscription_from=self.subscription_from,
        )

    async def _await(self, call: Awaitable[T], late: Callable[[T], None]) -> Optional[T]:
        """call's answer; None when the loop was asked to stop first: the call
        then goes on in its task, and ``late`` gets its answer when it comes."""
        task = asyncio.ensure_future(call)
        assert self._stopped is not None
        await asyncio.wait((task, self._stopped), return_when=asyncio.FIRST_COMPLETED)
        if task.done():
            return task.result()
        self._late.add(task)

        def answered(t: "asyncio.Future[T]") -> None:
            self._late.discard(t)
            if not t.cancelled() and t.exception() is None:
                late(t.result())

        task.add_done_callback(answered)
        return None

    def _give_back_late(self, pop: Optional[PopResult]) -> None:
        """As Consumer._give_back_late, in a task of its own."""
        if pop is None or not pop.leases:
            return

        async def release(ids: List[str]) -> None:
            try:
                await self.client.release(ids)
            except QueensideError as exc:
                log.warning("queenside: release failed (%s); those leases will expire", exc)

        task = asyncio.ensure_future(release([lease.lease_id for lease in pop.leases]))
        self._late.add(task)
        task.add_done_callback(self._late.discard)

    async def _pop(self, wait_ms: int) -> Optional[PopResult]:
        try:
            return await self._await(self.client.pop(self.queue, wait_ms=wait_ms, **self._pop_args()), self._give_back_late)
        except QueensideError as exc:
            return await self._pop_failed(exc)

    async def _ack_and_pop(self, s: Settlement) -> Optional[PopResult]:
        """As Consumer._ack_and_pop."""
        stats = s.stats()

        def late(res: AckResult) -> None:
            s.count_refused(res.results, ConsumeStats())  # the acks were applied all the same
            self._give_back_late(res.pop)

        try:
            res = await self._await(self.client.ack_and_pop(s.acks, self.queue, wait_ms=self.wait_ms, **self._pop_args()), late)
        except QueensideError as exc:
            await self._settle(s)  # resent on their own: repeating an ack is safe
            return await self._pop_failed(exc)
        if res is None:  # stopping: the answer is late's
            self._stats.add(stats)
            return None
        s.count_refused(res.results, stats)
        self._stats.add(stats)
        if res.pop_error is not None:
            return await self._pop_failed(res.pop_error)
        return res.pop

    async def _pop_failed(self, exc: QueensideError) -> Optional[PopResult]:
        if isinstance(exc, DrainingError):
            return None
        if self._stopping():
            return None
        if isinstance(exc, ConnectionClosedError) or not exc.retryable:
            raise exc
        log.warning("queenside: pop %s failed (%s); trying again", self.queue, exc)
        try:
            await asyncio.wait_for(self._stop.wait(), timeout=self.retry_delay)
        except asyncio.TimeoutError:
            pass
        return None

    async def _handle(self, result: PopResult) -> Optional[Settlement]:
        """As Consumer._handle: the settlement for the next pop to carry, or None."""
        assert self._keeper is not None
        settlement = Settlement()
        carry = False
        self._keeper.track(result.leases)
        try:
            await self._handle_leases(split_by_lease(result), settlement)
            await self._wait_until(settlement.retry_at)  # the failures' backoff, the leases renewed
            carry = self._acks is None and settlement.carriable()
        finally:
            if self._acks is not None and settlement.only_completed():
                keeper = self._keeper  # renewed until the ack is answered
                self._stats.add(settlement.stats())
                self._acks.add(settlement.completed, lambda: keeper.untrack(result.leases))
            else:
                # Untracked first: the acks end the leases, and a renewal racing
                # them would only log a spurious lease_expired. A third of the
                # lease at least is left, plenty for one call (a carried ack
                # goes as soon as this returns).
                self._keeper.untrack(result.leases)
                if not carry:
                    await self._settle(settlement)
        return settlement if carry else None

    async def _handle_leases(self, works: List[LeaseWork], settlement: Settlement) -> None:
        """Hands every lease of a pop to the handler, and returns once all are
        done: one after the other (concurrency 1), else on up to
        ``concurrency`` tasks, each taking the next lease not yet taken."""
        if self.concurrency == 1:
            for work in works:
                await self._handle_lease(work, settlement)
            return
        pending = iter(works)  # shared: each lease goes to the one task that takes it

        async def take() -> None:
            for work in pending:
                try:
                    await self._handle_lease(work, settlement)
                except BaseException as exc:
                    # Stops the loop at once: the other tasks start nothing
                    # more, and give the rest of their leases back.
                    self._fail(exc)
                    raise

        # Every task is awaited to its end, an error or not, before the
        # batch is settled.
        ended = await asyncio.gather(*(take() for _ in range(min(self.concurrency, len(works)))), return_exceptions=True)
        for outcome in ended:
            if isinstance(outcome, BaseException):
                raise outcome  # the error that ended a lease ends the loop

    async def _handle_lease(self, work: LeaseWork, settlement: Settlement) -> None:
        """Awaits the handler on a lease's messages one after the other, in
        offset order, until a failure or a stop."""
        for message in work.messages:
            if self._stopping():
                settlement.give_back(work.lease)
                return
            with consumer_span(message, self.group) as span:
                try:
                    outputs = self.handler(message)
                    if inspect.isawaitable(outputs):
                        outputs = await outputs
                except Exception as exc:
                    span.fail(exc)
                    settlement.fail(message, exc, work.lease, self.failure_backoff)
                    return  # the rest of this lease comes again after the rewind
                except BaseException:
                    settlement.give_back(work.lease)
                    raise
                settlement.complete(message, outputs)

    async def _wait_until(self, deadline: float) -> None:
        """Until time.monotonic() reaches deadline, or the loop is stopping."""
        while not self._stopping():
            left = deadline - time.monotonic()
            if left <= 0:
                return
            try:
                await asyncio.wait_for(self._stop.wait(), timeout=min(left, 0.1))
            except asyncio.TimeoutError:
                pass

    async def _settle(self, s: Settlement) -> None:
        stats = s.stats()
        fatal: Optional[QueensideError] = None
        if s.acks:
            try:
                if s.pushes:
                    s.count_refused((await self.client.transaction(s.acks, s.pushes)).acks, stats)
                else:
                    s.count_refused((await self.client.ack(s.acks)).results, stats)
            except QueensideError as exc:
                fatal = s.on_settle_error(exc, stats)
        if s.release:
            try:
                await self.client.release(s.release)
            except QueensideError as exc:
                log.warning("queenside: release failed (%s); those leases will expire", exc)
        self._stats.add(stats)
        if fatal is not None:
            raise fatal
