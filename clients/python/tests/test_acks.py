"""ack takes popped messages as they are, and the helpers that make ack items (clients/README.md)."""

from __future__ import annotations

import asyncio
import datetime as dt

import pytest

from harness import Sidecar

import queenside
from queenside import AsyncClient, Client, Message, PushItem, completed, failed, ops


def push(client: Client, queue: str, n: int) -> None:
    results = client.push([PushItem(queue, i, transaction_id=f"m{i}") for i in range(n)])
    assert all(r.status == queenside.QUEUED for r in results)


def test_ack_takes_what_pop_returned(client: Client, queue: str) -> None:
    push(client, queue, 3)
    res = client.pop(queue, batch=3)
    assert len(res.messages) == 3
    acked = client.ack(res.messages)
    assert [r.success for r in acked.results] == [True, True, True]
    assert acked.leases[0].released and acked.leases[0].cursor == 3


def test_ack_mixes_messages_and_items(client: Client, queue: str) -> None:
    push(client, queue, 2)
    first, second = client.pop(queue, batch=2).messages
    acked = client.ack([first, second.failed(ValueError("bad input"))])
    assert [r.success for r in acked.results] == [True, True]
    again = client.pop(queue, batch=2).messages
    assert [(m.offset, m.redelivered) for m in again] == [(1, True)]  # the failure rewound to it


def test_transaction_takes_messages(client: Client, queue: str) -> None:
    push(client, queue, 1)
    (message,) = client.pop(queue).messages
    out = f"{queue}-out"
    res = client.transaction([message], [PushItem(out, "forwarded", transaction_id="f1")])
    assert res.acks[0].success and res.pushes[0].status == queenside.QUEUED


def test_async_ack_takes_what_pop_returned(sidecar: Sidecar, queue: str) -> None:
    async def main() -> None:
        async with AsyncClient(sidecar.socket) as qs:
            await qs.push([PushItem(queue, i, transaction_id=f"a{i}") for i in range(2)])
            res = await qs.pop(queue, batch=2)
            acked = await qs.ack(res.messages)
            assert [r.success for r in acked.results] == [True, True]

    asyncio.run(main())


MESSAGE = Message(
    queue="q",
    partition="Default",
    offset=7,
    message_id="m7",
    transaction_id="t7",
    payload_raw=b"\x01",
    committed_at=dt.datetime.now(dt.timezone.utc),
    lease_id="lease-1",
)


def test_the_wire_items() -> None:
    # A message carries both offset and transactionId, and an item naming
    # both is refused: it goes as {leaseId, offset, status}.
    want = {"leaseId": "lease-1", "offset": 7, "status": "completed"}
    assert ops.ack([MESSAGE]).args == {"items": [want]}
    assert MESSAGE.completed().to_wire() == want == completed(MESSAGE).to_wire()
    assert MESSAGE.failed("no\x00good").to_wire() == {
        "leaseId": "lease-1",
        "offset": 7,
        "status": "failed",
        "error": "no\ufffdgood",  # a NUL would make the sidecar refuse the whole ack
    }
    assert failed(MESSAGE, KeyError("k")).error == "'k'"
    assert failed(MESSAGE, RuntimeError()).error == "RuntimeError"
    assert MESSAGE.failed().to_wire() == {"leaseId": "lease-1", "offset": 7, "status": "failed"}
    assert ops.transaction([MESSAGE], []).args["acks"] == [want]


def test_a_message_without_a_lease_is_refused_here() -> None:
    auto_acked = Message(**{**MESSAGE.__dict__, "lease_id": None})
    with pytest.raises(ValueError, match="auto_ack"):
        ops.ack([auto_acked])
    with pytest.raises(TypeError, match="AckItem or popped Message"):
        ops.ack([{"leaseId": "l", "offset": 1}])  # type: ignore[list-item]
