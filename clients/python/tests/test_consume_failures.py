"""Failures in the consume loops are not silent: a warning per failure, a
growing backoff that holds the lease, and a second ack of a message that is
not taken for a loss; in both loops, against a real sidecar."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any, Dict, List, Tuple

import pytest

import queenside
from queenside import AckError, AsyncClient, Backoff, Client, Message, PushItem, QueueOptions

from harness import Sidecar


def failure_records(caplog: pytest.LogCaptureFixture) -> List[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "queenside" and r.getMessage().startswith("queenside: handler failed")]


def test_a_second_ack_answers_already_acked(client: Client, queue: str) -> None:
    client.push_one(queue, "once")
    (m,) = client.pop(queue, group="g").messages
    first = client.ack([m])
    assert first.all_succeeded
    (again,) = client.ack([m]).results
    assert (again.success, again.code) == (False, queenside.ALREADY_ACKED)
    assert str(again) == "ack item 0: already acknowledged (already_acked)"
    # Nothing moved: the message is not delivered again.
    assert client.pop(queue, group="g").messages == []


def test_a_failure_is_logged_at_warning_with_its_fields(client: Client, queue: str, caplog: pytest.LogCaptureFixture) -> None:
    client.push([PushItem(queue, n, partition="p") for n in range(2)])
    stop = threading.Event()

    def handler(m: Message) -> None:
        if m.offset == 1 and not m.redelivered:
            raise RuntimeError("downstream said no")
        if m.offset == 1:
            stop.set()

    with caplog.at_level(logging.WARNING, logger="queenside"):
        stats = client.consume(queue, handler, group="g", stop=stop, wait_ms=300, failure_backoff=Backoff(initial=0.2, max=1))
    assert (stats.completed, stats.failed) == (2, 1)
    (record,) = failure_records(caplog)
    assert record.levelno == logging.WARNING
    assert record.getMessage() == (
        f"queenside: handler failed on {queue}/p@1 (failure 1, retry in 0.2s): RuntimeError: downstream said no"
    )
    fields = {k: getattr(record, k) for k in ("queue", "partition", "offset", "failures", "delay")}
    assert fields == {"queue": queue, "partition": "p", "offset": 1, "failures": 1, "delay": 0.2}
    assert isinstance(record.error, RuntimeError) and record.exc_info is not None  # type: ignore[attr-defined]


def deliveries_of_a_failing_head(
    client: Client, queue: str, fail_times: int, backoff: Backoff, run: Any, **options: Any
) -> List[Tuple[int, bool, float]]:
    """Consumes a partition of three messages whose first fails ``fail_times``
    times; (offset, redelivered, monotonic time) of each delivery."""
    client.push([PushItem(queue, n, partition="p") for n in range(3)])
    seen: List[Tuple[int, bool, float]] = []
    failures = [0]

    def handler(m: Message) -> bool:
        seen.append((m.offset, m.redelivered, time.monotonic()))
        if m.offset == 0 and failures[0] < fail_times:
            failures[0] += 1
            raise RuntimeError(f"failure {failures[0]}")
        return m.offset == 2  # done: stop

    run(handler, backoff, options)
    return seen


def run_sync(client: Client, queue: str):  # type: ignore[no-untyped-def]
    def run(handler: Any, backoff: Backoff, options: Dict[str, Any]) -> None:
        stop = threading.Event()
        client.consume(queue, lambda m: stop.set() if handler(m) else None, group="g", batch=3, stop=stop, wait_ms=300,
                       failure_backoff=backoff, stop_on_signals=False, **options)

    return run


def run_async(sidecar: Sidecar, queue: str):  # type: ignore[no-untyped-def]
    def run(handler: Any, backoff: Backoff, options: Dict[str, Any]) -> None:
        async def main() -> None:
            async with AsyncClient(sidecar.socket) as qs:
                stop = asyncio.Event()

                async def handle(m: Message) -> None:
                    if handler(m):
                        stop.set()

                await qs.consume(queue, handle, group="g", batch=3, stop=stop, wait_ms=300, failure_backoff=backoff,
                                 stop_on_signals=False, **options)

        asyncio.run(main())

    return run


@pytest.mark.parametrize("loop", ["sync", "asyncio"])
def test_retries_wait_a_growing_backoff_holding_the_lease(
    sidecar: Sidecar, client: Client, queue: str, loop: str, caplog: pytest.LogCaptureFixture
) -> None:
    client.configure(queue, QueueOptions(retry_limit=5))
    run = run_sync(client, queue) if loop == "sync" else run_async(sidecar, queue)
    # During the first wait, another consumer of the group finds the
    # partition still leased, though the lease is 1 s and the wait 1.5 s.
    others: List[List[Any]] = []

    def look() -> None:
        time.sleep(1.2)
        with Client(sidecar.socket) as other:
            got = other.pop(queue, group="g", batch=3, lease_seconds=1)
            others.append(got.messages)
            if got.leases:  # the test fails; let the loop go on
                other.release([lease.lease_id for lease in got.leases])

    looker = threading.Thread(target=look)
    looker.start()
    with caplog.at_level(logging.WARNING, logger="queenside"):
        seen = deliveries_of_a_failing_head(client, queue, 3, Backoff(initial=1.5, max=2.0), run, lease_seconds=1, renew_every=0.3)
    looker.join()
    assert others == [[]]
    # Order kept: the failed head again and again, then the rest once.
    assert [(offset, redelivered) for offset, redelivered, _ in seen] == [(0, False), (0, True), (0, True), (0, True), (1, True), (2, True)]
    gaps = [b[2] - a[2] for a, b in zip(seen, seen[1:4])]
    for gap, delay in zip(gaps, [1.5, 2.0, 2.0]):
        assert delay <= gap < delay + 1.5, gaps
    # The failure count is the lease's headAttempts; the delays double up to max.
    assert [(r.failures, r.delay) for r in failure_records(caplog)] == [(1, 1.5), (2, 2.0), (3, 2.0)]  # type: ignore[attr-defined]
    # The retry budget charged once per failure, as without a backoff: 3 of 5.
    assert client.dlq(queue).entries == []


@pytest.mark.parametrize("loop", ["sync", "asyncio"])
def test_each_failure_charges_the_retry_budget_once(
    sidecar: Sidecar, client: Client, queue: str, loop: str, caplog: pytest.LogCaptureFixture
) -> None:
    client.configure(queue, QueueOptions(retry_limit=1))
    run = run_sync(client, queue) if loop == "sync" else run_async(sidecar, queue)
    with caplog.at_level(logging.WARNING, logger="queenside"):
        seen = deliveries_of_a_failing_head(client, queue, 5, Backoff(initial=0.1, max=0.2), run)
    # Two failures: the second passes the limit of 1 and dead-letters it.
    assert [(offset, redelivered) for offset, redelivered, _ in seen] == [(0, False), (0, True), (1, True), (2, True)]
    (entry,) = client.dlq(queue).entries
    assert (entry.offset, entry.failures, entry.error) == (0, 2, "RuntimeError: failure 2")
    assert any(r.getMessage() == f"queenside: {queue}/p@0 dead-lettered: it failed past its queue's retry limit" for r in caplog.records)


def test_without_backoff_the_failed_ack_goes_at_once(client: Client, queue: str) -> None:
    seen = deliveries_of_a_failing_head(client, queue, 1, None, run_sync(client, queue))  # type: ignore[arg-type]
    assert [offset for offset, _, _ in seen] == [0, 0, 1, 2]
    assert seen[1][2] - seen[0][2] < 0.5


@pytest.mark.parametrize("loop", ["sync", "asyncio"])
def test_a_stop_during_the_backoff_acks_the_failure_at_once(sidecar: Sidecar, client: Client, queue: str, loop: str) -> None:
    client.configure(queue, QueueOptions(retry_limit=0))  # the first failure dead-letters
    client.push_one(queue, "fails")
    failed_at: List[float] = []

    def handler(m: Message) -> None:
        failed_at.append(time.monotonic())
        raise RuntimeError("no")

    long = Backoff(initial=30, max=30)
    if loop == "sync":
        stop = threading.Event()
        threading.Timer(1.0, stop.set).start()
        client.consume(queue, handler, stop=stop, wait_ms=300, failure_backoff=long, stop_on_signals=False)
    else:

        async def main() -> None:
            async with AsyncClient(sidecar.socket) as qs:
                stop = asyncio.Event()
                asyncio.get_running_loop().call_later(1.0, stop.set)
                await qs.consume(queue, handler, stop=stop, wait_ms=300, failure_backoff=long, stop_on_signals=False)

        asyncio.run(main())
    assert len(failed_at) == 1 and time.monotonic() - failed_at[0] < 2.5
    (entry,) = client.dlq(queue).entries  # the failed ack was sent
    assert entry.error == "RuntimeError: no"


def ack_it_first(client: Any) -> Any:
    """A handler that acks its message itself: the loop's own ack is then a second one."""

    def handler(m: Message) -> None:
        assert client.ack([m]).all_succeeded

    return handler


@pytest.mark.parametrize("ack_async", [False, True], ids=["carried", "ack_async"])
def test_already_acked_is_no_loss_in_the_loop(client: Client, queue: str, ack_async: bool, caplog: pytest.LogCaptureFixture) -> None:
    client.push([PushItem(queue, n) for n in range(4)])
    stop = threading.Event()
    handled: List[int] = []
    errors: List[AckError] = []
    own = ack_it_first(client)

    def handler(m: Message) -> None:
        own(m)
        handled.append(m.offset)
        if len(handled) == 4:
            stop.set()

    options: Dict[str, Any] = {"ack_async": True, "on_ack_error": errors.append} if ack_async else {}
    with caplog.at_level(logging.WARNING, logger="queenside"):
        # batch 1: the handler's ack ends the lease, so the loop's finds it gone.
        stats = client.consume(queue, handler, group="g", batch=1, stop=stop, wait_ms=300, stop_on_signals=False, **options)
    assert handled == [0, 1, 2, 3]
    assert (stats.completed, stats.lost_acks, stats.settle_errors) == (4, 0, 0)
    assert errors == []
    assert [r.getMessage() for r in caplog.records if r.name == "queenside"] == []


def test_already_acked_is_no_loss_in_the_asyncio_loop(sidecar: Sidecar, client: Client, queue: str, caplog: pytest.LogCaptureFixture) -> None:
    client.push([PushItem(queue, n) for n in range(4)])

    async def main() -> queenside.ConsumeStats:
        async with AsyncClient(sidecar.socket) as qs:
            stop = asyncio.Event()
            handled: List[int] = []

            async def handler(m: Message) -> None:
                assert (await qs.ack([m])).all_succeeded
                handled.append(m.offset)
                if len(handled) == 4:
                    stop.set()

            return await qs.consume(queue, handler, group="g", batch=1, stop=stop, wait_ms=300, stop_on_signals=False)

    with caplog.at_level(logging.WARNING, logger="queenside"):
        stats = asyncio.run(main())
    assert (stats.completed, stats.lost_acks, stats.settle_errors) == (4, 0, 0)
    assert [r.getMessage() for r in caplog.records if r.name == "queenside"] == []


def test_a_refused_ack_says_why_in_words() -> None:
    err = AckError([queenside.AckItem("lease", offset=0)], ["lease_expired"])
    assert str(err) == "1 ack item(s) refused: lease expired (lease_expired); those messages will be delivered again"
