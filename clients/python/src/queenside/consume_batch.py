"""What the consume loops share: splitting a pop by lease, and recording what
the handlers decided until the batch is settled with one ack (or one
transaction) and one release.

The rules, which keep per-partition order through failures:

- the messages of one lease are handled one after the other, in offset order;
- a handler that raises fails its message (a nack): the sidecar rewinds the
  group's cursor to it, so the rest of that lease is not handled now but
  delivered again, after the failed message;
- a stop (or the sidecar draining) between two messages gives the rest of
  the lease back with ``release``, which charges no retry budget.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Dict, Iterable, List, Optional, Union

from .errors import ConflictError, QueensideError
from .items import AckItem, PushItem
from .results import Lease, Message, PopResult
from .tracing import with_trace_context

__all__ = ["Handler", "AsyncHandler", "LeaseWork", "split_by_lease", "Settlement", "ConsumeStats", "failure_reason"]

log = logging.getLogger("queenside")

# A handler returns nothing, or push items to commit in the same transaction
# as the message's ack (how a pipeline stage forwards its output).
HandlerResult = Optional[Iterable[PushItem]]
Handler = Callable[[Message], HandlerResult]
AsyncHandler = Callable[[Message], Union[HandlerResult, Awaitable[HandlerResult]]]

# The sidecar keeps at most 4 096 bytes of a failure reason.
_MAX_REASON = 4096


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
    # those messages come again.
    lost_acks: int = 0
    # Settling calls that failed (sidecar unavailable, draining...).
    settle_errors: int = 0

    def add(self, other: "ConsumeStats") -> None:
        for name in self.__dataclass_fields__:
            setattr(self, name, getattr(self, name) + getattr(other, name))


@dataclass
class Settlement:
    """One batch's outcome, waiting to be sent."""

    completed: List[AckItem] = field(default_factory=list)
    failed: List[AckItem] = field(default_factory=list)
    pushes: List[PushItem] = field(default_factory=list)
    release: List[str] = field(default_factory=list)

    def complete(self, message: Message, outputs: Any) -> None:
        # Called while the message's span is current, so that what the
        # handler forwards carries that span's context, not the loop's.
        items = with_trace_context(forwarded_items(outputs))
        self.completed.append(message.completed())
        self.pushes.extend(items)

    def fail(self, message: Message, exc: BaseException) -> None:
        self.failed.append(message.failed(failure_reason(exc)))

    def give_back(self, lease: Lease) -> None:
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
        refused = [r for r in results if not r.success]
        if refused:
            stats.lost_acks += len(refused)
            log.warning(
                "queenside: %d ack item(s) refused (%s); those messages will be delivered again",
                len(refused),
                ", ".join(sorted({str(r.code) for r in refused})),
            )

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
