"""The synchronous consume loop.

Delivery is at least once: a message is acked only after its handler
returned, so a crash, a lease that lapses or a refused ack brings it back.
Make handlers idempotent on ``message.transaction_id``.
"""

from __future__ import annotations

import datetime as _dt
import logging
import queue as _queue
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Tuple, TypeVar, Union

from .ack_batcher import AckBatcher, AckErrorHandler
from .consume_batch import (
    DEFAULT_FAILURE_BACKOFF,
    Backoff,
    ConsumeStats,
    Handler,
    LeaseWork,
    Settlement,
    check_concurrency,
    check_handler,
    split_by_lease,
)
from .errors import ConnectionClosedError, DrainingError, QueensideError
from .lease_keeper import LeaseKeeper
from .results import AckResult, PopResult
from .stop_signals import install_stop_signals
from .tracing import consumer_span

if TYPE_CHECKING:
    from .client import Client

__all__ = ["Consumer", "ConsumeStats", "Handler"]

log = logging.getLogger("queenside")

T = TypeVar("T")

# How often the loop, waiting for a pop's answer or in a failure's backoff,
# looks whether it was asked to stop.
_STOP_POLL = 0.1


class _Caller:
    """Runs the loop's pops on a thread of their own, one at a time, so that
    the loop can stop waiting for one: a long-poll cannot be cut short on
    the wire, and a stop must not wait it out.

    A call the loop gave up on goes on until its answer comes; the loop's
    callback then gives back what it leased.
    """

    def __init__(self, name: str) -> None:
        self._calls: "_queue.SimpleQueue[Optional[Tuple[Callable[[], Any], Future[Any]]]]" = _queue.SimpleQueue()
        threading.Thread(target=self._loop, name=name, daemon=True).start()

    def submit(self, call: Callable[[], T]) -> "Future[T]":
        future: "Future[T]" = Future()
        self._calls.put((call, future))
        return future

    def close(self) -> None:
        """End the thread once the call in hand, if any, is answered."""
        self._calls.put(None)

    def _loop(self) -> None:
        while True:
            job = self._calls.get()
            if job is None:
                return
            call, future = job
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(call())
            except BaseException as exc:  # the loop raises it
                future.set_exception(exc)


class Consumer:
    """Pops ``queue`` for ``group`` and hands each message to ``handler``.

    - ``handler(message)`` returning normally completes the message; raising
      fails it (a nack: it comes again, after the retry budget is charged,
      and is dead-lettered past the queue's ``retryLimit``). Returning push
      items commits them in one transaction with the acks of the batch.
    - One loop pops; each pop's messages are grouped by lease (one lease,
      one partition). ``concurrency`` (1 to 100) is how many handlers run at
      once over the leases of a pop, on a pool of that many threads (with
      1, the default, in the loop's own thread, one message at a time in
      the order the pop returned them). A lease's messages go to one
      handler call after another, in offset order, never two at once in
      one partition; different leases are handled in parallel, so above 1
      the handler must be safe to call from several threads at once. Once
      every lease of the pop is done (failures' backoff included), the
      pop's acks are settled as below.
    - A handler's failure is logged at WARNING on the ``queenside`` logger
      (queue, partition, offset, the error, the failure count and the
      delay), then the loop waits ``failure_backoff`` (a ``Backoff``: 1 s,
      doubling up to 60 s, by default), holding the lease, before the
      failed ack is sent; ``failure_backoff=None`` sends it at once.
    - Leases are renewed while handlers run, and during a failure's backoff.
    - ``stop()``, the ``stop`` event, SIGINT or SIGTERM (when run in the main
      thread, unless ``stop_on_signals=False``) end the loop cleanly: the
      handlers in hand finish, what completed is acked, the rest of the
      leases is released to other consumers. The first signal stops the
      loop and puts the previous handlers back, so a second Ctrl-C
      interrupts as usual.
      A stop does not wait out a pop's long-poll: the loop stops waiting for
      its answer at once, and gives back what that answer leased when it
      comes. A stop during a failure's backoff ends the wait and sends the
      failed ack at once.
    - ``run()`` returns the counts after a requested stop. It raises
      ``DrainingError`` when the sidecar began shutting down, and the error
      that ended it otherwise (a lost connection, a non-retryable answer).
    - ``ack_async=True`` sends the acks of batches whose messages all
      completed from a thread of their own, while the next pop is already
      in flight. At most one ack call is in flight; what completes
      meanwhile, in any batch, goes together in the next call.
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
      before the next pop; when the loop stops, acks not carried yet are
      sent with a plain ``ack`` before ``run()`` returns.
    """

    def __init__(
        self,
        client: "Client",
        queue: str,
        handler: Handler,
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
        stop: Optional[threading.Event] = None,
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
        self._stop = stop if stop is not None else threading.Event()
        self._fatal: Optional[BaseException] = None
        self._stats = ConsumeStats()
        self._stats_lock = threading.Lock()
        self._keeper: Optional[LeaseKeeper] = None
        self.ack_async = ack_async
        self.on_ack_error = on_ack_error
        self._acks: Optional[AckBatcher] = None
        # The threads handlers run on when concurrency is above 1, made by run().
        self._pool: Optional[ThreadPoolExecutor] = None

    @property
    def stats(self) -> ConsumeStats:
        return self._stats

    def stop(self) -> None:
        """Ask the loop to stop; ``run()`` returns once the batches in hand are settled."""
        self._stop.set()

    def _stopping(self) -> bool:
        return self._stop.is_set() or self._fatal is not None or self.client.draining

    def run(self) -> ConsumeStats:
        restore = install_stop_signals(self.stop) if self.stop_on_signals else (lambda: None)
        self._keeper = LeaseKeeper(self.client, self.lease_seconds, self.renew_every)
        self._keeper.start()
        if self.ack_async:
            self._acks = AckBatcher(self.client, self.on_ack_error, self._fail, self._add_stats)
            self._acks.start()
        if self.concurrency > 1:
            self._pool = ThreadPoolExecutor(self.concurrency, thread_name_prefix="queenside-handler")
        loop = threading.Thread(target=self._work, name="queenside-consume", daemon=True)
        try:
            loop.start()
            # Joined with a timeout so that the main thread gets to run
            # signal handlers while the loop waits on the socket.
            while loop.is_alive():
                loop.join(timeout=0.2)
        finally:
            if self._acks is not None:
                self._acks.close()  # the pending acks go before the leases are left to lapse
            self._keeper.stop()
            if self._pool is not None:
                # The loop waits for every handler of a batch: none is left
                # but when run() itself was interrupted, and those finish on
                # their own.
                self._pool.shutdown(wait=False)
                self._pool = None
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
        caller = _Caller("queenside-consume-pop")
        try:
            while not self._stopping():
                # Pending acks hold their leases' partitions, and a lease
                # ended by an ack wakes no waiting pop: look without waiting
                # then, and wait for those acks if nothing came.
                waiting_acks = self._acks is not None and self._acks.busy
                if carried is not None:
                    sending, carried = carried, None
                    result = self._ack_and_pop(caller, sending)
                else:
                    result = self._pop(caller, 0 if waiting_acks else self.wait_ms)
                if result is not None and result.leases:
                    carried = self._handle(result)
                elif waiting_acks and result is not None:
                    assert self._acks is not None
                    self._acks.wait()
            if carried is not None:
                self._settle(carried)  # stopping: no next pop will carry them
        except BaseException as exc:  # ends the whole loop, reported by run()
            self._fail(exc)
        finally:
            caller.close()

    def _await(self, caller: _Caller, call: Callable[[], T], late: Callable[[T], None]) -> Optional[T]:
        """call's answer, made on the caller's thread; None when the loop was
        asked to stop first: ``late`` then gets the answer when it comes."""
        future = caller.submit(call)
        while not future.done():
            if self._stop.is_set():
                future.add_done_callback(lambda f: None if f.cancelled() or f.exception() else late(f.result()))
                return None
            wait([future], timeout=_STOP_POLL)
        return future.result()

    def _give_back_late(self, pop: Optional[PopResult]) -> None:
        """Releases the leases of a pop whose answer came after the loop stopped waiting for it."""
        if pop is None or not pop.leases:
            return
        try:
            self.client.release([lease.lease_id for lease in pop.leases])
        except QueensideError as exc:
            log.warning("queenside: release failed (%s); those leases will expire", exc)

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

    def _pop(self, caller: _Caller, wait_ms: int) -> Optional[PopResult]:
        try:
            return self._await(caller, lambda: self.client.pop(self.queue, wait_ms=wait_ms, **self._pop_args()), self._give_back_late)
        except QueensideError as exc:
            return self._pop_failed(exc)

    def _ack_and_pop(self, caller: _Caller, s: Settlement) -> Optional[PopResult]:
        """Sends a batch's acks with the next pop; None when the pop brought nothing to handle."""
        stats = s.stats()

        def late(res: AckResult) -> None:
            # The acks were applied all the same: the sidecar applies an
            # ack whether or not its answer is waited for.
            s.count_refused(res.results, ConsumeStats())
            self._give_back_late(res.pop)

        try:
            res = self._await(caller, lambda: self.client.ack_and_pop(s.acks, self.queue, wait_ms=self.wait_ms, **self._pop_args()), late)
        except QueensideError as exc:
            # Nothing says whether the acks were applied, and sending them
            # again is safe (PROTOCOL.md, ack): settle the batch as a plain
            # ack would, then treat the error as a failed pop's.
            self._settle(s)
            return self._pop_failed(exc)
        if res is None:  # stopping: the answer is late's
            self._add_stats(stats)
            return None
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
            self._handle_leases(split_by_lease(result), settlement)
            self._wait_until(settlement.retry_at)  # the failures' backoff, the leases renewed
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

    def _handle_leases(self, works: List[LeaseWork], settlement: Settlement) -> None:
        """Hands every lease of a pop to the handler, and returns once all are
        done: one after the other in this thread (concurrency 1), else on
        the pool, up to ``concurrency`` leases at once."""
        if self._pool is None:
            for work in works:
                self._handle_lease(work, settlement)
            return
        futures = [self._pool.submit(self._handle_lease_apart, work, settlement) for work in works]
        wait(futures)
        for future in futures:
            future.result()  # the error that ended a lease ends the loop

    def _handle_lease_apart(self, work: LeaseWork, settlement: Settlement) -> None:
        """_handle_lease on a pool thread. An error that escapes it (a
        handler's BaseException, a handler returning something else than
        push items) stops the loop at once, so that the other leases of the
        pop start nothing more and give their rest back."""
        try:
            self._handle_lease(work, settlement)
        except BaseException as exc:
            self._fail(exc)
            raise

    def _handle_lease(self, work: LeaseWork, settlement: Settlement) -> None:
        """Hands a lease's messages to the handler one after the other, in
        offset order, until a failure or a stop."""
        for message in work.messages:
            if self._stopping():
                settlement.give_back(work.lease)
                return
            with consumer_span(message, self.group) as span:
                try:
                    outputs = self.handler(message)
                except Exception as exc:
                    span.fail(exc)
                    settlement.fail(message, exc, work.lease, self.failure_backoff)
                    return  # the rest of this lease comes again after the rewind
                except BaseException:
                    settlement.give_back(work.lease)
                    raise
                settlement.complete(message, outputs)

    def _wait_until(self, deadline: float) -> None:
        """Until time.monotonic() reaches deadline, or the loop is stopping."""
        while not self._stopping():
            left = deadline - time.monotonic()
            if left <= 0:
                return
            self._stop.wait(min(left, _STOP_POLL))

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
