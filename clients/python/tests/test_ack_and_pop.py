"""ack_and_pop: acks and the next pop in one request (protocol revision 1.2),
against a real sidecar, and against a fake one of revision 1.1 that ignores
the pop."""

from __future__ import annotations

import asyncio
from typing import Any, Dict, List
from urllib.parse import urlparse

import msgpack
import pytest

import queenside
from queenside import AsyncClient, Client, PushItem

from conftest import MAX_FRAME_BYTES
from fake_sidecar import FakeSidecar, Frame, error, result
from harness import Sidecar


def push_one_partition(client: Client, queue: str, payloads: List[Any]) -> None:
    client.push([PushItem(queue, p, partition="p", transaction_id=f"t-{i}") for i, p in enumerate(payloads)])


def test_it_returns_the_ack_results_and_the_next_messages(client: Client, queue: str, database_url: str) -> None:
    push_one_partition(client, queue, ["a", "b", "c", "d"])
    first = client.pop(queue, group="g", batch=2)
    # Stamped by PostgreSQL: the role the sidecar logs in as.
    assert {m.producer for m in first.messages} == {urlparse(database_url).username}
    res = client.ack_and_pop(first.messages, queue, group="g", batch=2)
    assert [r.success for r in res.results] == [True, True]
    (lease,) = res.leases
    assert (lease.lease_id, lease.released, lease.cursor) == (first.leases[0].lease_id, True, 2)
    assert res.pop_error is None and res.pop is not None
    # The pop came after the acks, in their transaction: it gets the rest.
    assert [(m.offset, m.payload) for m in res.pop.messages] == [(2, "c"), (3, "d")]
    assert [lease.from_offset for lease in res.pop.leases] == [2]

    # Items as ack takes them: a message (completed) beside a failed item.
    c, d = res.pop.messages
    again = client.ack_and_pop([c, d.failed("bad input")], queue, group="g", batch=2)
    assert [r.success for r in again.results] == [True, True]
    assert again.pop is not None
    assert [(m.offset, m.redelivered) for m in again.pop.messages] == [(3, True)]
    client.ack(again.pop.messages)
    assert client.stats(queue).partitions[0].groups[0].lag == 0


def test_a_long_poll_waits_once_the_acks_are_committed(client: Client, queue: str) -> None:
    push_one_partition(client, queue, ["only"])
    popped = client.pop(queue, group="g")
    res = client.ack_and_pop(popped.messages, queue, group="g", wait_ms=300)
    assert res.all_succeeded
    assert res.pop is not None and res.pop.messages == [] and res.pop.leases == []
    assert client.stats(queue).partitions[0].groups[0].lag == 0


def test_a_pop_that_fails_after_the_acks_is_pop_error(client: Client, queue: str) -> None:
    # The second message fits in a push frame but not in a pop's answer.
    push_one_partition(client, queue, ["small"])
    client.push_one(queue, b"x" * (MAX_FRAME_BYTES - 200), partition="p")
    popped = client.pop(queue, group="g")
    res = client.ack_and_pop(popped.messages, queue, group="g")
    assert res.all_succeeded and res.leases[0].cursor == 1  # the acks were applied
    assert isinstance(res.pop_error, queenside.OverloadedError)
    assert res.pop_error.code == "overloaded" and res.pop_error.retryable
    assert res.pop is not None and res.pop.messages == [] and res.pop.leases == []


def test_the_async_client_does_the_same(sidecar: Sidecar, client: Client, queue: str) -> None:
    push_one_partition(client, queue, [1, 2, 3])

    async def main() -> None:
        async with AsyncClient(sidecar.socket) as qs:
            first = await qs.pop(queue, group="g")
            res = await qs.ack_and_pop(first.messages, queue, group="g", batch=5)
            assert res.all_succeeded and res.pop is not None
            assert [m.payload for m in res.pop.messages] == [2, 3]
            last = await qs.ack_and_pop([m.completed() for m in res.pop.messages], queue, group="g", wait_ms=100)
            assert last.all_succeeded and last.pop is not None and last.pop.messages == []

    asyncio.run(main())
    assert client.stats(queue).partitions[0].groups[0].lag == 0


# -- a sidecar of revision 1.1: it ignores ack's pop --------------------------

NOW = msgpack.Timestamp(1_800_000_000, 0)
LEASE = {"leaseId": "L1", "queue": "q", "partition": "p", "group": "g", "fromOffset": 5, "toOffset": 5,
         "expiresAt": NOW, "headAttempts": 1}
MESSAGE = {"queue": "q", "partition": "p", "offset": 5, "messageId": "m5", "transactionId": "t5",
           "payload": 7, "committedAt": NOW, "leaseId": "L1", "redelivered": False}
ACKED = {"results": [{"index": 0, "success": True}], "leases": [{"leaseId": "L0", "released": True, "cursor": 5}]}


def revision_1_1(pop_answer: Any) -> Any:
    """Answers ack as a 1.1 sidecar does (no pop, no popError), and pop with pop_answer(request)."""

    def script(_n: int, req: Frame) -> List[Frame]:
        if req["op"] == "ack":
            return [result(req, ACKED)]
        return [pop_answer(req)]

    return script


def ack_item() -> queenside.AckItem:
    return queenside.AckItem(lease_id="L0", offset=4)


def test_without_pop_in_the_answer_it_pops_on_its_own() -> None:
    with FakeSidecar(revision_1_1(lambda req: result(req, {"messages": [MESSAGE], "leases": [LEASE]}))) as fake:
        with Client(fake.socket, retry=None) as qs:
            res = qs.ack_and_pop([ack_item()], "q", group="g", batch=5, wait_ms=100)
        assert fake.ops == ["ack", "pop"]
        ack_args: Dict[str, Any] = fake.requests[0]["args"]
        assert ack_args["pop"] == {"queue": "q", "group": "g", "batch": 5, "partitions": 1, "waitMs": 100}
        assert fake.requests[1]["args"] == ack_args["pop"]  # the same pop, sent on its own
    assert res.all_succeeded and res.pop_error is None and res.pop is not None
    (m,) = res.pop.messages
    assert (m.offset, m.payload, m.lease_id) == (5, 7, "L1")
    assert m.completed() == queenside.AckItem(lease_id="L1", offset=5)


def test_a_failed_pop_of_its_own_is_pop_error_beside_the_acks() -> None:
    with FakeSidecar(revision_1_1(lambda req: error(req, "overloaded"))) as fake:
        with Client(fake.socket, retry=None) as qs:
            res = qs.ack_and_pop([ack_item()], "q")
        assert fake.ops == ["ack", "pop"]
    assert res.all_succeeded
    assert isinstance(res.pop_error, queenside.OverloadedError)
    assert res.pop is not None and res.pop.messages == []


def test_the_async_client_pops_on_its_own_too() -> None:
    with FakeSidecar(revision_1_1(lambda req: result(req, {"messages": [MESSAGE], "leases": [LEASE]}))) as fake:

        async def main() -> queenside.AckResult:
            async with AsyncClient(fake.socket, retry=None) as qs:
                return await qs.ack_and_pop([ack_item()], "q", group="g")

        res = asyncio.run(main())
        assert fake.ops == ["ack", "pop"]
    assert res.pop is not None and [m.payload for m in res.pop.messages] == [7]


@pytest.mark.parametrize("answer", [{"pop": {"messages": [], "leases": []}}, {"popError": {"code": "overloaded", "message": "m", "retryable": True}}])
def test_an_answer_with_pop_or_pop_error_sends_no_second_pop(answer: Dict[str, Any]) -> None:
    def script(_n: int, req: Frame) -> List[Frame]:
        return [result(req, {**ACKED, **answer})]

    with FakeSidecar(script) as fake:
        with Client(fake.socket, retry=None) as qs:
            res = qs.ack_and_pop([ack_item()], "q")
        assert fake.ops == ["ack"]
    assert (res.pop is not None) == ("pop" in answer)
    assert (res.pop_error is not None) == ("popError" in answer)
