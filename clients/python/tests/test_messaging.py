"""push, pop, ack (completed, failed with rewind), renew and release against a real sidecar."""

from __future__ import annotations

import datetime as dt
import time

import pytest

import queenside
from queenside import Client, PushItem

UTC = dt.timezone.utc


def push_numbers(client: Client, queue: str, n: int, partition: str = "p") -> None:
    results = client.push([PushItem(queue, i, partition=partition, transaction_id=f"n-{i}") for i in range(n)])
    assert [r.status for r in results] == ["queued"] * n


def test_push_queued_then_duplicate(client: Client, queue: str) -> None:
    first = client.push_one(queue, {"order": 1}, partition="eu", transaction_id="order-1", trace_id="t-1", headers={"src": "web"})
    assert (first.status, first.offset, first.partition, first.transaction_id) == ("queued", 0, "eu", "order-1")
    assert first.message_id and first.committed_at is not None
    again = client.push_one(queue, {"order": 1}, partition="eu", transaction_id="order-1")
    assert again.status == queenside.DUPLICATE
    assert (again.message_id, again.offset) == (first.message_id, first.offset)

    msg = client.pop(queue, auto_ack=True).messages[0]
    assert (msg.trace_id, msg.headers, msg.payload) == ("t-1", {"src": "web"}, {"order": 1})
    assert msg.lease_id is None


def test_push_items_fail_alone(client: Client, queue: str) -> None:
    results = client.push([PushItem(queue, 1), PushItem("bad queue name!", 2), PushItem(queue, 3, partition="")])
    assert [r.status for r in results] == ["queued", "failed", "failed"]
    assert isinstance(results[1].error, queenside.InvalidArgumentError)
    assert results[2].error is not None and results[2].error.code == "invalid_argument"
    with pytest.raises(queenside.InvalidArgumentError):
        client.push_one("bad queue name!", 1)
    generated = results[0].transaction_id
    assert generated  # the sidecar made one up


def test_payloads_come_back_byte_for_byte(client: Client, queue: str) -> None:
    when = dt.datetime(2026, 11, 30, 12, 0, 0, 5000, tzinfo=UTC)
    values = [None, b"\x00\x01bin", {"nested": [1, 2.5, "x", True]}, when, "", 2**64 - 1, -5]
    client.push([PushItem(queue, v) for v in values])
    # A payload encoded by someone else, in a form this client would not write.
    client.push([PushItem(queue, queenside.Raw(b"\xca\x3f\xc0\x00\x00"))])
    got = client.pop(queue, batch=100, auto_ack=True).messages
    assert [m.payload for m in got[:-1]] == values
    assert got[-1].payload_raw == b"\xca\x3f\xc0\x00\x00" and got[-1].payload == 1.5


def test_pop_ack_and_nack_rewinds(client: Client, queue: str) -> None:
    push_numbers(client, queue, 4)
    first = client.pop(queue, group="g", batch=4)
    assert [m.payload for m in first.messages] == [0, 1, 2, 3]
    (lease,) = first.leases
    assert (lease.from_offset, lease.to_offset, lease.head_attempts, lease.group) == (0, 3, 1, "g")
    m0, m1, m2, _ = first.messages

    res = client.ack([m0.completed(), m1.failed("boom"), m2.completed()])
    assert [(r.success, r.code) for r in res.results] == [(True, None), (True, None), (False, "rewound")]
    (state,) = res.leases
    assert (state.released, state.cursor) == (True, 1)

    again = client.pop(queue, group="g", batch=4)
    assert [m.payload for m in again.messages] == [1, 2, 3]
    assert all(m.redelivered for m in again.messages)
    assert again.leases[0].head_attempts == 2
    done = client.ack([m.completed() for m in again.messages])
    assert done.all_succeeded and done.leases[0].cursor == 4
    # The old lease is gone, and the cursor has passed m0: acking it again
    # through that lease says it was settled already.
    assert client.ack([m0.completed()]).results[0].code == queenside.ALREADY_ACKED


def test_ack_by_transaction_id(client: Client, queue: str) -> None:
    push_numbers(client, queue, 2)
    pop = client.pop(queue, batch=2)
    lease = pop.leases[0].lease_id
    res = client.ack([queenside.AckItem(lease, transaction_id="n-0"), queenside.AckItem(lease, transaction_id="nope")])
    assert [(r.success, r.code) for r in res.results] == [(True, None), (False, "unresolvable")]


def test_renew_extends_and_release_hands_back(client: Client, queue: str) -> None:
    push_numbers(client, queue, 2)
    pop = client.pop(queue, group="g", batch=2, lease_seconds=5)
    lease = pop.leases[0]
    (renewed,) = client.renew([lease.lease_id], seconds=120)
    assert renewed.success and renewed.expires_at is not None
    assert renewed.expires_at > lease.expires_at + dt.timedelta(seconds=60)
    assert client.renew(["not-a-lease"])[0].code == "lease_expired"

    # While the lease lives, the group gets nothing more from the partition.
    assert client.pop(queue, group="g", batch=2).messages == []
    (released,) = client.release([lease.lease_id])
    assert released.success
    assert client.release([lease.lease_id])[0].code == "lease_expired"
    back = client.pop(queue, group="g", batch=2)
    assert [m.payload for m in back.messages] == [0, 1] and back.leases[0].head_attempts == 2


def test_long_poll_wakes_on_push(client: Client, queue: str) -> None:
    import threading

    got = []
    waiter = threading.Thread(target=lambda: got.append(client.pop(queue, wait_ms=10000, auto_ack=True)))
    waiter.start()
    time.sleep(0.3)
    started = time.monotonic()
    client.push_one(queue, "wake up")
    waiter.join(timeout=10)
    assert got and [m.payload for m in got[0].messages] == ["wake up"]
    assert time.monotonic() - started < 5


def test_long_poll_ends_empty(client: Client, queue: str) -> None:
    started = time.monotonic()
    res = client.pop(queue, wait_ms=300)
    assert res.messages == [] and res.leases == []
    assert 0.25 < time.monotonic() - started < 5
