"""unavailable, buffered pushes, the draining notice, DrainingError and unauthorized,
each on a sidecar of its own that these tests may break."""

from __future__ import annotations

import asyncio
import signal
import socket
import threading
import time
from pathlib import Path
from typing import Iterator, List

import pytest

from harness import Sidecar

import queenside
from queenside import Client


def database_url(directory: Path) -> str:
    return f"postgres://postgres@/queenside?host={directory}&port=5999&sslmode=disable"


@pytest.fixture
def blackhole_sidecar(sidecar_bin: Path, tmp_path: Path) -> Iterator[Sidecar]:
    """A sidecar whose database accepts connections and never answers.

    Its schema is then never ready (so database operations are unavailable)
    and each health round trip takes its full 2 seconds, which keeps a
    request in flight long enough to watch a drain from inside.
    """
    pgdir = tmp_path / "pg"
    pgdir.mkdir()
    hole = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    hole.bind(str(pgdir / ".s.PGSQL.5999"))
    hole.listen(128)
    sc = Sidecar(sidecar_bin, tmp_path, ["--database-url", database_url(pgdir), "--shutdown-grace", "5s"])
    sc.start(wait_healthy=False)
    try:
        yield sc
    finally:
        sc.stop()
        hole.close()


def test_unavailable_buffered_and_draining(blackhole_sidecar: Sidecar, queue: str) -> None:
    notices: List[str] = []
    client = Client(blackhole_sidecar.socket, on_notice=notices.append)

    with pytest.raises(queenside.UnavailableError) as caught:
        client.pop(queue)
    assert caught.value.retryable
    assert client.push_one(queue, "kept on disk", transaction_id="spooled-1").status == queenside.BUFFERED

    consume_error: List[BaseException] = []

    def consume() -> None:
        try:
            client.consume(queue, lambda m: None, wait_ms=200, retry_delay=0.1)
        except BaseException as exc:
            consume_error.append(exc)

    consumer = threading.Thread(target=consume)
    consumer.start()

    slow: List[queenside.HealthResult] = []
    in_flight = threading.Thread(target=lambda: slow.append(client.health()))
    in_flight.start()
    time.sleep(0.3)
    assert not client.draining
    blackhole_sidecar.signal(signal.SIGINT)
    assert client.draining_event.wait(5)
    assert notices == ["draining"]

    # The health call in flight keeps the connection open while the sidecar drains.
    with pytest.raises(queenside.DrainingError) as drained:
        client.push_one(queue, "too late")
    assert drained.value.retryable
    consumer.join(10)
    assert consume_error and isinstance(consume_error[0], queenside.DrainingError)
    in_flight.join(10)
    assert slow and slow[0].status in ("unavailable", "draining")

    # Once nothing is in flight the sidecar closes the connection and exits.
    assert blackhole_sidecar.proc is not None and blackhole_sidecar.proc.wait(20) == 0
    with pytest.raises(queenside.ConnectionClosedError):
        client.health()
    client.close()


def test_health_reports_the_outage(blackhole_sidecar: Sidecar) -> None:
    with Client(blackhole_sidecar.socket) as client:
        health = client.health()
    assert health.status == "unavailable" and not health.ok
    assert not health.database.ok and health.database.error


def test_unauthorized_peer(sidecar_bin: Path, tmp_path: Path) -> None:
    sc = Sidecar(sidecar_bin, tmp_path, ["--database-url", database_url(tmp_path), "--allow-uid", "4242"])
    sc.start(wait_healthy=False)
    try:
        client = Client(sc.socket)
        with pytest.raises(queenside.UnauthorizedError) as caught:
            client.hello()
        assert not caught.value.retryable
        # The sidecar closed the connection: every later call says why.
        with pytest.raises(queenside.UnauthorizedError):
            client.health()
        assert client.closed
        client.close()

        async def via_asyncio() -> None:
            async with queenside.AsyncClient(sc.socket) as qs:
                with pytest.raises(queenside.UnauthorizedError):
                    await qs.health()
                assert qs.closed

        asyncio.run(via_asyncio())
    finally:
        sc.stop()


def test_unreachable_database_retries_only_what_is_harmless(sidecar_bin: Path, tmp_path: Path, queue: str) -> None:
    """A real sidecar whose PostgreSQL cannot be reached answers unavailable
    at once (after its first attempt to migrate): stats is sent again until
    its timeout, pop is not."""
    sc = Sidecar(sidecar_bin, tmp_path, ["--database-url", database_url(tmp_path)])
    sc.start(wait_healthy=False)
    try:
        with Client(sc.socket, retry=None) as probe:
            deadline = time.monotonic() + 20
            while True:  # until the sidecar knows PostgreSQL is unreachable
                start = time.monotonic()
                with pytest.raises(queenside.UnavailableError):
                    probe.stats(queue, timeout=2)
                if time.monotonic() - start < 0.2 or time.monotonic() > deadline:
                    break
        with Client(sc.socket) as client:
            start = time.monotonic()
            with pytest.raises(queenside.UnavailableError):
                client.stats(queue, timeout=0.8)
            retried = time.monotonic() - start
            start = time.monotonic()
            with pytest.raises(queenside.UnavailableError):
                client.pop(queue, timeout=0.8)
            once = time.monotonic() - start
        # At least 25 + 50 + 100 + 200 ms of pauses fit in 800 ms.
        assert retried >= 0.35, f"stats failed after {retried:.2f}s: it was not retried"
        assert once < 0.3, f"pop failed after {once:.2f}s: it must not be retried"
    finally:
        sc.stop()
