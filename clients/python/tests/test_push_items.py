"""What push takes: one item or a list, PushItems or dicts, checked before anything is sent."""

from __future__ import annotations

import asyncio

import pytest

import queenside
from queenside import AsyncClient, Client, PushItem

from harness import Sidecar


def payloads(client: Client, queue: str) -> list:  # type: ignore[type-arg]
    return [m.payload for m in client.pop(queue, batch=100, partitions=10, auto_ack=True).messages]


def test_one_item_or_a_list_of_items_and_dicts(client: Client, queue: str) -> None:
    (one,) = client.push(PushItem(queue, "one", transaction_id="t-1"))
    assert (one.status, one.transaction_id) == ("queued", "t-1")
    (wire,) = client.push({"queue": queue, "payload": "wire names", "transactionId": "t-2", "partition": "p"})
    (python,) = client.push({"queue": queue, "payload": "python names", "transaction_id": "t-3", "trace_id": "abc"})
    assert (wire.transaction_id, wire.partition, python.transaction_id) == ("t-2", "p", "t-3")
    mixed = client.push([PushItem(queue, "a"), {"queue": queue, "payload": "b"}])
    generated = client.push(PushItem(queue, n) for n in range(2))
    assert [r.status for r in mixed + generated] == ["queued"] * 4
    assert sorted(map(str, payloads(client, queue))) == sorted(["one", "wire names", "python names", "a", "b", "0", "1"])
    # A repeat of a dict's transaction id is a duplicate, as a PushItem's is.
    assert client.push({"queue": queue, "payload": "again", "transactionId": "t-1"})[0].status == "duplicate"


def test_what_is_not_an_item_is_a_type_error(client: Client, queue: str) -> None:
    for wrong, where in (("text", "push takes"), (42, "push takes"), ([PushItem(queue, 1), 42], "push item 1")):
        with pytest.raises(TypeError, match=where):
            client.push(wrong)  # type: ignore[arg-type]
    assert payloads(client, queue) == []


def test_a_dict_naming_a_field_twice_is_refused(client: Client, queue: str) -> None:
    with pytest.raises(TypeError, match="push item 0: transaction_id is given twice"):
        client.push({"queue": queue, "payload": 1, "transactionId": "a", "transaction_id": "b"})
    with pytest.raises(TypeError, match=r"push item 0: unknown keys 'txid', 'paylod'"):
        client.push({"queue": queue, "payload": 1, "txid": "a", "paylod": 2})
    assert payloads(client, queue) == []


def test_none_given_is_a_payload_and_a_missing_one_is_refused(client: Client, queue: str) -> None:
    client.push_one(queue, None)
    client.push(PushItem(queue, None))
    assert payloads(client, queue) == [None, None]
    with pytest.raises(queenside.InvalidArgumentError, match="push item 0: payload is required"):
        client.push(PushItem(queue))
    with pytest.raises(queenside.InvalidArgumentError, match="push item 0: queue is required"):
        client.push({"queue": None, "payload": 1})


def test_a_forwarded_item_without_payload_ends_the_loop_before_it_is_sent(client: Client, queue: str) -> None:
    client.push_one(queue, "in")
    out = queue + "-out"
    with pytest.raises(queenside.InvalidArgumentError, match="payload is required"):
        client.consume(queue, lambda m: [PushItem(out)], wait_ms=300, stop_on_signals=False)
    assert payloads(client, out) == []


def test_transactions_take_dicts_too(client: Client, queue: str) -> None:
    res = client.transaction(pushes={"queue": queue, "payload": {"k": 1}, "transactionId": "tx"})
    assert [p.status for p in res.pushes] == ["queued"]
    assert payloads(client, queue) == [{"k": 1}]


def test_the_asyncio_client_takes_the_same(sidecar: Sidecar, client: Client, queue: str) -> None:
    async def main() -> None:
        async with AsyncClient(sidecar.socket) as qs:
            assert [r.status for r in await qs.push({"queue": queue, "payload": None})] == ["queued"]
            assert [r.status for r in await qs.push(PushItem(queue, 2))] == ["queued"]
            with pytest.raises(queenside.InvalidArgumentError, match="push item 0: payload is required"):
                await qs.push({"queue": queue})

    asyncio.run(main())
    assert payloads(client, queue) == [None, 2]
