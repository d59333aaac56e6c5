"""Retries of unavailable and draining answers (retry.py), against a scripted sidecar."""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from typing import Any, Callable, List

import pytest

from fake_sidecar import DRAINING_NOTICE, FakeSidecar, Frame, error, fail_first

import queenside
from queenside import AsyncClient, Client, Message, PushItem, RetryPolicy

MESSAGE = Message(
    queue="q",
    partition="Default",
    offset=3,
    message_id="m3",
    transaction_id="t3",
    payload_raw=b"\x01",
    committed_at=dt.datetime.now(dt.timezone.utc),
    lease_id="lease-1",
)

Call = Callable[[Client], Any]

# Each operation, answered unavailable once: sent again only if a repeat
# cannot do more than the first would have.
CASES: List[Any] = [
    ("configure", lambda c: c.configure("q"), True),
    ("stats", lambda c: c.stats("q"), True),
    ("queues", lambda c: c.queues(), True),
    ("groups", lambda c: c.groups("q"), True),
    ("dlq", lambda c: c.dlq("q"), True),
    ("health", lambda c: c.health(), True),
    ("maintenance read", lambda c: c.call("maintenance", {}), True),
    ("push with transaction ids", lambda c: c.push([PushItem("q", 1, transaction_id="a"), PushItem("q", 2, transaction_id="b")]), True),
    ("push with a generated id", lambda c: c.push([PushItem("q", 1, transaction_id="a"), PushItem("q", 2)]), False),
    ("pop", lambda c: c.pop("q"), False),
    ("ack", lambda c: c.ack([MESSAGE]), False),
    ("renew", lambda c: c.renew(["lease-1"]), False),
    ("release", lambda c: c.release(["lease-1"]), False),
    ("transaction", lambda c: c.transaction([MESSAGE], [PushItem("q", 1, transaction_id="a")]), False),
    ("seek", lambda c: c.seek("q", "g", "end"), False),
    ("delete_group", lambda c: c.delete_group("q", "g"), False),
    ("dlq_replay", lambda c: c.dlq_replay([1]), False),
    ("dlq_replay_batch", lambda c: c.dlq_replay_batch(queenside.DLQFilter("q")), False),
    ("dlq_delete", lambda c: c.dlq_delete([1]), False),
    ("dlq_summary", lambda c: c.dlq_summary("q"), True),
    ("maintenance change", lambda c: c.call("maintenance", {"push": True}), False),
]


@pytest.mark.parametrize("name,call,retried", CASES, ids=[c[0] for c in CASES])
def test_unavailable_is_retried_only_where_harmless(name: str, call: Call, retried: bool) -> None:
    with FakeSidecar(fail_first(1, "unavailable")) as fake, Client(fake.socket, timeout=5) as client:
        if retried:
            call(client)
            assert len(fake.requests) == 2, fake.ops
        else:
            with pytest.raises(queenside.UnavailableError):
                call(client)
            assert len(fake.requests) == 1, f"{fake.ops}: a call that may have had an effect was sent again"


def test_configure_is_retried_until_answered() -> None:
    with FakeSidecar(fail_first(2, "unavailable")) as fake, Client(fake.socket) as client:
        options = client.configure("q", queenside.QueueOptions(retry_limit=5))
    assert fake.ops == ["configure"] * 3
    assert options == queenside.QueueOptions()  # the scripted answer has no options: all defaults


def test_draining_is_retried_until_the_notice() -> None:
    # Refused before it was served: even a pop may be sent again.
    with FakeSidecar(fail_first(1, "draining")) as fake, Client(fake.socket) as client:
        assert client.pop("q").messages == []
    assert fake.ops == ["pop", "pop"]

    # Once the connection got the notice, no answer on it will change.
    def notice_then_draining(_n: int, req: Frame) -> List[Frame]:
        return [DRAINING_NOTICE, error(req, "draining")]

    with FakeSidecar(notice_then_draining) as fake, Client(fake.socket) as client:
        with pytest.raises(queenside.DrainingError):
            client.stats("q")
        assert client.draining
    assert len(fake.requests) == 1


def test_other_codes_are_not_retried() -> None:
    for code in ("overloaded", "internal", "deadline_exceeded", "invalid_argument"):
        with FakeSidecar(fail_first(1, code)) as fake, Client(fake.socket) as client:
            with pytest.raises(queenside.QueensideError) as caught:
                client.stats("q")
        assert caught.value.code == code and len(fake.requests) == 1


def test_retries_end_with_the_timeout() -> None:
    with FakeSidecar(fail_first(1 << 30, "unavailable")) as fake, Client(fake.socket, timeout=0.6) as client:
        start = time.monotonic()
        with pytest.raises(queenside.UnavailableError):
            client.stats("q")
        took = time.monotonic() - start
    # 50 ms doubling, each pause from half to all of it: attempts at about
    # 0, 50, 150 and 350 ms at the latest fit in 600 ms. No attempt starts
    # after the timeout; the last may end a little after it.
    assert len(fake.requests) >= 4 and took < 0.7, (len(fake.requests), took)
    timeouts = [r["timeoutMs"] for r in fake.requests]
    assert timeouts[0] == 600 and all(later < 600 for later in timeouts[1:]), timeouts


def test_without_a_timeout_retries_end_after_max_elapsed() -> None:
    policy = RetryPolicy(max_elapsed=0.4)
    with FakeSidecar(fail_first(1 << 30, "unavailable")) as fake, Client(fake.socket, timeout=None, retry=policy) as client:
        start = time.monotonic()
        with pytest.raises(queenside.UnavailableError):
            client.queues()
        took = time.monotonic() - start
    assert len(fake.requests) >= 3 and took < 0.5, (len(fake.requests), took)
    assert all("timeoutMs" not in r for r in fake.requests)


def test_retry_none_sends_once() -> None:
    with FakeSidecar(fail_first(1, "unavailable")) as fake, Client(fake.socket, retry=None) as client:
        with pytest.raises(queenside.UnavailableError):
            client.configure("q")
    assert len(fake.requests) == 1


def test_async_client_follows_the_same_rule() -> None:
    async def main() -> None:
        with FakeSidecar(fail_first(2, "unavailable")) as fake:
            async with AsyncClient(fake.socket) as qs:
                await qs.configure("q")
            assert fake.ops == ["configure"] * 3
        with FakeSidecar(fail_first(1, "unavailable")) as fake:
            async with AsyncClient(fake.socket) as qs:
                with pytest.raises(queenside.UnavailableError):
                    await qs.push([PushItem("q", 1)])  # its id would be the sidecar's
            assert fake.ops == ["push"]
        with FakeSidecar(fail_first(1, "unavailable")) as fake:
            async with AsyncClient(fake.socket) as qs:
                with pytest.raises(queenside.UnavailableError):
                    await qs.ack([MESSAGE])
            assert fake.ops == ["ack"]

    asyncio.run(main())


def test_async_cancellation_ends_the_pause() -> None:
    async def main() -> None:
        policy = RetryPolicy(initial_delay=4.0, max_elapsed=20.0)
        with FakeSidecar(fail_first(1 << 30, "unavailable")) as fake:
            async with AsyncClient(fake.socket, retry=policy) as qs:
                task = asyncio.ensure_future(qs.stats("q"))
                await asyncio.sleep(0.1)
                start = time.monotonic()
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
                assert time.monotonic() - start < 0.5
            assert len(fake.requests) == 1

    asyncio.run(main())
