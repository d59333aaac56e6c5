"""concurrency in both consume loops, against a real sidecar: one pop loop,
whose pop's partitions are handled by up to ``concurrency`` handlers at
once, each partition's messages one after another, in offset order."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

import pytest

import queenside
from queenside import AsyncClient, Backoff, Client, ConsumeStats, Message, PushItem

from harness import Sidecar

PARTITIONS = 8
PER_PARTITION = 5
TOTAL = PARTITIONS * PER_PARTITION
HANDLER_WAIT = 0.02

KINDS = ["Consumer", "AsyncConsumer"]


def push_all(client: Client, queue: str) -> None:
    """PER_PARTITION messages in each of PARTITIONS partitions, pushed before consuming."""
    client.push([PushItem(queue, i, partition=f"p{i % PARTITIONS}", transaction_id=f"m-{i}") for i in range(TOTAL)])


class Recorder:
    """What the handlers did: how many ran at once, in all and per partition,
    and in what order each partition's messages completed."""

    def __init__(self, fail: Optional[Set[Tuple[str, int]]] = None, stop_after: int = TOTAL) -> None:
        self.lock = threading.Lock()
        self.fail = set(fail or ())  # (partition, offset) to fail on their first delivery
        self.stop_after = stop_after
        self.running: Dict[str, int] = {}
        self.at_once = 0
        self.most_at_once = 0
        self.most_in_a_partition = 0
        self.deliveries: List[Message] = []
        self.done: List[Tuple[str, int]] = []
        self.stop: Callable[[], None] = lambda: None
        self.pops: List[Tuple[int, int]] = []  # (messages, leases) of each pop that brought some
        self.first_pop: List[Tuple[str, int]] = []

    def enter(self, m: Message) -> None:
        with self.lock:
            self.deliveries.append(m)
            self.running[m.partition] = self.running.get(m.partition, 0) + 1
            self.most_in_a_partition = max(self.most_in_a_partition, self.running[m.partition])
            self.at_once += 1
            self.most_at_once = max(self.most_at_once, self.at_once)

    def leave(self, m: Message) -> None:
        with self.lock:
            self.running[m.partition] -= 1
            self.at_once -= 1
            if (m.partition, m.offset) in self.fail:
                self.fail.discard((m.partition, m.offset))
                raise RuntimeError(f"{m.partition}@{m.offset} fails once")
            self.done.append((m.partition, m.offset))
            if len(self.done) == self.stop_after:
                self.stop()

    def popped(self, result: Any) -> None:
        pop = getattr(result, "pop", result)  # ack_and_pop answers an AckResult
        if pop is not None and pop.messages:
            if not self.pops:
                self.first_pop = [(m.partition, m.offset) for m in pop.messages]
            self.pops.append((len(pop.messages), len(pop.leases)))

    def assert_in_order(self) -> None:
        """Per partition, the completions come in offset order, each offset once."""
        per: Dict[str, List[int]] = {}
        for partition, offset in self.done:
            per.setdefault(partition, []).append(offset)
        for offsets in per.values():
            assert offsets == list(range(len(offsets)))


def consume(sidecar: Sidecar, kind: str, queue: str, rec: Recorder, **options: Any) -> ConsumeStats:
    """Runs the kind's consume loop over queue until rec stops it; its stats."""
    options = dict(group="g", wait_ms=300, stop_on_signals=False, **options)
    if kind == "Consumer":
        with Client(sidecar.socket, timeout=20) as qs:
            for name in ("pop", "ack_and_pop"):
                real = getattr(qs, name)

                def wrapped(*args: Any, _real: Any = real, **kw: Any) -> Any:
                    result = _real(*args, **kw)
                    rec.popped(result)
                    return result

                setattr(qs, name, wrapped)

            def handler(m: Message) -> None:
                rec.enter(m)
                time.sleep(HANDLER_WAIT)
                rec.leave(m)

            consumer = queenside.Consumer(qs, queue, handler, **options)
            rec.stop = consumer.stop
            return consumer.run()

    async def main() -> ConsumeStats:
        async with AsyncClient(sidecar.socket) as qs:
            for name in ("pop", "ack_and_pop"):
                real = getattr(qs, name)

                async def wrapped(*args: Any, _real: Any = real, **kw: Any) -> Any:
                    result = await _real(*args, **kw)
                    rec.popped(result)
                    return result

                setattr(qs, name, wrapped)

            async def handler(m: Message) -> None:
                rec.enter(m)
                await asyncio.sleep(HANDLER_WAIT)
                rec.leave(m)

            consumer = queenside.AsyncConsumer(qs, queue, handler, **options)
            rec.stop = consumer.stop
            return await consumer.run()

    return asyncio.run(main())


def assert_consumed(client: Client, queue: str, group: str = "g") -> None:
    groups = [g for p in client.stats(queue).partitions for g in p.groups if g.group == group]
    assert len(groups) == PARTITIONS and all(g.lag == 0 and not g.leased for g in groups)


@pytest.mark.parametrize("kind", KINDS)
def test_the_partitions_of_a_pop_are_handled_at_once(sidecar: Sidecar, client: Client, queue: str, kind: str) -> None:
    push_all(client, queue)
    rec = Recorder()
    stats = consume(sidecar, kind, queue, rec, concurrency=4)
    assert rec.pops[0] == (TOTAL, PARTITIONS)  # one pop took them all
    assert 2 <= rec.most_at_once <= 4
    assert rec.most_in_a_partition == 1
    rec.assert_in_order()
    assert sorted(m.transaction_id for m in rec.deliveries) == sorted(f"m-{i}" for i in range(TOTAL))
    assert not any(m.redelivered for m in rec.deliveries)
    assert (stats.completed, stats.failed, stats.released_leases, stats.lost_acks) == (TOTAL, 0, 0, 0)
    assert_consumed(client, queue)


@pytest.mark.parametrize("kind", KINDS)
def test_by_default_one_message_at_a_time_in_the_pop_order(sidecar: Sidecar, client: Client, queue: str, kind: str) -> None:
    push_all(client, queue)
    rec = Recorder()
    stats = consume(sidecar, kind, queue, rec)
    assert rec.pops[0] == (TOTAL, PARTITIONS)
    assert rec.most_at_once == 1
    assert [(m.partition, m.offset) for m in rec.deliveries] == rec.first_pop  # in the order the pop returned them
    rec.assert_in_order()
    assert stats.completed == TOTAL and stats.failed == 0
    assert_consumed(client, queue)


@pytest.mark.parametrize("kind", KINDS)
def test_a_failure_is_retried_without_disturbing_the_other_partitions(sidecar: Sidecar, client: Client, queue: str, kind: str) -> None:
    push_all(client, queue)
    rec = Recorder(fail={("p3", 2)})
    stats = consume(sidecar, kind, queue, rec, concurrency=4, failure_backoff=Backoff(0.2, 0.2))
    assert rec.most_in_a_partition == 1 and rec.most_at_once >= 2
    rec.assert_in_order()  # p3 too: 0, 1, then 2 again once it failed, 3, 4
    assert sorted(rec.done) == sorted((f"p{p}", o) for p in range(PARTITIONS) for o in range(PER_PARTITION))
    # The other partitions were each handled once, in the first pop, in order.
    others = [m for m in rec.deliveries if m.partition != "p3"]
    assert len(others) == TOTAL - PER_PARTITION and not any(m.redelivered for m in others)
    p3 = [(m.offset, m.redelivered) for m in rec.deliveries if m.partition == "p3"]
    assert p3[:3] == [(0, False), (1, False), (2, False)]  # 3 and 4 not handled after the failure
    assert [o for o, _ in p3[3:]] == [2, 3, 4] and p3[3][1]
    assert (stats.completed, stats.failed, stats.lost_acks) == (TOTAL, 1, 0)
    assert_consumed(client, queue)


@pytest.mark.parametrize("kind", KINDS)
def test_a_stop_lets_the_handlers_in_hand_finish_and_releases_the_rest(sidecar: Sidecar, client: Client, queue: str, kind: str) -> None:
    push_all(client, queue)
    rec = Recorder(stop_after=3)
    stats = consume(sidecar, kind, queue, rec, concurrency=4)
    # The handlers running when the third completed finished; nothing else started.
    assert 3 <= len(rec.done) <= 3 + 3 and len(rec.deliveries) == len(rec.done)
    rec.assert_in_order()
    assert stats.completed == len(rec.done) and stats.failed == 0
    assert stats.released_leases == PARTITIONS  # no partition was done: each gave its rest back
    # What completed was acked, the rest released at once: the next pop gets
    # exactly the rest, with no lease to wait out.
    rest = client.pop(queue, group="g", batch=100, partitions=100)
    handled = {(p, o) for p, o in rec.done}
    assert sorted((m.partition, m.offset) for m in rest.messages) == sorted(
        (f"p{p}", o) for p in range(PARTITIONS) for o in range(PER_PARTITION) if (f"p{p}", o) not in handled
    )


@pytest.mark.parametrize("kind", KINDS)
def test_a_handler_bug_in_one_partition_ends_the_run(sidecar: Sidecar, client: Client, queue: str, kind: str) -> None:
    push_all(client, queue)
    rec = Recorder()

    def run() -> ConsumeStats:
        if kind == "Consumer":
            with Client(sidecar.socket, timeout=20) as qs:
                return queenside.Consumer(qs, queue, bug, group="g", wait_ms=300, concurrency=4, stop_on_signals=False).run()

        async def main() -> ConsumeStats:
            async with AsyncClient(sidecar.socket) as qs:
                return await queenside.AsyncConsumer(qs, queue, bug, group="g", wait_ms=300, concurrency=4, stop_on_signals=False).run()

        return asyncio.run(main())

    def bug(m: Message) -> Optional[List[PushItem]]:
        rec.enter(m)
        time.sleep(HANDLER_WAIT)
        rec.leave(m)
        return 42 if m.partition == "p0" else None  # type: ignore[return-value]

    with pytest.raises(TypeError, match="returns None or PushItems"):
        run()
    # The other partitions' handlers in hand finished; nothing was handled twice at once.
    assert rec.most_in_a_partition == 1
    assert len({(m.partition, m.offset) for m in rec.deliveries}) == len(rec.deliveries) < TOTAL
