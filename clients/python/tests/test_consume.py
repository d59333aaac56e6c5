"""The synchronous consume loop: acks, nacks with redelivery, renewals, forwarding and stopping."""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Dict, List, Tuple

import pytest

import queenside
from queenside import Client, Message, PushItem, QueueOptions


def push_spread(client: Client, queue: str, n: int, partitions: int) -> None:
    client.push([PushItem(queue, i, partition=f"p{i % partitions}", transaction_id=f"m-{i}") for i in range(n)])


def assert_in_order(seen: List[Tuple[str, int]]) -> None:
    """Per partition, the successful handlings come in ascending offset order."""
    per: Dict[str, List[int]] = {}
    for partition, offset in seen:
        per.setdefault(partition, []).append(offset)
    for offsets in per.values():
        assert offsets == sorted(offsets) == list(range(len(offsets)))


def test_handler_that_fails_once_succeeds_on_redelivery(client: Client, queue: str) -> None:
    push_spread(client, queue, 12, partitions=2)
    stop = threading.Event()
    deliveries: List[Message] = []
    done: List[Tuple[str, int]] = []

    def handler(m: Message) -> None:
        deliveries.append(m)
        if m.payload == 5 and not m.redelivered:
            raise RuntimeError("flaky downstream")
        done.append((m.partition, m.offset))
        if len(done) == 12:
            stop.set()

    stats = client.consume(queue, handler, group="workers", batch=4, stop=stop, wait_ms=500)
    assert sorted(int(p[1:]) + 2 * off for p, off in done) == list(range(12))  # each completed once
    assert_in_order(done)
    fives = [m for m in deliveries if m.payload == 5]
    assert [f.redelivered for f in fives] == [False, True]
    assert stats.failed == 1 and stats.completed == 12 and stats.lost_acks == 0
    assert all(g.lag == 0 and not g.leased for p in client.stats(queue).partitions for g in p.groups)


def test_failed_message_is_recorded_with_its_reason(client: Client, queue: str) -> None:
    client.configure(queue, QueueOptions(retry_limit=1))
    push_spread(client, queue, 3, partitions=1)
    stop = threading.Event()
    ok: List[int] = []

    def handler(m: Message) -> None:
        if m.payload == 1:
            raise ValueError("never works")
        ok.append(m.payload)
        if ok == [0, 2]:
            stop.set()

    stats = client.consume(queue, handler, batch=10, stop=stop, wait_ms=300)
    assert stats.failed == 2  # once within the budget, once more to dead-letter it
    (entry,) = client.dlq(queue).entries
    assert entry.payload == 1 and entry.error == "ValueError: never works"


def test_handler_outputs_commit_with_the_acks(client: Client, queue: str) -> None:
    out = queue + "-out"
    push_spread(client, queue, 6, partitions=2)
    stop = threading.Event()
    count = [0]

    def double(m: Message) -> List[PushItem]:
        count[0] += 1
        if count[0] == 6:
            stop.set()
        return [PushItem(out, m.payload * 2, partition=m.partition, transaction_id=queenside.transaction_id("double", m.transaction_id))]

    client.consume(queue, double, batch=3, stop=stop, wait_ms=300)
    got = client.pop(out, batch=10, partitions=2, auto_ack=True).messages
    assert sorted(m.payload for m in got) == [0, 2, 4, 6, 8, 10]
    for partition in ("p0", "p1"):
        assert [m.offset for m in got if m.partition == partition] == [0, 1, 2]


def test_leases_are_renewed_while_a_handler_runs(client: Client, queue: str) -> None:
    push_spread(client, queue, 2, partitions=1)
    stop = threading.Event()
    seen: List[Message] = []

    def slow(m: Message) -> None:
        seen.append(m)
        if m.payload == 0:
            time.sleep(3.0)  # past the 2-second lease
        else:
            stop.set()

    stats = client.consume(queue, slow, batch=2, lease_seconds=2, renew_every=0.4, stop=stop, wait_ms=300)
    assert [m.payload for m in seen] == [0, 1] and not any(m.redelivered for m in seen)
    assert stats.lost_acks == 0 and stats.completed == 2


def test_concurrent_handlers_keep_partition_order(client: Client, queue: str) -> None:
    push_spread(client, queue, 60, partitions=6)
    stop = threading.Event()
    lock = threading.Lock()
    done: List[Tuple[str, int]] = []
    busy: Dict[str, int] = {}

    def handler(m: Message) -> None:
        with lock:
            busy[m.partition] = busy.get(m.partition, 0) + 1
            assert busy[m.partition] == 1, "two handlers at once in one partition"
        time.sleep(0.002)
        with lock:
            busy[m.partition] -= 1
            done.append((m.partition, m.offset))
            if len(done) == 60:
                stop.set()

    stats = client.consume(queue, handler, batch=5, concurrency=3, stop=stop, wait_ms=300)
    assert stats.completed == 60 and stats.failed == 0
    assert_in_order(done)


def test_sigint_stops_cleanly_and_releases_the_rest(client: Client, queue: str) -> None:
    push_spread(client, queue, 5, partitions=1)
    handled: List[int] = []

    def handler(m: Message) -> None:
        handled.append(m.payload)
        if len(handled) == 2:
            os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.05)

    before = signal.getsignal(signal.SIGINT)
    stats = client.consume(queue, handler, group="g", batch=5, wait_ms=300)
    assert signal.getsignal(signal.SIGINT) is before  # put back after the run
    assert handled == [0, 1]
    assert (stats.completed, stats.released_leases) == (2, 1)
    # The rest was released, not left to expire: it can be had at once.
    rest = client.pop(queue, group="g", batch=5)
    assert [m.payload for m in rest.messages] == [2, 3, 4]


def test_stop_method_from_another_thread(client: Client, queue: str) -> None:
    consumer = queenside.Consumer(client, queue, lambda m: None, wait_ms=200, stop_on_signals=False)
    timer = threading.Timer(0.3, consumer.stop)
    timer.start()
    started = time.monotonic()
    assert consumer.run().completed == 0
    assert time.monotonic() - started < 3


def test_a_non_retryable_settle_error_ends_the_loop(client: Client, queue: str) -> None:
    push_spread(client, queue, 1, partitions=1)
    with pytest.raises(queenside.InvalidArgumentError):
        client.consume(queue, lambda m: [PushItem("not a valid name", 1)], wait_ms=300)


def test_a_handler_returning_something_else_is_a_bug(client: Client, queue: str) -> None:
    push_spread(client, queue, 1, partitions=1)
    with pytest.raises(TypeError):
        client.consume(queue, lambda m: 42, wait_ms=300)  # type: ignore[arg-type,return-value]
