"""Renews the leases of messages still being handled, as an asyncio task
(the counterpart of ``lease_keeper``)."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Dict, Iterable, List, Optional

from .errors import QueensideError
from .lease_keeper import renew_interval
from .results import Lease

if TYPE_CHECKING:
    from .async_client import AsyncClient

__all__ = ["AsyncLeaseKeeper"]

log = logging.getLogger("queenside")

_MAX_IDS_PER_CALL = 1000


class AsyncLeaseKeeper:
    def __init__(self, client: "AsyncClient", lease_seconds: Optional[int] = None, every: Optional[float] = None) -> None:
        self._client = client
        self._seconds = lease_seconds
        self._every = every
        self._due: Dict[str, float] = {}
        self._interval: Dict[str, float] = {}
        self._changed = asyncio.Event()
        self._task: Optional["asyncio.Task[None]"] = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass

    def track(self, leases: Iterable[Lease]) -> None:
        now = asyncio.get_running_loop().time()
        for lease in leases:
            interval = renew_interval(lease, self._seconds, self._every)
            self._interval[lease.lease_id] = interval
            self._due[lease.lease_id] = now + interval
        self._changed.set()

    def untrack(self, leases: Iterable[Lease]) -> None:
        for lease in leases:
            self._due.pop(lease.lease_id, None)
            self._interval.pop(lease.lease_id, None)

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            now = loop.time()
            due = [lid for lid, at in self._due.items() if at <= now]
            if due:
                for lid in due:
                    self._due[lid] = now + self._interval[lid]
                await self._renew(due)
                continue
            nearest = min(self._due.values(), default=now + 60.0)
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), timeout=max(nearest - now, 0.01))
            except asyncio.TimeoutError:
                pass

    async def _renew(self, lease_ids: List[str]) -> None:
        for start in range(0, len(lease_ids), _MAX_IDS_PER_CALL):
            chunk = lease_ids[start : start + _MAX_IDS_PER_CALL]
            try:
                results = await self._client.renew(chunk, self._seconds)
            except QueensideError as exc:
                log.warning("queenside: renewing %d lease(s) failed: %s", len(chunk), exc)
                continue
            for r in results:
                if not r.success:
                    log.warning("queenside: lease %s could not be renewed (%s); its messages will come again", r.lease_id, r.code)
