"""Starting and stopping the consume loops: no handler, signals, and a stop
that does not wait out a long-poll, in both loops, against a real sidecar."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from typing import Any, Callable, Dict, List

import pytest

import queenside
from queenside import AsyncClient, AsyncConsumer, Client, Consumer, Message, PushItem, QueueOptions

from harness import Sidecar


def count_calls(client: Any, *names: str) -> Dict[str, int]:
    calls = {name: 0 for name in names}
    for name in names:
        real = getattr(client, name)

        def wrapped(*args: Any, _real: Any = real, _name: str = name, **kw: Any) -> Any:
            calls[_name] += 1
            return _real(*args, **kw)

        setattr(client, name, wrapped)
    return calls


@pytest.mark.parametrize("handler", [None, 42, "handler"])
def test_no_handler_is_refused_before_any_request(sidecar: Sidecar, client: Client, queue: str, handler: Any) -> None:
    calls = count_calls(client, "pop", "ack_and_pop", "ack")
    started = time.monotonic()
    with pytest.raises(TypeError, match="consume needs a handler") as refused:
        client.consume(queue, handler)
    assert ("None" if handler is None else type(handler).__name__) in str(refused.value)
    with pytest.raises(TypeError, match="consume needs a handler"):
        Consumer(client, queue, handler)

    async def main() -> None:
        async with AsyncClient(sidecar.socket) as qs:
            async_calls = count_calls(qs, "pop", "ack_and_pop", "ack")
            with pytest.raises(TypeError, match="consume needs a handler"):
                await qs.consume(queue, handler)
            with pytest.raises(TypeError, match="consume needs a handler"):
                AsyncConsumer(qs, queue, handler)
            assert set(async_calls.values()) == {0}

    asyncio.run(main())
    assert time.monotonic() - started < 5
    assert set(calls.values()) == {0}


def test_a_stop_does_not_wait_out_the_long_poll(sidecar: Sidecar, client: Client, queue: str) -> None:
    client.configure(queue, QueueOptions(lease_seconds=30))
    consumer = Consumer(client, queue, lambda m: None, group="g", stop_on_signals=False)
    assert consumer.wait_ms == 5000  # the default: a long-poll of 5 s
    done: List[float] = []
    runner = threading.Thread(target=lambda: (consumer.run(), done.append(time.monotonic())))
    runner.start()
    time.sleep(1.0)  # the first pop is waiting now
    stopped = time.monotonic()
    consumer.stop()
    runner.join(timeout=10)
    assert done and done[0] - stopped < 2.0, "the stop waited for the long-poll"
    assert_the_late_answer_is_given_back(sidecar, client, queue)


def assert_the_late_answer_is_given_back(sidecar: Sidecar, client: Client, queue: str) -> None:
    """The pop the loop stopped waiting for still waits in the sidecar, on
    the same connection: it takes what is pushed now, and the loop gives it
    back when the answer comes, so that another consumer gets it at once
    rather than after the 30 s lease."""
    client.push_one(queue, "after the stop")
    time.sleep(0.5)  # the abandoned pop has taken it by now
    with Client(sidecar.socket) as other:
        started = time.monotonic()
        got = other.pop(queue, group="g", wait_ms=5000)
        assert [m.payload for m in got.messages] == ["after the stop"]
        assert time.monotonic() - started < 4


def test_the_asyncio_loop_does_not_wait_out_the_long_poll(sidecar: Sidecar, client: Client, queue: str) -> None:
    client.configure(queue, QueueOptions(lease_seconds=30))

    async def main() -> None:
        async with AsyncClient(sidecar.socket) as qs:
            consumer = AsyncConsumer(qs, queue, lambda m: None, group="g", stop_on_signals=False)
            assert consumer.wait_ms == 5000
            run = asyncio.ensure_future(consumer.run())
            await asyncio.sleep(1.0)
            stopped = time.monotonic()
            consumer.stop()
            await asyncio.wait_for(run, timeout=10)
            assert time.monotonic() - stopped < 2.0, "the stop waited for the long-poll"
            # The connection stays open: the late answer comes to it.
            await asyncio.get_running_loop().run_in_executor(None, assert_the_late_answer_is_given_back, sidecar, client, queue)

    asyncio.run(main())


def test_a_stop_during_a_carried_long_poll_keeps_the_acks(client: Client, queue: str) -> None:
    client.push([PushItem(queue, n) for n in range(3)])
    consumer: List[Consumer] = []
    handled: List[int] = []

    def handler(m: Message) -> None:
        handled.append(m.payload)

    consumer.append(Consumer(client, queue, handler, group="g", batch=3, stop_on_signals=False))
    timer = threading.Timer(1.5, consumer[0].stop)  # the acks' ack_and_pop is waiting by then
    timer.start()
    started = time.monotonic()
    stats = consumer[0].run()
    assert time.monotonic() - started < 3
    assert handled == [0, 1, 2] and stats.completed == 3
    # The acks went with the pop the loop gave up on: applied all the same.
    time.sleep(0.3)
    (partition,) = client.stats(queue).partitions
    assert partition.groups[0].cursor == 3


def signal_handler_restored_at_once(sig: int, before: Callable[[], Any]) -> Callable[[Message], None]:
    """A handler that sends sig on its second message, then checks, while the
    loop still runs, that the previous handling (``before()``) was put back at once."""
    seen: List[Any] = []

    def handler(m: Message) -> None:
        seen.append(m.payload)
        if len(seen) == 2:
            os.kill(os.getpid(), sig)
            deadline = time.monotonic() + 5
            while signal.getsignal(sig) is not before() and time.monotonic() < deadline:
                time.sleep(0.01)
            seen.append(signal.getsignal(sig) is before())

    handler.seen = seen  # type: ignore[attr-defined]
    return handler


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_signals_stop_by_default_and_release_the_rest(client: Client, queue: str, sig: int) -> None:
    client.push([PushItem(queue, n) for n in range(5)])
    before = signal.getsignal(sig)
    handler = signal_handler_restored_at_once(sig, lambda: before)
    stats = client.consume(queue, handler, group="g", batch=5)
    assert handler.seen == [0, 1, True]  # type: ignore[attr-defined]
    assert (stats.completed, stats.released_leases) == (2, 1)
    assert signal.getsignal(sig) is before
    started = time.monotonic()
    assert [m.payload for m in client.pop(queue, group="g", batch=5).messages] == [2, 3, 4]
    assert time.monotonic() - started < 1


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_the_asyncio_loop_stops_on_signals_by_default(sidecar: Sidecar, client: Client, queue: str, sig: int) -> None:
    client.push([PushItem(queue, n) for n in range(5)])
    before = signal.getsignal(sig)
    # What asyncio.run itself set (its own Ctrl-C handling), as the loop found it.
    in_loop: List[Any] = []
    handler = signal_handler_restored_at_once(sig, lambda: in_loop[0])

    # The signal's handler runs on the event loop, so the check runs in a thread.
    async def handle(m: Message) -> None:
        await asyncio.get_running_loop().run_in_executor(None, handler, m)

    async def main() -> queenside.ConsumeStats:
        in_loop.append(signal.getsignal(sig))
        async with AsyncClient(sidecar.socket) as qs:
            return await qs.consume(queue, handle, group="g", batch=5)

    stats = asyncio.run(main())
    assert handler.seen == [0, 1, True]  # type: ignore[attr-defined]
    assert (stats.completed, stats.released_leases) == (2, 1)
    assert signal.getsignal(sig) is before
    assert [m.payload for m in client.pop(queue, group="g", batch=5).messages] == [2, 3, 4]


def test_a_second_ctrl_c_interrupts(client: Client, queue: str) -> None:
    client.push([PushItem(queue, n) for n in range(3)])
    handled: List[int] = []

    def handler(m: Message) -> None:
        handled.append(m.payload)
        os.kill(os.getpid(), signal.SIGINT)  # the first asks the loop to stop
        time.sleep(0.3)
        os.kill(os.getpid(), signal.SIGINT)  # the second interrupts, as Ctrl-C does
        time.sleep(0.3)

    with pytest.raises(KeyboardInterrupt):
        client.consume(queue, handler, group="g", batch=3)
    assert handled == [0]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    time.sleep(0.5)  # the worker thread finishes its message


def test_stop_on_signals_false_leaves_signals_alone(client: Client, queue: str) -> None:
    seen: List[Any] = []
    consumer = Consumer(client, queue, lambda m: None, wait_ms=200, stop_on_signals=False)
    threading.Timer(0.3, lambda: (seen.append(signal.getsignal(signal.SIGTERM)), consumer.stop())).start()
    consumer.run()
    assert seen == [signal.SIG_DFL]
