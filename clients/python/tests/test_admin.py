"""hello, configure, queues, stats, groups, seek, deleteGroup, dlq, dlqReplay and health."""

from __future__ import annotations

import datetime as dt
import time

import pytest

import queenside
from queenside import Client, PushItem, QueueOptions


def test_hello(client: Client) -> None:
    hello = client.hello()
    assert (hello.protocol, hello.server) == (1, "queenside")
    assert hello.max_frame_bytes == 1 << 20 and hello.sidecar_id and hello.version


def test_health(client: Client) -> None:
    health = client.health()
    assert health.ok and health.database.ok
    assert health.database.latency_ms is not None and health.uptime_seconds > 0
    assert health.spool.records == 0 and not health.spool.replaying


def test_configure_queues_and_stats(client: Client, queue: str) -> None:
    opts = QueueOptions(lease_seconds=30, retry_limit=1, dedup_window_seconds=0, delay_seconds=0)
    assert client.configure(queue, opts) == opts
    info = next(q for q in client.queues() if q.queue == queue)
    assert (info.options, info.partitions) == (opts, 0)
    # Deduplication is off: the same id twice is two messages.
    client.push([PushItem(queue, 1, partition="a", transaction_id="same"), PushItem(queue, 2, partition="a", transaction_id="same")])
    client.push_one(queue, 3, partition="b")
    client.pop(queue, group="g1", partition="a")
    stats = client.stats(queue)
    assert [p.partition for p in stats.partitions] == ["a", "b"]
    a = stats.partition("a")
    assert a is not None and (a.head_offset, a.messages) == (2, 2)
    assert [(g.group, g.cursor, g.lag, g.leased) for g in a.groups] == [("g1", 0, 2, True)]
    assert client.configure(queue) == QueueOptions()  # no options: every default again


def test_groups_seek_and_delete(client: Client, queue: str) -> None:
    client.push([PushItem(queue, i, partition=p) for p in ("a", "b") for i in range(3)])
    pop = client.pop(queue, group="g", batch=10, partitions=2)
    client.ack([m.completed() for m in pop.messages])
    (info,) = client.groups(queue)
    assert (info.group, info.lag, info.leased_partitions, info.oldest_unacked_at) == ("g", 0, 0, None)

    cursors = client.seek(queue, "g", "beginning")
    assert [(c.partition, c.cursor) for c in cursors] == [("a", 0), ("b", 0)]
    assert client.groups(queue)[0].lag == 6
    assert client.groups(queue)[0].oldest_unacked_at is not None
    assert [c.cursor for c in client.seek(queue, "g", "end", partition="a")] == [3]
    # A time after every commit: each partition's cursor goes to its end.
    later = dt.datetime.now(dt.timezone.utc) + dt.timedelta(minutes=1)
    assert [c.cursor for c in client.seek(queue, "g", later)] == [3, 3]
    assert [c.cursor for c in client.seek(queue, "g", 0)] == [0, 0]  # epoch milliseconds

    assert client.delete_group(queue, "g") is True
    assert client.delete_group(queue, "g") is False
    assert client.groups(queue) == []
    with pytest.raises(queenside.NotFoundError):
        client.seek(queue, "g", "end", partition="nope")
    with pytest.raises(queenside.NotFoundError):
        client.groups("never-made-" + queue)


def test_dead_letters_and_replay(client: Client, queue: str) -> None:
    client.configure(queue, QueueOptions(retry_limit=0))
    client.push_one(queue, {"poison": True}, transaction_id="poison-1")
    pop = client.pop(queue, group="g")
    res = client.ack([pop.messages[0].failed("cannot parse")])
    assert res.results[0].dead_lettered
    assert client.pop(queue, group="g").messages == []  # the cursor moved past it

    page = client.dlq(queue, group="g")
    (entry,) = page.entries
    assert (entry.payload, entry.error, entry.failures, entry.transaction_id) == ({"poison": True}, "cannot parse", 1, "poison-1")
    assert page.next_after_id is None and entry.replayed_at is None

    (replayed,) = client.dlq_replay([entry.id])
    assert replayed.status == "queued" and replayed.offset == 1
    assert replayed.transaction_id and replayed.transaction_id != "poison-1"
    again = client.pop(queue, group="g")
    assert again.messages[0].payload == {"poison": True}
    entry = client.dlq(queue).entries[0]
    assert entry.replayed_at is not None and entry.replayed_offset == 1

    (missing,) = client.dlq_replay([10**12])
    assert missing.status == "failed" and isinstance(missing.error, queenside.NotFoundError)


def test_dlq_pages(client: Client, queue: str) -> None:
    client.configure(queue, QueueOptions(retry_limit=0))
    client.push([PushItem(queue, i, partition=f"p{i}") for i in range(3)])
    for _ in range(3):
        pop = client.pop(queue)
        client.ack([pop.messages[0].failed("no")])
    first = client.dlq(queue, limit=2)
    assert len(first.entries) == 2 and first.next_after_id is not None
    rest = client.dlq(queue, limit=2, after_id=first.next_after_id)
    assert len(rest.entries) == 1 and rest.next_after_id is None


def test_delay_holds_messages(client: Client, queue: str) -> None:
    client.configure(queue, QueueOptions(delay_seconds=1))
    client.push_one(queue, "later")
    assert client.pop(queue).messages == []
    started = time.monotonic()
    got = client.pop(queue, wait_ms=5000)
    assert [m.payload for m in got.messages] == ["later"] and time.monotonic() - started < 4.5
