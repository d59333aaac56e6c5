"""The synchronous consume loop.

Delivery is at least once: a message is acked only after its handler
returned, so a crash, a lease that lapses or a refused ack brings it back.
Make handlers idempotent on ``message.transaction_id``.
"""

from __future__ import annotations

import datetime as _dt
import logging
import threading
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Union

from .ack_batcher import AckBatcher, AckErrorHandler
from .consume_batch import ConsumeStats, Handler, Settlement, split_by_lease
from .errors import ConnectionClosedError, DrainingError, QueensideError
from .lease_keeper import LeaseKeeper
from .results import PopResult
from .stop_signals import install_stop_signals
from .tracing import consumer_span

if TYPE_CHECKING:
    from .client import Client

__all__ = ["Consumer", "ConsumeStats", "Handler"]

log = logging.getLogger("queenside")


class Consumer:
    """Pops ``queue`` for ``group`` and hands each message to ``handler``.

    - ``handler(message)`` returning normally completes the message; raising
      fails it (a nack: it comes again, after the retry budget is charged,
      and is dead-lettered past the queue's ``retryLimit``). Returning push
      items commits them in one transaction with the acks of the batch.
    - ``concurrency`` threads each pop and handle their own batches; the
      messages of one partition are never handled at once by two threads,
      and always in offset order.
    - Leases are renewed while handlers run.
    - ``stop()``, the ``stop`` event, SIGINT or SIGTERM (when run in the main
      thread with ``handle_signals``) end the loop cleanly: the message in
      hand finishes, what completed is acked, the rest is released to other
      consumers. A stop takes at most ``wait_ms`` plus the message in hand.
    - ``run()`` returns the counts after a requested stop. It raises
      ``DrainingError`` when the sidecar began shutting down, and the error
      that ended it otherwise (a lost connection, a non-retryable answer).
    - ``ack_async=True`` sends the acks of batches whose messages all
      completed from a thread of their own, while the next pop is already
      in flight. At most one ack call is in flight; what completes
      meanwhile, in any batch or worker, goes together in the next call.
      Leases are renewed until their ack is answered. A batch with a
      failure (a nack), a release or forwarded push items is settled on
      its own, before the next pop. A failed ack (refused items, or a
      call that failed) is passed as an ``AckError`` to
      ``on_ack_error(error)``, called from the ack thread; without that
      callback it ends the loop and ``run()`` raises it. Either way its
      messages will be delivered again. Stopping sends the pending acks
      before ``run()`` returns.
    - Without ``ack_async``, a batch's acks (completions and failures
      alike) go with the next pop, in one request (``ack_and_pop``: one
      round trip and one transaction a batch; protocol revision 1.2). A
      batch with forwarded push items or a release is settled on its own,
      as before; when the loop stops, acks not carried yet are sent with a
      plain ``ack`` before ``run()`` returns.
    """

    def __init__(
        self,
        client: "Client",
        queue: str,
        handler: Handler,
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
        stop: Optional[threading.Event] = None,
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
        self._stop = stop if stop is not None else threading.Event()
        self._fatal: Optional[BaseException] = None
        self._stats = ConsumeStats()
        self._stats_lock = threading.Lock()
        self._keeper: Optional[LeaseKeeper] = None
        self.ack_async = ack_async
        self.on_ack_error = on_ack_error
        self._acks: Optional[AckBatcher] = None

    @property
    def stats(self) -> ConsumeStats:
        return self._stats

    def stop(self) -> None:
        """Ask the loop to stop; ``run()`` returns once the batches in hand are settled."""
        self._stop.set()

    def _stopping(self) -> bool:
        return self._stop.is_set() or self._fatal is not None or self.client.draining

    def run(self) -> ConsumeStats:
        restore = install_stop_signals(self.stop) if self.handle_signals else (lambda: None)
        self._keeper = LeaseKeeper(self.client, self.lease_seconds, self.renew_every)
        self._keeper.start()
        if self.ack_async:
            self._acks = AckBatcher(self.client, self.on_ack_error, self._fail, self._add_stats)
            self._acks.start()
        workers: List[threading.Thread] = [
            threading.Thread(target=self._work, name=f"queenside-consume-{i}", daemon=True) for i in range(self.concurrency)
        ]
        try:
            for w in workers:
                w.start()
            for w in workers:
                # Joined with a timeout so that the main thread gets to run
                # signal handlers while the workers wait on the socket.
                while w.is_alive():
                    w.join(timeout=0.2)
        finally:
            if self._acks is not None:
                self._acks.close()  # the pending acks go before the leases are left to lapse
            self._keeper.stop()
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

    def _add_stats(self, stats: ConsumeStats) -> None:
        with self._stats_lock:
            self._stats.add(stats)

    def _work(self) -> None:
        # The settled batch whose acks the next pop carries (without ack_async).
        carried: Optional[Settlement] = None
        try:
            while not self._stopping():
                # Pending acks hold their leases' partitions, and a lease
                # ended by an ack wakes no waiting pop: look without waiting
                # then, and wait for those acks if nothing came.
                waiting_acks = self._acks is not None and self._acks.busy
                if carried is not None:
                    sending, carried = carried, None
                    result = self._ack_and_pop(sending)
                else:
                    result = self._pop(0 if waiting_acks else self.wait_ms)
                if result is not None and result.leases:
                    carried = self._handle(result)
                elif waiting_acks and result is not None:
                    assert self._acks is not None
                    self._acks.wait()
            if carried is not None:
                self._settle(carried)  # stopping: no next pop will carry them
        except BaseException as exc:  # ends the whole loop, reported by run()
            self._fail(exc)

    def _pop_args(self) -> Dict[str, Any]:
        """The pop's arguments (wait_ms aside), the same alone or carried by an ack."""
        return dict(
            group=self.group,
            partition=self.partition,
            batch=self.batch,
            partitions=self.partitions,
            lease_seconds=self.lease_seconds,
            subscription_mode=self.subscription_mode,
            subscription_from=self.subscription_from,
        )

    def _pop(self, wait_ms: int) -> Optional[PopResult]:
        try:
            return self.client.pop(self.queue, wait_ms=wait_ms, **self._pop_args())
        except QueensideError as exc:
            return self._pop_failed(exc)

    def _ack_and_pop(self, s: Settlement) -> Optional[PopResult]:
        """Sends a batch's acks with the next pop; None when the pop brought nothing to handle."""
        stats = s.stats()
        try:
            res = self.client.ack_and_pop(s.acks, self.queue, wait_ms=self.wait_ms, **self._pop_args())
        except QueensideError as exc:
            # Nothing says whether the acks were applied, and sending them
            # again is safe (PROTOCOL.md, ack): settle the batch as a plain
            # ack would, then treat the error as a failed pop's.
            self._settle(s)
            return self._pop_failed(exc)
        s.count_refused(res.results, stats)
        self._add_stats(stats)
        if res.pop_error is not None:  # the acks were applied, the pop was not
            return self._pop_failed(res.pop_error)
        return res.pop

    def _pop_failed(self, exc: QueensideError) -> Optional[PopResult]:
        """What a failed pop does to the loop: raise what waiting cannot
        mend, or pause and return None so that the loop tries again."""
        if isinstance(exc, DrainingError):
            return None  # the draining flag ends the loop
        if self._stopping():
            return None
        if isinstance(exc, ConnectionClosedError) or not exc.retryable:
            raise exc
        log.warning("queenside: pop %s failed (%s); trying again", self.queue, exc)
        self._stop.wait(self.retry_delay)
        return None

    def _handle(self, result: PopResult) -> Optional[Settlement]:
        """Runs the handlers over one pop; returns the settlement for the
        next pop to carry, or None when the batch was settled here."""
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
                        except Exception as exc:
                            span.fail(exc)
                            log.info("queenside: handler failed on %s/%s@%d: %s", message.queue, message.partition, message.offset, exc)
                            settlement.fail(message, exc)
                            break  # the rest of this lease comes again after the rewind
                        except BaseException:
                            settlement.give_back(work.lease)
                            raise
                        settlement.complete(message, outputs)
            carry = self._acks is None and settlement.carriable()
        finally:
            if self._acks is not None and settlement.only_completed():
                # Renewed until the ack is answered: it is only valid while
                # the lease lives.
                keeper = self._keeper
                self._add_stats(settlement.stats())
                self._acks.add(settlement.completed, lambda: keeper.untrack(result.leases))
            else:
                # Untracked first: the acks end the leases, and a renewal racing
                # them would only log a spurious lease_expired. A third of the
                # lease at least is left, plenty for one call, which a carried
                # ack is too: the loop sends it as soon as this returns.
                self._keeper.untrack(result.leases)
                if not carry:
                    self._settle(settlement)
        return settlement if carry else None

    def _settle(self, s: Settlement) -> None:
        stats = s.stats()
        fatal: Optional[QueensideError] = None
        if s.acks:
            try:
                if s.pushes:
                    s.count_refused(self.client.transaction(s.acks, s.pushes).acks, stats)
                else:
                    s.count_refused(self.client.ack(s.acks).results, stats)
            except QueensideError as exc:
                fatal = s.on_settle_error(exc, stats)
        if s.release:
            try:
                self.client.release(s.release)
            except QueensideError as exc:
                # Unreleased leases just expire; nothing is lost.
                log.warning("queenside: release failed (%s); those leases will expire", exc)
        with self._stats_lock:
            self._stats.add(stats)
        if fatal is not None:
            raise fatal
