"""The asyncio client and its consume loop (run with asyncio.run inside plain tests)."""

from __future__ import annotations

import asyncio
from typing import List

import pytest

from harness import Sidecar

import queenside
from queenside import AsyncClient, Message, PushItem


def test_operations(sidecar: Sidecar, queue: str) -> None:
    async def main() -> None:
        async with AsyncClient(sidecar.socket) as qs:
            assert (await qs.hello()).server == "queenside"
            assert (await qs.health()).ok
            first = await qs.push_one(queue, {"n": 1}, transaction_id="a-1")
            assert first.status == "queued"
            assert (await qs.push_one(queue, {"n": 1}, transaction_id="a-1")).status == "duplicate"
            pop = await qs.pop(queue, group="g", batch=5)
            assert [m.payload for m in pop.messages] == [{"n": 1}]
            renewed = await qs.renew([pop.leases[0].lease_id], seconds=30)
            assert renewed[0].success
            assert (await qs.ack([pop.messages[0].completed()])).all_succeeded
            assert (await qs.stats(queue)).partitions[0].groups[0].cursor == 1
            assert [g.group for g in await qs.groups(queue)] == ["g"]
            assert [c.cursor for c in await qs.seek(queue, "g", "beginning")] == [0]
            assert await qs.delete_group(queue, "g")
            assert (await qs.configure(queue)).lease_seconds == 60
            assert queue in [q.queue for q in await qs.queues()]
            res = await qs.transaction(pushes=[PushItem(queue, 2)])
            assert res.pushes[0].offset == 1
            pop = await qs.pop(queue, group="h", batch=5)
            assert [r.success for r in await qs.release([pop.leases[0].lease_id])] == [True]
            assert (await qs.dlq(queue)).entries == []
            assert await qs.dlq_replay([10**12]) != []

    asyncio.run(main())


def test_errors(sidecar: Sidecar, queue: str) -> None:
    async def main() -> None:
        qs = await AsyncClient.open(sidecar.socket)
        try:
            with pytest.raises(queenside.NotFoundError):
                await qs.stats(queue)
            with pytest.raises(queenside.UnknownOpError):
                await qs.call("nope")
            with pytest.raises(queenside.InvalidArgumentError):
                await qs.pop(queue, batch=0)
            with pytest.raises(queenside.UnsupportedError):
                await qs.hello(protocol=9)
        finally:
            await qs.close()
        with pytest.raises(queenside.ConnectionClosedError):
            await qs.health()
        with pytest.raises(queenside.ConnectionClosedError):
            await AsyncClient.open(sidecar.socket + ".missing")

    asyncio.run(main())


def test_many_tasks_pipelined(sidecar: Sidecar, queue: str) -> None:
    async def main() -> None:
        async with AsyncClient(sidecar.socket) as qs:
            poll = asyncio.ensure_future(qs.pop(queue + "-idle", wait_ms=20000, auto_ack=True))
            results = await asyncio.gather(*(qs.push_one(queue, i, partition=f"p{i % 3}", transaction_id=f"t{i}") for i in range(300)))
            assert [r.transaction_id for r in results] == [f"t{i}" for i in range(300)]
            assert not poll.done()  # the long-poll held nothing up
            await qs.push_one(queue + "-idle", "wake")
            assert [m.payload for m in (await poll).messages] == ["wake"]
            offsets = sorted((r.partition, r.offset) for r in results)
            assert offsets == sorted((f"p{p}", o) for p in range(3) for o in range(100))

    asyncio.run(main())


def test_local_deadline(sidecar: Sidecar, queue: str) -> None:
    async def main() -> None:
        async with AsyncClient(sidecar.socket) as qs:
            items = [PushItem(queue, i, partition=f"p{i % 50}") for i in range(10000)]
            with pytest.raises(queenside.DeadlineExceededError):
                await qs.push(items, timeout=0.001)
            assert (await qs.health()).ok

    asyncio.run(main())


def test_consume_with_a_handler_that_fails_once(sidecar: Sidecar, queue: str) -> None:
    async def main() -> None:
        async with AsyncClient(sidecar.socket) as qs:
            await qs.push([PushItem(queue, i, partition=f"p{i % 2}") for i in range(10)])
            stop = asyncio.Event()
            done: List[int] = []
            failed_once: List[int] = []

            async def handler(m: Message) -> None:
                await asyncio.sleep(0)
                if m.payload == 4 and not failed_once:
                    failed_once.append(m.payload)
                    raise RuntimeError("try again")
                done.append(m.payload)
                if len(done) == 10:
                    stop.set()

            stats = await qs.consume(queue, handler, group="async", batch=3, concurrency=2, stop=stop, wait_ms=300)
            assert sorted(done) == list(range(10))
            for parity in (0, 1):
                assert [n for n in done if n % 2 == parity] == list(range(parity, 10, 2))
            assert (stats.failed, stats.completed) == (1, 10)

    asyncio.run(main())


def test_consume_forwards_and_renews(sidecar: Sidecar, queue: str) -> None:
    out = queue + "-out"

    async def main() -> None:
        async with AsyncClient(sidecar.socket) as qs:
            await qs.push([PushItem(queue, i) for i in range(3)])
            stop = asyncio.Event()
            seen: List[Message] = []

            async def slow(m: Message) -> List[PushItem]:
                seen.append(m)
                if m.payload == 0:
                    await asyncio.sleep(3.0)  # past the 2-second lease
                if len(seen) == 3:
                    stop.set()
                return [PushItem(out, m.payload + 100)]

            consumer = queenside.AsyncConsumer(
                qs, queue, slow, lease_seconds=2, renew_every=0.4, wait_ms=300, stop=stop, stop_on_signals=False
            )
            stats = await consumer.run()
            assert stats.lost_acks == 0 and not any(m.redelivered for m in seen)
            got = await qs.pop(out, batch=5, auto_ack=True)
            assert [m.payload for m in got.messages] == [100, 101, 102]

    asyncio.run(main())


def test_frame_too_large(sidecar: Sidecar, queue: str) -> None:
    from conftest import MAX_FRAME_BYTES

    async def main() -> None:
        async with AsyncClient(sidecar.socket) as fresh:  # no hello: a large request asks the limit first
            with pytest.raises(queenside.FrameTooLargeError) as caught:
                await fresh.push([PushItem(queue, b"x" * (MAX_FRAME_BYTES + 10))])
            assert caught.value.details["local"] is True
            assert (await fresh.health()).ok
        async with AsyncClient(sidecar.socket) as known:  # after hello: refused locally
            await known.hello()
            with pytest.raises(queenside.FrameTooLargeError) as caught:
                await known.push([PushItem(queue, b"x" * (MAX_FRAME_BYTES + 10))])
            assert caught.value.details["local"] is True
            assert (await known.health()).ok

    asyncio.run(main())
