"""What the consume loops share: their options' checks and defaults, splitting
a pop by lease, the wait after a failure, and recording what the handlers
decided until the batch is settled with one ack (or one transaction) and
one release.

The rules, which keep per-partition order through failures:

- the messages of one lease are handled one after the other, in offset order;
  different leases of a pop may be handled at once (up to ``concurrency``
  handlers), so what the handlers decide is recorded under a lock;
- a handler that raises fails its message (a nack): the loop waits the
  failure backoff, holding the lease (renewed), then sends the failed ack;
  the sidecar rewinds the group's cursor to the message, so the rest of
  that lease is not handled now but delivered again, after the failed
  message;
- a stop (or the sidecar draining) between two messages gives the rest of
  the lease back with ``release``, which charges no retry budget.
"""

from __future__ import annotations

import inspect
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Dict, Iterable, List, Mapping, Optional, Union

from .errors import ConflictError, QueensideError
from .items import AckItem, PushItem
from .results import ALREADY_ACKED, ACK_ITEM_CODES, Lease, Message, PopResult
from .tracing import with_trace_context

__all__ = [
    "Handler",
    "AsyncHandler",
    "Backoff",
    "DEFAULT_FAILURE_BACKOFF",
    "LeaseWork",
    "split_by_lease",
    "Settlement",
    "ConsumeStats",
    "failure_reason",
    "check_handler",
    "check_concurrency",
    "MAX_CONCURRENCY",
    "check_options",
]

log = logging.getLogger("queenside")

# A handler returns nothing, or push items to commit in the same transaction
# as the message's ack (how a pipeline stage forwards its output).
HandlerResult = Optional[Iterable[PushItem]]
Handler = Callable[[Message], HandlerResult]
AsyncHandler = Callable[[Message], Union[HandlerResult, Awaitable[HandlerResult]]]

# The sidecar keeps at most 4 096 bytes of a failure reason.
_MAX_REASON = 4096


@dataclass(frozen=True)
class Backoff:
    """How long a consume loop waits after a handler failed, before the
    message is delivered again (seconds).

    After failure ``n`` of a message the loop waits
    ``min(initial * 2 ** (n - 1), max)``, holding the lease (renewed) so
    that nothing else of the partition is delivered meanwhile, then sends
    the failed ack, which charges the retry budget and redelivers the
    message. ``n`` is the lease's ``head_attempts`` when the message heads
    its lease, else 1. ``failure_backoff=None`` sends the failed ack at once.
    """

    initial: float = 1.0
    max: float = 60.0

    def __post_init__(self) -> None:
        if not 0 <= self.initial <= self.max:
            raise ValueError(f"Backoff needs 0 <= initial <= max, not initial={self.initial}, max={self.max}")

    def delay(self, failures: int) -> float:
        """The wait after the given number of failures (1 for the first)."""
        delay = self.initial
        for _ in range(max(failures, 1) - 1):
            if delay == 0 or delay >= self.max:
                break
            delay *= 2
        return min(delay, self.max)


DEFAULT_FAILURE_BACKOFF = Backoff()


def check_handler(handler: Any) -> None:
    """Refuse, before anything is sent, a consume without a handler."""
    if not callable(handler):
        kind = "None" if handler is None else type(handler).__name__
        raise TypeError(f"consume needs a handler: a function called with each message, not {kind}")


# The most handlers a loop runs at once: one a lease, and a pop leases at
# most 100 partitions, so a higher concurrency would never be used. The Go
# and Node clients have the same bound (clients/testdata/cases.json).
MAX_CONCURRENCY = 100


def check_concurrency(concurrency: int) -> None:
    """Refuse, before anything is sent, a concurrency out of 1..MAX_CONCURRENCY."""
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or not 1 <= concurrency <= MAX_CONCURRENCY:
        raise ValueError(f"concurrency must be an integer from 1 to {MAX_CONCURRENCY}, not {concurrency!r}")


def check_options(consumer: type, options: Mapping[str, Any]) -> None:
    """Refuse options the consumer class does not take, naming every one."""
    known = [name for name, p in inspect.signature(consumer.__init__).parameters.items() if p.kind is p.KEYWORD_ONLY]
    unknown = [name for name in options if name not in known]
    if unknown:
        names = ", ".join(unknown)
        raise TypeError(f"consume: unknown option{'s' if len(unknown) > 1 else ''} {names} (known: {', '.join(known)})")


def failures_of(lease: Lease, message: Message) -> int:
    """How many times the message has failed, counting this failure: the
    lease's ``head_attempts`` when it heads the lease, else 1."""
    if message.offset == lease.from_offset and lease.head_attempts > 1:
        return lease.head_attempts
    return 1


def log_failure(message: Message, exc: BaseException, failures: int, delay: float) -> None:
    """A handler's failure, at WARNING on the ``queenside`` logger; the fields
    are also the record's attributes (queue, partition, offset, error,
    failures, delay) for structured logging."""
    log.warning(
        "queenside: handler failed on %s/%s@%d (failure %d, retry in %gs): %s",
        message.queue,
        message.partition,
        message.offset,
        failures,
        delay,
        failure_reason(exc),
        exc_info=exc,
        extra={
            "queue": message.queue,
            "partition": message.partition,
            "offset": message.offset,
            "error": exc,
            "failures": failures,
            "delay": delay,
        },
    )


@dataclass
class LeaseWork:
    lease: Lease
    messages: List[Message]


def split_by_lease(result: PopResult) -> List[LeaseWork]:
    """The pop's messages grouped under their lease, in the order they came."""
    by_lease: Dict[str, List[Message]] = {}
    for message in result.messages:
        by_lease.setdefault(message.lease_id or "", []).append(message)
    return [LeaseWork(lease, by_lease.get(lease.lease_id, [])) for lease in result.leases]


def failure_reason(exc: BaseException) -> str:
    reason = f"{type(exc).__name__}: {exc}"
    encoded = reason.encode("utf-8", "replace")[:_MAX_REASON]
    return encoded.decode("utf-8", "ignore").replace("\x00", "")


def forwarded_items(outputs: Any) -> List[PushItem]:
    """A handler's return value as push items: None, one PushItem, or an iterable of them."""
    if outputs is None:
        return []
    if isinstance(outputs, PushItem):
        return [outputs]
    if not isinstance(outputs, (str, bytes, dict)):
        try:
            items = list(outputs)
        except TypeError:
            items = None
        if items is not None and all(isinstance(i, PushItem) for i in items):
            return items
    # A programming error, not a message failure: nacking would only send
    # every message round again.
    raise TypeError(f"a consume handler returns None or PushItems to forward, not {type(outputs).__name__}")


@dataclass
class ConsumeStats:
    """Counts of one consume run."""

    completed: int = 0
    failed: int = 0
    released_leases: int = 0
    # Ack items the sidecar refused (lease expired, transaction conflict):
    # those messages come again. An item answered already_acked is not
    # one: an earlier ack settled its message.
    lost_acks: int = 0
    # Settling calls that failed (sidecar unavailable, draining...).
    settle_errors: int = 0

    def add(self, other: "ConsumeStats") -> None:
        for name in self.__dataclass_fields__:
            setattr(self, name, getattr(self, name) + getattr(other, name))


@dataclass
class Settlement:
    """One batch's outcome, waiting to be sent.

    The handlers of a batch's leases may run at once on several threads,
    each recording its messages' outcome here: ``complete``, ``fail`` and
    ``give_back`` hold a lock, so that a completion and its forwarded items,
    or a failure and its message, are recorded together. The rest is read
    once every handler of the batch returned.
    """

    completed: List[AckItem] = field(default_factory=list)
    failed: List[AckItem] = field(default_factory=list)
    pushes: List[PushItem] = field(default_factory=list)
    release: List[str] = field(default_factory=list)
    # The messages of ``failed``, in the same order.
    failed_messages: List[Message] = field(default_factory=list)
    # When (time.monotonic()) the failure backoff of the batch ends: its
    # acks are not sent before.
    retry_at: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def complete(self, message: Message, outputs: Any) -> None:
        # Called while the message's span is current, so that what the
        # handler forwards carries that span's context, not the loop's.
        items = with_trace_context(forwarded_items(outputs))
        ack = message.completed()
        with self._lock:
            self.completed.append(ack)
            self.pushes.extend(items)

    def fail(self, message: Message, exc: BaseException, lease: Lease, backoff: Optional[Backoff]) -> None:
        """Record the handler's failure on message, log it, and put the
        batch's acks off by the backoff's delay for it."""
        failures = failures_of(lease, message)
        delay = backoff.delay(failures) if backoff is not None else 0.0
        log_failure(message, exc, failures, delay)
        ack = message.failed(failure_reason(exc))
        with self._lock:
            # failed and failed_messages stay index for index the same.
            self.failed.append(ack)
            self.failed_messages.append(message)
            self.retry_at = max(self.retry_at, time.monotonic() + delay)

    def give_back(self, lease: Lease) -> None:
        with self._lock:
            self.release.append(lease.lease_id)

    def only_completed(self) -> bool:
        """Whether every message completed and nothing is forwarded or given back:
        the batch an asynchronous ack may settle."""
        return bool(self.completed) and not self.failed and not self.pushes and not self.release

    def carriable(self) -> bool:
        """Whether the batch is settled by its acks alone (no push to commit
        with them, no lease to give back): the batch whose acks the next pop
        may carry (``ack_and_pop``), failures included."""
        return bool(self.completed or self.failed) and not self.pushes and not self.release

    @property
    def acks(self) -> List[AckItem]:
        return self.completed + self.failed

    def stats(self) -> ConsumeStats:
        return ConsumeStats(completed=len(self.completed), failed=len(self.failed), released_leases=len(self.release))

    def count_refused(self, results: Iterable[Any], stats: ConsumeStats) -> None:
        """Count and log the items the sidecar refused, and the messages dead-lettered.

        ``already_acked`` is no loss: an earlier ack settled the message
        (a repeat after a lost answer, say).
        """
        results = list(results)
        refused = [r for r in results if not r.success and r.code != ALREADY_ACKED]
        if refused:
            stats.lost_acks += len(refused)
            log.warning(
                "queenside: %d ack item(s) refused (%s); those messages will be delivered again",
                len(refused),
                ", ".join(sorted({f"{ACK_ITEM_CODES.get(str(r.code), r.code)} ({r.code})" for r in refused})),
            )
        for r in results:
            index = r.index - len(self.completed)
            if r.dead_lettered and 0 <= index < len(self.failed_messages):
                m = self.failed_messages[index]
                log.warning("queenside: %s/%s@%d dead-lettered: it failed past its queue's retry limit", m.queue, m.partition, m.offset)

    def on_settle_error(self, exc: QueensideError, stats: ConsumeStats) -> Optional[QueensideError]:
        """Record a failed settling call; return it when the consume loop must stop."""
        if isinstance(exc, ConflictError):
            # A lease ended under us: nothing committed, everything comes again.
            stats.lost_acks += len(self.acks)
            log.warning("queenside: transaction refused (%s); the batch will be delivered again", exc)
            return None
        stats.settle_errors += 1
        if exc.retryable:
            log.warning("queenside: could not settle a batch (%s); its messages will be delivered again", exc)
            return None
        # A non-retryable answer (say, a malformed push item) would come back
        # on every redelivery: stop rather than loop over it.
        return exc
