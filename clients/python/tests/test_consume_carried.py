"""The consume loops without ack_async: each batch's acks go with the next pop
(ack_and_pop), against a real sidecar. The client's calls are counted by
wrapping its methods, as the ack_async tests do."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, Dict, List, Set

import queenside
from queenside import AsyncClient, Client, Message, PushItem

from conftest import MAX_FRAME_BYTES
from harness import Sidecar


def push_spread(client: Client, queue: str, n: int, partitions: int) -> None:
    client.push([PushItem(queue, i, partition=f"p{i % partitions}", transaction_id=f"m-{i}") for i in range(n)])


def count_calls(client: Any, *names: str) -> Dict[str, List[int]]:
    """Wraps client's methods: per name, one element per call (its item count, or 0)."""
    calls: Dict[str, List[int]] = {name: [] for name in names}
    for name in names:
        real = getattr(client, name)

        def wrapped(*args: Any, _real: Any = real, _calls: List[int] = calls[name], **kw: Any) -> Any:
            if args and not isinstance(args[0], str):
                args = (list(args[0]), *args[1:])
                _calls.append(len(args[0]))
            else:
                _calls.append(0)
            return _real(*args, **kw)

        setattr(client, name, wrapped)
    return calls


def count_calls_async(client: AsyncClient, *names: str) -> Dict[str, List[int]]:
    calls: Dict[str, List[int]] = {name: [] for name in names}
    for name in names:
        real = getattr(client, name)

        async def wrapped(*args: Any, _real: Any = real, _calls: List[int] = calls[name], **kw: Any) -> Any:
            if args and not isinstance(args[0], str):
                args = (list(args[0]), *args[1:])
                _calls.append(len(args[0]))
            else:
                _calls.append(0)
            return await _real(*args, **kw)

        setattr(client, name, wrapped)
    return calls


def assert_consumed(client: Client, queue: str, group: str) -> None:
    groups = [g for p in client.stats(queue).partitions for g in p.groups if g.group == group]
    assert groups and all(g.lag == 0 and not g.leased for g in groups)


def test_the_acks_ride_on_the_next_pop(client: Client, queue: str) -> None:
    n = 200
    push_spread(client, queue, n, partitions=5)
    calls = count_calls(client, "pop", "ack", "ack_and_pop")
    stop = threading.Event()
    seen: Dict[str, int] = {}
    leases: Set[str] = set()

    def handler(m: Message) -> None:
        seen[m.transaction_id] = seen.get(m.transaction_id, 0) + 1
        leases.add(m.lease_id or "")
        if len(seen) == n:
            stop.set()

    stats = client.consume(queue, handler, group="g", batch=10, stop=stop, wait_ms=500)
    assert len(seen) == n and set(seen.values()) == {1}  # each message once
    assert stats.completed == n and stats.lost_acks == 0
    # One pop to start, then one request a batch, whose acks the next one
    # carries; the last batch's acks go on their own when the loop stops.
    assert len(calls["pop"]) == 1
    assert len(calls["ack_and_pop"]) == len(leases) - 1
    assert calls["ack"] == [10]
    assert sum(calls["ack_and_pop"]) + sum(calls["ack"]) == n
    assert_consumed(client, queue, "g")


def test_a_failure_rides_on_the_next_pop_and_comes_again(client: Client, queue: str) -> None:
    push_spread(client, queue, 6, partitions=1)
    calls = count_calls(client, "ack", "ack_and_pop")
    stop = threading.Event()
    handled: List[Any] = []

    def handler(m: Message) -> None:
        handled.append((m.offset, m.redelivered))
        if m.offset == 2 and not m.redelivered:
            raise RuntimeError("once")
        if m.offset == 5:
            stop.set()

    stats = client.consume(queue, handler, group="g", batch=10, stop=stop, wait_ms=500)
    # The failure's rewind is applied before the carried pop looks: it gets
    # the failed message again at once, and the rest of the span after it.
    assert handled == [(0, False), (1, False), (2, False), (2, True), (3, True), (4, True), (5, True)]
    assert (stats.completed, stats.failed, stats.lost_acks) == (6, 1, 0)
    assert calls["ack_and_pop"] == [3] and calls["ack"] == [4]
    assert_consumed(client, queue, "g")


def test_a_carried_ack_refused_is_counted_and_its_message_comes_again(client: Client, queue: str) -> None:
    push_spread(client, queue, 1, partitions=1)
    stop = threading.Event()
    deliveries: List[Message] = []

    def handler(m: Message) -> None:
        deliveries.append(m)
        if len(deliveries) == 1:
            time.sleep(1.5)  # past the 1 s lease, which is not renewed
        else:
            stop.set()

    stats = client.consume(queue, handler, group="g", batch=1, lease_seconds=1, renew_every=3600, stop=stop, wait_ms=300)
    assert [(m.offset, m.redelivered) for m in deliveries] == [(0, False), (0, True)]
    assert stats.lost_acks == 1
    assert_consumed(client, queue, "g")


def test_a_pop_error_after_the_acks_is_a_failed_pop(client: Client, queue: str) -> None:
    client.push_one(queue, "small", partition="p")
    client.push_one(queue, b"x" * (MAX_FRAME_BYTES - 200), partition="p")  # never fits a pop's answer
    calls = count_calls(client, "pop", "ack_and_pop")
    stop = threading.Event()
    handled: List[Any] = []

    def handler(m: Message) -> None:
        handled.append(m.payload)

    timer = threading.Timer(1.0, stop.set)
    timer.start()
    stats = client.consume(queue, handler, group="g", batch=1, stop=stop, wait_ms=300, retry_delay=0.1)
    timer.join()
    assert handled == ["small"] and stats.completed == 1
    # The carried call applied the ack; its pop failed (overloaded, which is
    # retryable), so the loop paused and popped again on its own.
    assert len(calls["ack_and_pop"]) == 1 and len(calls["pop"]) >= 2
    (partition,) = client.stats(queue).partitions
    assert partition.groups[0].lag == 1  # only the large message is left


def test_the_asyncio_loop_carries_its_acks_too(sidecar: Sidecar, client: Client, queue: str) -> None:
    n = 200
    push_spread(client, queue, n, partitions=5)

    async def main() -> None:
        async with AsyncClient(sidecar.socket) as qs:
            calls = count_calls_async(qs, "pop", "ack", "ack_and_pop")
            stop = asyncio.Event()
            seen: Dict[str, int] = {}

            async def handler(m: Message) -> None:
                seen[m.transaction_id] = seen.get(m.transaction_id, 0) + 1
                if len(seen) == n:
                    stop.set()

            stats = await qs.consume(queue, handler, group="g", batch=10, concurrency=2, stop=stop, wait_ms=500)
            assert len(seen) == n and set(seen.values()) == {1}
            assert stats.completed == n and stats.lost_acks == 0
            # The one loop pops on its own to start, and again after a pop
            # that brought nothing, and sends what it holds with a plain ack
            # when it stops; every other batch's acks are carried.
            assert len(calls["ack"]) <= 1
            assert sum(calls["ack_and_pop"]) + sum(calls["ack"]) == n
            assert len(calls["ack_and_pop"]) > len(calls["pop"])

    asyncio.run(main())
    assert_consumed(client, queue, "g")


def test_stopping_mid_batch_still_acks_and_releases(client: Client, queue: str) -> None:
    push_spread(client, queue, 5, partitions=1)
    consumer: List[queenside.Consumer] = []

    def handler(m: Message) -> None:
        if m.offset == 1:
            consumer[0].stop()

    consumer.append(queenside.Consumer(client, queue, handler, group="g", batch=5, wait_ms=300, stop_on_signals=False))
    stats = consumer[0].run()
    assert (stats.completed, stats.released_leases) == (2, 1)
    rest = client.pop(queue, group="g", batch=5)
    assert [m.offset for m in rest.messages] == [2, 3, 4]
