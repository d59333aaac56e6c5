"""Acks that do not hold the consume loop up (``ack_async=True``).

A consumer with ``ack_async`` hands the acks of a batch whose messages all
completed to an ``AckBatcher`` and pops again at once. At most one ack call
is in flight; the items added meanwhile, from any batch or lease, wait
and go together in the next call. A lease stays renewed until its ack
is answered, since an ack is only valid while its lease lives.

Nothing is retried and nothing is taken for a success that was not one:
items the sidecar refused, or the items of a call that failed, are
reported as an ``AckError`` (to ``on_ack_error``, or as the error that
ends the loop) and their messages will be delivered again.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import TYPE_CHECKING, Any, Callable, List, Optional, Sequence

from .consume_batch import ConsumeStats
from .errors import QueensideError
from .items import AckItem
from .results import ACK_ITEM_CODES, ALREADY_ACKED

if TYPE_CHECKING:
    from .async_client import AsyncClient
    from .client import Client

__all__ = ["AckError", "AckBatcher", "AsyncAckBatcher", "AckErrorHandler"]

log = logging.getLogger("queenside")


class AckError(Exception):
    """Ack items that did not succeed: the cursor did not move for them.

    ``items`` are the items; ``codes`` the sidecar's code for each
    (``lease_expired``, ``not_in_lease``...) when the call was answered, or
    None when the call itself failed, with that error in ``error``. An item
    answered ``already_acked`` is not one: an earlier ack settled it.
    """

    def __init__(self, items: Sequence[AckItem], codes: Optional[Sequence[Optional[str]]] = None, error: Optional[BaseException] = None) -> None:
        self.items = list(items)
        self.codes = list(codes) if codes is not None else None
        self.error = error
        if error is not None:
            text = f"ack of {len(self.items)} item(s) failed: {error}"
        else:
            reasons = sorted({f"{ACK_ITEM_CODES.get(str(c), c)} ({c})" for c in self.codes or []})
            text = f"{len(self.items)} ack item(s) refused: {', '.join(reasons)}"
        super().__init__(text + "; those messages will be delivered again")


AckErrorHandler = Callable[[AckError], Any]


class _Pending:
    """What both batchers share: the items waiting, and which were answered.

    Items are numbered as they are added; ``answered`` is the number of the
    last one whose call came back. Waiting for the items added so far (and
    not for everything, which the loop may keep adding to) is waiting for
    ``answered`` to reach ``added``.
    """

    def __init__(self, on_error: Optional[AckErrorHandler], fail: Callable[[BaseException], None], stats: Callable[[ConsumeStats], None]) -> None:
        self.items: List[AckItem] = []
        self.done: List[Callable[[], None]] = []
        self.added = 0
        self.answered = 0
        self.on_error = on_error
        self.fail = fail
        self.stats = stats

    def take(self):  # type: ignore[no-untyped-def]
        items, done, upto = self.items, self.done, self.added
        self.items, self.done = [], []
        return items, done, upto

    def outcome(self, items: List[AckItem], results: Optional[List[Any]], exc: Optional[QueensideError]) -> None:
        if exc is not None:
            failure = AckError(items, error=exc)
        else:
            refused = [
                (items[r.index], r.code)
                for r in results or []
                if not r.success and r.code != ALREADY_ACKED and 0 <= r.index < len(items)
            ]
            if not refused:
                return
            failure = AckError([i for i, _ in refused], [c for _, c in refused])
        self.stats(ConsumeStats(lost_acks=len(failure.items), settle_errors=1 if exc is not None else 0))
        if self.on_error is None:
            self.fail(failure)
            return
        try:
            self.on_error(failure)
        except Exception:  # the app's callback must not stop the acks of others
            log.exception("queenside: on_ack_error raised")


class AckBatcher:
    """The batcher of the threaded ``Consumer``: one thread sends the acks."""

    def __init__(self, client: "Client", on_error: Optional[AckErrorHandler], fail: Callable[[BaseException], None], stats: Callable[[ConsumeStats], None]) -> None:
        self._client = client
        self._p = _Pending(on_error, fail, stats)
        self._cond = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name="queenside-acks", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def add(self, items: List[AckItem], done: Optional[Callable[[], None]] = None) -> None:
        """Queue items; ``done`` is called once they were answered."""
        with self._cond:
            self._p.items.extend(items)
            self._p.added += len(items)
            if done is not None:
                self._p.done.append(done)
            self._cond.notify_all()

    @property
    def busy(self) -> bool:
        """Whether acks are waiting or in flight: their leases still hold partitions."""
        with self._cond:
            return self._p.answered < self._p.added

    def wait(self) -> None:
        """Return once every item added so far was answered."""
        with self._cond:
            upto = self._p.added
            while self._p.answered < upto and self._thread.is_alive():
                self._cond.wait(timeout=0.5)

    def close(self) -> None:
        """Send what is pending, then end the thread."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join()

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._p.items and not self._p.done and not self._closed:
                    self._cond.wait()
                if not self._p.items and not self._p.done:
                    return  # closed, and nothing left
                items, done, upto = self._p.take()
            results, exc = None, None
            if items:
                try:
                    results = self._client.ack(items, timeout=10.0).results
                except QueensideError as e:
                    exc = e
                self._p.outcome(items, results, exc)
            # Only now may renewals stop: a lapsed lease would refuse the ack.
            for f in done:
                f()
            with self._cond:
                self._p.answered = upto
                self._cond.notify_all()


class AsyncAckBatcher:
    """The batcher of ``AsyncConsumer``: one task sends the acks."""

    def __init__(self, client: "AsyncClient", on_error: Optional[AckErrorHandler], fail: Callable[[BaseException], None], stats: Callable[[ConsumeStats], None]) -> None:
        self._client = client
        self._p = _Pending(on_error, fail, stats)
        self._changed = asyncio.Event()
        self._closed = False
        self._task: Optional["asyncio.Task[None]"] = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop())

    def add(self, items: List[AckItem], done: Optional[Callable[[], None]] = None) -> None:
        self._p.items.extend(items)
        self._p.added += len(items)
        if done is not None:
            self._p.done.append(done)
        self._changed.set()

    @property
    def busy(self) -> bool:
        return self._p.answered < self._p.added

    async def wait(self) -> None:
        upto = self._p.added
        while self._p.answered < upto and self._task is not None and not self._task.done():
            self._changed.clear()
            await self._changed.wait()

    async def close(self) -> None:
        self._closed = True
        self._changed.set()
        if self._task is not None:
            await self._task

    async def _loop(self) -> None:
        while True:
            if not self._p.items and not self._p.done:
                if self._closed:
                    return
                self._changed.clear()
                await self._changed.wait()
                continue
            items, done, upto = self._p.take()
            results, exc = None, None
            if items:
                try:
                    results = (await self._client.ack(items, timeout=10.0)).results
                except QueensideError as e:
                    exc = e
                self._p.outcome(items, results, exc)
            for f in done:
                f()
            self._p.answered = upto
            self._changed.set()
