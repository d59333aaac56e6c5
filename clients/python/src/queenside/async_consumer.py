"""The asyncio consume loop: ``Consumer``'s rules, with tasks instead of threads."""

from __future__ import annotations

import asyncio
import datetime as _dt
import inspect
import logging
import signal
import threading
from typing import TYPE_CHECKING, Any, Callable, Dict, Optional, Union

from .ack_batcher import AckErrorHandler, AsyncAckBatcher
from .async_lease_keeper import AsyncLeaseKeeper
from .consume_batch import AsyncHandler, ConsumeStats, Settlement, split_by_lease
from .errors import ConnectionClosedError, DrainingError, QueensideError
from .results import PopResult
from .stop_signals import STOP_SIGNALS
from .tracing import consumer_span

if TYPE_CHECKING:
    from .async_client import AsyncClient

__all__ = ["AsyncConsumer", "AsyncHandler", "ConsumeStats"]

log = logging.getLogger("queenside")


class AsyncConsumer:
    """Pops ``queue`` for ``group`` and awaits ``handler`` on each message.

    The handler may be a coroutine function or a plain function (which then
    runs on the event loop, so it must not block). ``concurrency`` tasks each
    pop and handle their own batches. Everything else, guarantees included,
    is as for ``Consumer``; with ``ack_async=True`` the acks are sent by a
    task of their own, and ``on_ack_error`` is called on the event loop.
    Without it, a batch's acks go with the next pop (``ack_and_pop``), as
    in ``Consumer``.
    """

    def __init__(
        self,
        client: "AsyncClient",
        queue: str,
        handler: AsyncHandler,
        *,
        group: str = "",
        partition: Optional[str] = None,
        batch: int = 10,
        partitions: int = 1,
        concurrency: int = 1,
        wait_ms: int = 2000,
        lease_seconds: Optional[int] = None,
        renew_every: Optional[float] = None,
        subscription_mode: Optional[str] = None,
        subscription_from: Optional[Union[_dt.datetime, int, str]] = None,
        stop: Optional[asyncio.Event] = None,
        handle_signals: bool = True,
        retry_delay: float = 0.5,
        ack_async: bool = False,
        on_ack_error: Optional[AckErrorHandler] = None,
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
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
        self.handle_signals = handle_signals
        self.retry_delay = retry_delay
        self._stop = stop if stop is not None else asyncio.Event()
        self._fatal: Optional[BaseException] = None
        self._stats = ConsumeStats()
        self._keeper: Optional[AsyncLeaseKeeper] = None
        self.ack_async = ack_async
        self.on_ack_error = on_ack_error
        self._acks: Optional[AsyncAckBatcher] = None

    @property
    def stats(self) -> ConsumeStats:
        return self._stats

    def stop(self) -> None:
        self._stop.set()

    def _stopping(self) -> bool:
        return self._stop.is_set() or self._fatal is not None or self.client.draining

    async def run(self) -> ConsumeStats:
        restore = self._install_signals() if self.handle_signals else (lambda: None)
        self._keeper = AsyncLeaseKeeper(self.client, self.lease_seconds, self.renew_every)
        self._keeper.start()
        if self.ack_async:
            self._acks = AsyncAckBatcher(self.client, self.on_ack_error, self._fail, self._stats.add)
            self._acks.start()
        try:
            await asyncio.gather(*(self._work() for _ in range(self.concurrency)))
        finally:
            if self._acks is not None:
                await self._acks.close()  # the pending acks go before the leases are left to lapse
            await self._keeper.stop()
            restore()
        if self._fatal is not None:
            raise self._fatal
        if self.client.draining and not self._stop.is_set():
            raise DrainingError("the sidecar is shutting down; consume stopped")
        return self._stats

    def _install_signals(self) -> Callable[[], None]:
        if threading.current_thread() is not threading.main_thread():
            return lambda: None
        loop = asyncio.get_running_loop()
        previous: Dict[int, Any] = {}
        for sig in STOP_SIGNALS:
            try:
                handler = signal.getsignal(sig)
                loop.add_signal_handler(sig, self.stop)
                previous[sig] = handler
            except (NotImplementedError, RuntimeError, ValueError):
                pass

        def restore() -> None:
            for sig, handler in previous.items():
                # remove_signal_handler leaves SIG_DFL behind: put back
                # what was there (Python's own Ctrl-C handling, say).
                loop.remove_signal_handler(sig)
                signal.signal(sig, handler)

        return restore

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

    async def _pop(self, wait_ms: int) -> Optional[PopResult]:
        try:
            return await self.client.pop(self.queue, wait_ms=wait_ms, **self._pop_args())
        except QueensideError as exc:
            return await self._pop_failed(exc)

    async def _ack_and_pop(self, s: Settlement) -> Optional[PopResult]:
        """As Consumer._ack_and_pop."""
        stats = s.stats()
        try:
            res = await self.client.ack_and_pop(s.acks, self.queue, wait_ms=self.wait_ms, **self._pop_args())
        except QueensideError as exc:
            await self._settle(s)  # resent on their own: repeating an ack is safe
            return await self._pop_failed(exc)
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
            for work in split_by_lease(result):
                for message in work.messages:
                    if self._stopping():
                        settlement.give_back(work.lease)
                        break
                    with consumer_span(message, self.group) as span:
                        try:
                            outputs = self.handler(message)
                            if inspect.isawaitable(outputs):
                                outputs = await outputs
                        except Exception as exc:
                            span.fail(exc)
                            log.info("queenside: handler failed on %s/%s@%d: %s", message.queue, message.partition, message.offset, exc)
                            settlement.fail(message, exc)
                            break
                        except BaseException:
                            settlement.give_back(work.lease)
                            raise
                        settlement.complete(message, outputs)
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
