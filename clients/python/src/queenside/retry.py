"""Retries of calls answered ``unavailable`` or ``draining``: the rule, and the pauses.

The rule is the same in the three clients (clients/README.md, "Retries"):
a call is sent again by the client itself only when sending it again
cannot do harm.

- ``draining``: the sidecar refused the request before serving it, so
  nothing was done, whatever the operation.
- ``unavailable``: the sidecar may have been half-way through it (a commit
  whose answer was lost), so only a call a repeat cannot make do more is
  sent again: those in ``_IDEMPOTENT``. Pop, ack, renew, release,
  transaction, seek, deleteGroup, dlqReplay, dlqDelete and maintenance
  changes are not.

Any other answer, and a lost connection, is the caller's to handle.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, Mapping, Optional

__all__ = ["RetryPolicy", "DEFAULT_RETRY", "may_retry", "Pauses", "Attempts"]


@dataclass(frozen=True)
class RetryPolicy:
    """How a call is sent again when ``may_retry`` allows it (seconds).

    Pauses start at ``initial_delay`` and double up to ``max_delay``, each
    drawn between half and all of that, so that clients refused together
    do not come back together. A call is retried until its ``timeout``; one
    without a timeout until ``max_elapsed`` after it began. No attempt
    starts later: the call then raises the last answer.
    """

    initial_delay: float = 0.05
    max_delay: float = 1.0
    max_elapsed: float = 5.0


DEFAULT_RETRY = RetryPolicy()

Args = Optional[Mapping[str, Any]]


def _always(_args: Args) -> bool:
    return True


def _every_item_has_transaction_id(args: Args) -> bool:
    # A repeat of an item with a transaction id is answered duplicate; one
    # the sidecar named itself would be stored twice.
    items = (args or {}).get("items") or []
    return all(isinstance(item, Mapping) and item.get("transactionId") for item in items)


def _reads_only(args: Args) -> bool:
    # maintenance without arguments only reads the state.
    return not args


# The operations a repeat cannot make do more, each with the condition on
# its (wire) arguments.
_IDEMPOTENT: Dict[str, Callable[[Args], bool]] = {
    "hello": _always,
    "health": _always,
    "configure": _always,  # it sets every option to what it is given
    "queues": _always,
    "stats": _always,
    "groups": _always,
    "dlq": _always,
    "dlqSummary": _always,
    "push": _every_item_has_transaction_id,
    "maintenance": _reads_only,
}


def may_retry(op: str, args: Args, code: str) -> bool:
    """Whether a call of ``op`` with ``args`` answered ``code`` may be sent again."""
    if code == "draining":
        return True
    if code == "unavailable":
        ok = _IDEMPOTENT.get(op)
        return ok is not None and ok(args)
    return False


class Pauses:
    """The pauses between the attempts of one call, and its deadline."""

    def __init__(self, policy: RetryPolicy, timeout: Optional[float], started: float) -> None:
        self._policy = policy
        self._delay = policy.initial_delay
        self.deadline = started + (policy.max_elapsed if timeout is None else timeout)

    def next_pause(self) -> Optional[float]:
        """The pause before the next attempt; None when it would start after the deadline."""
        pause = self._delay / 2 + random.uniform(0, self._delay / 2)
        self._delay = min(2 * self._delay, self._policy.max_delay)
        return pause if time.monotonic() + pause < self.deadline else None

    def remaining(self) -> float:
        """What is left of the deadline: the next attempt's timeout."""
        return self.deadline - time.monotonic()


class Attempts:
    """The attempts of one call: what timeout each carries, and whether,
    and after what pause, another follows an error. Both clients run their
    calls through one of these."""

    def __init__(self, policy: Optional[RetryPolicy], op: str, args: Args, timeout: Optional[float]) -> None:
        self._policy = policy
        self._op = op
        self._args = args
        self._timeout = timeout
        self._started = time.monotonic()
        self._pauses: Optional[Pauses] = None

    def timeout(self) -> Optional[float]:
        """The next attempt's timeout: what is left of the call's."""
        if self._timeout is None or self._pauses is None:
            return self._timeout
        return max(self._pauses.remaining(), 0.001)

    def pause_after(self, code: str, drain_announced: bool) -> Optional[float]:
        """The pause before sending the call again, or None to give the caller the error.

        After the sidecar's drain notice on the connection, no answer on it
        will change: the caller should go to another sidecar, at once.
        """
        if self._policy is None or drain_announced or not may_retry(self._op, self._args, code):
            return None
        if self._pauses is None:
            self._pauses = Pauses(self._policy, self._timeout, self._started)
        return self._pauses.next_pause()
