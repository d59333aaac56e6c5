"""Renews the leases of messages still being handled, from a thread of its own.

A lease that expires while its handler still runs sends the whole span to
another consumer. The keeper renews each tracked lease every third of its
length (or every ``every`` seconds), so a slow handler keeps what it holds.
"""

from __future__ import annotations

import datetime as _dt
import logging
import threading
import time
from typing import TYPE_CHECKING, Dict, Iterable, List, Optional

from .errors import QueensideError
from .results import Lease

if TYPE_CHECKING:
    from .client import Client

__all__ = ["LeaseKeeper", "renew_interval"]

log = logging.getLogger("queenside")

_MIN_INTERVAL = 0.2
_MAX_IDS_PER_CALL = 1000


def renew_interval(lease: Lease, lease_seconds: Optional[int], every: Optional[float]) -> float:
    """How often to renew lease: ``every``, else a third of its length."""
    if every:
        return max(every, _MIN_INTERVAL)
    if lease_seconds:
        return max(lease_seconds / 3.0, _MIN_INTERVAL)
    left = (lease.expires_at - _dt.datetime.now(_dt.timezone.utc)).total_seconds()
    return max(left / 3.0, _MIN_INTERVAL)


class LeaseKeeper:
    def __init__(self, client: "Client", lease_seconds: Optional[int] = None, every: Optional[float] = None) -> None:
        self._client = client
        self._seconds = lease_seconds
        self._every = every
        self._due: Dict[str, float] = {}
        self._interval: Dict[str, float] = {}
        self._cond = threading.Condition()
        self._stopped = False
        self._thread = threading.Thread(target=self._loop, name="queenside-lease-keeper", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        self._thread.join(timeout=10)

    def track(self, leases: Iterable[Lease]) -> None:
        now = time.monotonic()
        with self._cond:
            for lease in leases:
                interval = renew_interval(lease, self._seconds, self._every)
                self._interval[lease.lease_id] = interval
                self._due[lease.lease_id] = now + interval
            self._cond.notify_all()

    def untrack(self, leases: Iterable[Lease]) -> None:
        with self._cond:
            for lease in leases:
                self._due.pop(lease.lease_id, None)
                self._interval.pop(lease.lease_id, None)

    def _loop(self) -> None:
        while True:
            with self._cond:
                due = self._wait_for_due()
                if due is None:
                    return
            self._renew(due)

    def _wait_for_due(self) -> Optional[List[str]]:
        """Block until some lease is due (return their ids) or the keeper stops (None)."""
        while not self._stopped:
            now = time.monotonic()
            due = [lid for lid, at in self._due.items() if at <= now]
            if due:
                for lid in due:
                    self._due[lid] = now + self._interval[lid]
                return due
            nearest = min(self._due.values(), default=now + 60.0)
            self._cond.wait(timeout=max(nearest - now, 0.01))
        return None

    def _renew(self, lease_ids: List[str]) -> None:
        for start in range(0, len(lease_ids), _MAX_IDS_PER_CALL):
            chunk = lease_ids[start : start + _MAX_IDS_PER_CALL]
            try:
                results = self._client.renew(chunk, self._seconds)
            except QueensideError as exc:
                # A lost renewal shows later as lease_expired on the ack.
                log.warning("queenside: renewing %d lease(s) failed: %s", len(chunk), exc)
                continue
            for r in results:
                if not r.success:
                    log.warning("queenside: lease %s could not be renewed (%s); its messages will come again", r.lease_id, r.code)
