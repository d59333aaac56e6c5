"""Acks that do not wait (``ack_async=True``), in both consume loops, against a real sidecar."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, Dict, List, Set

import pytest

import queenside
from queenside import AckError, AsyncClient, Client, Message, PushItem

from harness import Sidecar


def push_spread(client: Client, queue: str, n: int, partitions: int) -> None:
    for start in range(0, n, 500):
        client.push([PushItem(queue, i, partition=f"p{i % partitions}", transaction_id=f"m-{i}") for i in range(start, min(n, start + 500))])


# Acks are slowed down in the tests that count them: while one is in
# flight the loop handles the next batches, whose acks must then share a
# call. Without the delay, on a fast machine, each ack could be answered
# before the next batch completes, and nothing would need coalescing.
ACK_DELAY = 0.02


def count_acks(client: Any) -> List[int]:
    """Counts the ack calls made on client (one element per call: its item count)."""
    calls: List[int] = []
    real = client.ack

    def ack(items: Any, **kw: Any) -> Any:
        items = list(items)
        calls.append(len(items))
        time.sleep(ACK_DELAY)
        return real(items, **kw)

    client.ack = ack
    return calls


def count_acks_async(client: AsyncClient) -> List[int]:
    calls: List[int] = []
    real = client.ack

    async def ack(items: Any, **kw: Any) -> Any:
        items = list(items)
        calls.append(len(items))
        await asyncio.sleep(ACK_DELAY)
        return await real(items, **kw)

    client.ack = ack  # type: ignore[method-assign]
    return calls


def assert_consumed(client: Client, queue: str, group: str) -> None:
    groups = [g for p in client.stats(queue).partitions for g in p.groups if g.group == group]
    assert groups and all(g.lag == 0 and not g.leased for g in groups)
    assert client.pop(queue, group=group, batch=100, partitions=100).messages == []


def test_every_message_is_acked_once_in_fewer_calls(client: Client, queue: str) -> None:
    n = 2000
    push_spread(client, queue, n, partitions=10)
    calls = count_acks(client)
    stop = threading.Event()
    seen: Dict[str, int] = {}
    leases: Set[str] = set()
    errors: List[AckError] = []

    def handler(m: Message) -> None:
        seen[m.transaction_id] = seen.get(m.transaction_id, 0) + 1
        leases.add(m.lease_id or "")
        if len(seen) == n:
            stop.set()

    stats = client.consume(queue, handler, group="g", batch=10, stop=stop, wait_ms=500, ack_async=True, on_ack_error=errors.append)
    assert errors == []
    assert len(seen) == n and set(seen.values()) == {1}
    assert stats.completed == n and stats.lost_acks == 0
    assert sum(calls) == n
    assert len(calls) < len(leases), f"{len(calls)} ack calls for {len(leases)} batches"
    assert_consumed(client, queue, "g")


def test_a_stop_right_after_handling_sends_the_pending_acks(client: Client, queue: str) -> None:
    push_spread(client, queue, 10, partitions=1)
    stop = threading.Event()

    def handler(m: Message) -> None:
        if m.offset == 9:
            stop.set()

    stats = client.consume(queue, handler, group="g", batch=10, lease_seconds=60, stop=stop, wait_ms=500, ack_async=True)
    assert stats.completed == 10
    assert_consumed(client, queue, "g")


def test_a_nack_and_a_stop_mid_batch_keep_their_meaning(client: Client, queue: str) -> None:
    push_spread(client, queue, 10, partitions=1)
    stop = threading.Event()
    handled: List[int] = []

    def handler(m: Message) -> None:
        handled.append(m.offset)
        if m.offset == 3 and not m.redelivered:
            raise RuntimeError("once")
        if m.offset == 6:
            stop.set()

    stats = client.consume(queue, handler, group="g", batch=10, lease_seconds=60, stop=stop, wait_ms=500, ack_async=True)
    assert handled == [0, 1, 2, 3, 3, 4, 5, 6]
    assert (stats.completed, stats.failed, stats.released_leases, stats.lost_acks) == (7, 1, 1, 0)
    # 0..6 acked, the rest released at once rather than left to expire.
    assert [m.offset for m in client.pop(queue, group="g", batch=10).messages] == [7, 8, 9]


def slow_first(stop: Any, deliveries: List[Message]):  # type: ignore[no-untyped-def]
    def handler(m: Message) -> None:
        deliveries.append(m)
        if len(deliveries) == 1:
            time.sleep(1.5)  # past the 1 s lease, which is not renewed
        else:
            stop.set()

    return handler


def test_an_ack_refused_for_a_lapsed_lease_is_reported_and_redelivered(client: Client, queue: str) -> None:
    push_spread(client, queue, 1, partitions=1)
    stop = threading.Event()
    deliveries: List[Message] = []
    errors: List[AckError] = []
    stats = client.consume(
        queue, slow_first(stop, deliveries), group="g", batch=1, lease_seconds=1, renew_every=3600,
        stop=stop, wait_ms=300, ack_async=True, on_ack_error=errors.append,
    )
    assert [(m.offset, m.redelivered) for m in deliveries] == [(0, False), (0, True)]
    assert len(errors) == 1 and errors[0].codes == ["lease_expired"] and errors[0].items[0].offset == 0
    assert stats.lost_acks == 1
    assert_consumed(client, queue, "g")


def test_without_on_ack_error_a_failed_ack_ends_the_loop(client: Client, queue: str) -> None:
    push_spread(client, queue, 1, partitions=1)
    stop = threading.Event()
    with pytest.raises(AckError) as raised:
        client.consume(
            queue, slow_first(stop, []), group="g", batch=1, lease_seconds=1, renew_every=3600,
            stop=stop, wait_ms=300, ack_async=True,
        )
    assert raised.value.codes == ["lease_expired"]


def test_async_consumer_acks_every_message_once_in_fewer_calls(sidecar: Sidecar, client: Client, queue: str) -> None:
    n = 2000
    push_spread(client, queue, n, partitions=10)

    async def main() -> None:
        async with AsyncClient(sidecar.socket) as qs:
            calls = count_acks_async(qs)
            stop = asyncio.Event()
            seen: Dict[str, int] = {}
            leases: Set[str] = set()
            errors: List[AckError] = []

            async def handler(m: Message) -> None:
                seen[m.transaction_id] = seen.get(m.transaction_id, 0) + 1
                leases.add(m.lease_id or "")
                if len(seen) == n:
                    stop.set()

            stats = await qs.consume(queue, handler, group="g", batch=10, concurrency=2, stop=stop, wait_ms=500,
                                     ack_async=True, on_ack_error=errors.append)
            assert errors == []
            assert len(seen) == n and set(seen.values()) == {1}
            assert stats.completed == n and stats.lost_acks == 0
            assert sum(calls) == n
            assert len(calls) < len(leases), f"{len(calls)} ack calls for {len(leases)} batches"

    asyncio.run(main())
    assert_consumed(client, queue, "g")


def test_async_consumer_reports_a_refused_ack(sidecar: Sidecar, client: Client, queue: str) -> None:
    push_spread(client, queue, 1, partitions=1)

    async def main() -> None:
        async with AsyncClient(sidecar.socket) as qs:
            stop = asyncio.Event()
            deliveries: List[Message] = []
            errors: List[AckError] = []

            async def handler(m: Message) -> None:
                deliveries.append(m)
                if len(deliveries) == 1:
                    await asyncio.sleep(1.5)
                else:
                    stop.set()

            await qs.consume(queue, handler, group="g", batch=1, lease_seconds=1, renew_every=3600, stop=stop,
                             wait_ms=300, ack_async=True, on_ack_error=errors.append)
            assert [m.redelivered for m in deliveries] == [False, True]
            assert len(errors) == 1 and errors[0].codes == ["lease_expired"]

    asyncio.run(main())
    assert_consumed(client, queue, "g")
