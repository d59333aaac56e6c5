"""Bulk actions on dead letters (revision 1.2): dlq's filter and count,
dlqReplay by filter, dlqDelete, dlqSummary."""

from __future__ import annotations

import asyncio
import datetime as dt

import pytest
from harness import Sidecar

import queenside
from queenside import AsyncClient, Client, DLQFilter, PushItem, QueueOptions


def fill_dead_letters(client: Client, queue: str, n: int) -> None:
    """n dead letters over n partitions (a failure ends its lease); even
    ones die of "timeout", odd ones of "bad input"."""
    client.configure(queue, QueueOptions(retry_limit=0))
    client.push([PushItem(queue, {"i": i}, partition=f"p{i}") for i in range(n)])
    pop = client.pop(queue, group="g", batch=n, partitions=n)
    assert len(pop.messages) == n
    res = client.ack([m.failed("timeout" if i % 2 == 0 else "bad input") for i, m in enumerate(pop.messages)])
    assert all(r.dead_lettered for r in res.results)


def test_filter_count_summary_replay_all_and_delete(client: Client, queue: str) -> None:
    fill_dead_letters(client, queue, 12)
    page = client.dlq(queue, error_contains="timeout", count=True, limit=2)
    assert (page.count, page.replayed_count, len(page.entries)) == (6, 0, 2)
    assert page.entries[0].error == "timeout"
    future = dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=1)
    assert client.dlq(queue, dead_from=future, count=True).count == 0
    assert client.dlq(queue, dead_to=future, count=True).count == 12

    summary = client.dlq_summary(queue)
    assert sorted((s.group, s.error, s.count, s.replayed) for s in summary) == [("g", "bad input", 6, 0), ("g", "timeout", 6, 0)]
    assert summary[0].first_dead_at <= summary[0].last_dead_at

    batches = []
    total = client.dlq_replay_all(DLQFilter(queue, error_contains="timeout"), on_progress=batches.append)
    assert (total.replayed, total.skipped, total.failed) == (6, 0, 0)
    assert len(batches) == 1 and all(r.status == "queued" for r in batches[0].results)
    again = client.dlq_replay_all(DLQFilter(queue, error_contains="timeout"))
    assert (again.replayed, again.skipped) == (0, 6)

    one = client.dlq_replay_batch(DLQFilter(queue), limit=5, include_replayed=True)
    assert (len(one.results), one.replayed) == (5, 5) and one.next_after_id is not None
    stats = client.stats(queue)
    assert sum(p.messages for p in stats.partitions) == 12 + 6 + 5

    assert client.dlq_delete_all(DLQFilter(queue, error_contains="bad")) == 6
    ids = [e.id for e in client.dlq(queue, limit=2).entries]
    assert client.dlq_delete(ids).deleted == 2
    assert client.dlq(queue, count=True).count == 4

    with pytest.raises(queenside.InvalidArgumentError):
        client.dlq_delete(DLQFilter(queue), limit=5000)
    with pytest.raises(queenside.NotFoundError):
        client.dlq_summary("never-made-" + queue)


def test_the_async_client_has_the_same_bulk_actions(sidecar: Sidecar, client: Client, queue: str) -> None:
    fill_dead_letters(client, queue, 4)

    async def main() -> None:
        async with AsyncClient(sidecar.socket) as qs:
            assert (await qs.dlq(queue, error_contains="bad", count=True)).count == 2
            assert sum(s.count for s in await qs.dlq_summary(queue)) == 4
            total = await qs.dlq_replay_all(DLQFilter(queue, error_contains="bad"))
            assert (total.replayed, total.skipped) == (2, 0)
            assert (await qs.dlq_replay_batch(DLQFilter(queue))).skipped == 2
            assert await qs.dlq_delete_all(DLQFilter(queue)) == 4
            assert (await qs.dlq_delete([10**12])).deleted == 0

    asyncio.run(main())
