"""transaction: acks and pushes commit together, or nothing does."""

from __future__ import annotations

import pytest

import queenside
from queenside import Client, PushItem


def test_commit_moves_the_cursor_and_stores_the_pushes(client: Client, queue: str) -> None:
    out = queue + "-out"
    client.push([PushItem(queue, i, transaction_id=f"in-{i}") for i in range(2)])
    pop = client.pop(queue, batch=2)
    res = client.transaction(
        acks=[m.completed() for m in pop.messages],
        pushes=[PushItem(out, m.payload * 10, transaction_id=queenside.transaction_id("x10", m.transaction_id)) for m in pop.messages],
    )
    assert [a.success for a in res.acks] == [True, True]
    assert [p.status for p in res.pushes] == ["queued", "queued"]
    assert client.stats(queue).partitions[0].groups[0].cursor == 2
    assert [m.payload for m in client.pop(out, batch=5, auto_ack=True).messages] == [0, 10]


def test_conflict_commits_nothing(client: Client, queue: str) -> None:
    out = queue + "-out"
    client.push_one(queue, "in")
    pop = client.pop(queue)
    client.release([pop.leases[0].lease_id])
    with pytest.raises(queenside.ConflictError) as caught:
        client.transaction(acks=[pop.messages[0].completed()], pushes=[PushItem(out, "never")])
    err = caught.value
    assert not err.retryable
    assert [(a.success, a.code) for a in err.acks] == [(False, "lease_expired")]
    # The partition is created ahead of the transaction; the message was rolled back.
    assert [(p.partition, p.head_offset) for p in client.stats(out).partitions] == [("Default", 0)]
    assert client.pop(queue).messages[0].redelivered


def test_malformed_push_fails_the_whole_transaction(client: Client, queue: str) -> None:
    with pytest.raises(queenside.InvalidArgumentError):
        client.transaction(pushes=[PushItem(queue, 1), PushItem("no spaces allowed", 2)])
    with pytest.raises(queenside.InvalidArgumentError):
        client.transaction()
