"""One connection, many threads: requests are pipelined and answers matched by id."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Dict, List

from harness import Sidecar

from queenside import Client, PushItem, PushResult


def test_many_threads_share_one_client(client: Client, queue: str) -> None:
    threads, per_thread = 16, 40

    def produce(worker: int) -> List[PushResult]:
        out = []
        for i in range(per_thread):
            out.extend(client.push([PushItem(queue, [worker, i], partition=f"w{worker % 4}", transaction_id=f"{worker}-{i}")]))
            # The answer reached the thread that asked: it names what this thread sent.
            assert out[-1].transaction_id == f"{worker}-{i}"
        return out

    with ThreadPoolExecutor(threads) as pool:
        results = [r for batch in pool.map(produce, range(threads)) for r in batch]
    assert len(results) == threads * per_thread
    assert all(r.status == "queued" for r in results)
    by_partition: Dict[str, List[int]] = {}
    for r in results:
        by_partition.setdefault(r.partition, []).append(r.offset)
    for offsets in by_partition.values():
        assert sorted(offsets) == list(range(len(offsets)))  # gapless, no offset twice


def test_a_long_poll_does_not_hold_up_other_calls(client: Client, queue: str) -> None:
    idle = queue + "-idle"
    popped = []
    poller = threading.Thread(target=lambda: popped.append(client.pop(idle, wait_ms=20000, auto_ack=True)))
    poller.start()
    time.sleep(0.1)
    for i in range(20):
        client.push_one(queue, i)
    assert poller.is_alive()  # the pushes were answered while the pop still waited
    client.push_one(idle, "wake")
    poller.join(10)
    assert popped and [m.payload for m in popped[0].messages] == ["wake"]


def test_concurrent_mixed_operations(client: Client, queue: str) -> None:
    client.push([PushItem(queue, i) for i in range(50)])

    def mixed(i: int) -> str:
        if i % 3 == 0:
            return client.health().status
        if i % 3 == 1:
            return str(client.stats(queue).partitions[0].head_offset)
        return client.hello().server

    with ThreadPoolExecutor(12) as pool:
        answers = list(pool.map(mixed, range(120)))
    assert answers[0::3] == ["ok"] * 40
    assert set(answers[1::3]) == {"50"}
    assert answers[2::3] == ["queenside"] * 40


def test_in_flight_limit_is_respected(sidecar: Sidecar, queue: str) -> None:
    # With a tiny window, threads queue up client-side instead of overrunning it.
    with Client(sidecar.socket, max_in_flight=2) as small:
        with ThreadPoolExecutor(8) as pool:
            results = list(pool.map(lambda i: small.push_one(queue, i).status, range(64)))
    assert results == ["queued"] * 64
