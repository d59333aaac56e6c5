"""Every error class the main sidecar can be made to answer, and what becomes of the connection."""

from __future__ import annotations

import socket
import struct
from pathlib import Path
from typing import Iterator

import msgpack
import pytest

from conftest import MAX_FRAME_BYTES
from harness import Sidecar

import queenside
from queenside import Client, PushItem


def test_invalid_argument(client: Client, queue: str) -> None:
    with pytest.raises(queenside.InvalidArgumentError) as caught:
        client.pop(queue, batch=0)
    assert not caught.value.retryable and "batch" in caught.value.message
    with pytest.raises(queenside.InvalidArgumentError):
        client.configure(queue, queenside.QueueOptions(lease_seconds=0))
    with pytest.raises(queenside.InvalidArgumentError):
        client.push([])
    with pytest.raises(queenside.InvalidArgumentError):
        client.ack([queenside.AckItem("some-lease")])  # neither offset nor transaction id


def test_not_found(client: Client, queue: str) -> None:
    with pytest.raises(queenside.NotFoundError) as caught:
        client.stats(queue)
    assert caught.value.code == "not_found"
    with pytest.raises(queenside.NotFoundError):
        client.dlq(queue)


def test_unknown_op_and_raw_calls(client: Client, queue: str) -> None:
    with pytest.raises(queenside.UnknownOpError):
        client.call("frobnicate")
    with pytest.raises(queenside.UnknownOpError):
        client.call("")
    # call() reaches any op with a raw map; unknown keys are ignored.
    result = client.call("push", {"items": [{"queue": queue, "payload": 1}], "fromTheFuture": True})
    assert result["results"][0]["status"] == "queued"


def test_unsupported_protocol(client: Client) -> None:
    with pytest.raises(queenside.UnsupportedError):
        client.hello(protocol=2)


def test_bad_request_keeps_the_connection(client: Client) -> None:
    with pytest.raises(queenside.BadRequestError):
        client.call("push", [1, 2])  # type: ignore[arg-type]  # args must be a map
    assert client.health().ok


def test_bad_request_without_id_is_not_fatal(sidecar: Sidecar) -> None:
    """A frame whose id cannot be read is answered with id 0; the connection goes on."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as raw:
        raw.connect(sidecar.socket)
        raw.settimeout(10)
        for body in (msgpack.packb([1, 2]), msgpack.packb({"id": 9, "op": "health"})):
            raw.sendall(struct.pack(">I", len(body)) + body)
        stream = raw.makefile("rb")
        answers = []
        for _ in range(2):
            (size,) = struct.unpack(">I", stream.read(4))
            answers.append(msgpack.unpackb(stream.read(size), timestamp=0))
        by_id = {a["id"]: a for a in answers}
        assert by_id[0]["error"]["code"] == "bad_request"
        assert by_id[9]["result"]["status"] == "ok"


@pytest.fixture(scope="module")
def tiny_sidecar(sidecar_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sidecar]:
    """A sidecar whose frame limit is below the size at which a client asks for it."""
    sc = Sidecar(sidecar_bin, tmp_path_factory.mktemp("tiny"), ["--max-frame-bytes", "4096"])
    sc.start()
    try:
        yield sc
    finally:
        sc.stop()


def test_frame_too_large_from_the_sidecar_closes(tiny_sidecar: Sidecar, queue: str) -> None:
    # 8 KiB is too small for the client to ask the limit first: it is sent,
    # and the sidecar's answer, read before the connection goes, is told.
    with Client(tiny_sidecar.socket) as fresh:
        with pytest.raises(queenside.FrameTooLargeError) as caught:
            fresh.push([PushItem(queue, b"x" * 8192)])
        assert caught.value.details.get("local") is None
        assert "--max-frame-bytes" in caught.value.message
        with pytest.raises(queenside.ConnectionClosedError):
            fresh.health()
        assert fresh.closed


def test_frame_too_large_caught_before_it_is_sent_without_hello(sidecar: Sidecar, queue: str) -> None:
    # A large request makes the client ask the sidecar's limit first.
    with Client(sidecar.socket) as fresh:
        with pytest.raises(queenside.FrameTooLargeError) as caught:
            fresh.push([PushItem(queue, b"x" * (MAX_FRAME_BYTES + 10))])
        assert caught.value.details["local"] is True
        assert caught.value.details["maxFrameBytes"] == MAX_FRAME_BYTES
        assert "--max-frame-bytes" in caught.value.message
        assert fresh.health().ok  # the connection is still good


def test_frame_too_large_caught_locally_after_hello(client: Client, queue: str) -> None:
    client.hello()
    with pytest.raises(queenside.FrameTooLargeError) as caught:
        client.push([PushItem(queue, b"x" * (MAX_FRAME_BYTES + 10))])
    assert caught.value.details["local"] is True
    assert client.health().ok  # the connection is still good


def test_overloaded_when_a_message_cannot_be_delivered(client: Client, queue: str) -> None:
    # Fits in a push frame, but not in a pop result with its envelope and lease.
    client.push_one(queue, b"x" * (MAX_FRAME_BYTES - 200))
    with pytest.raises(queenside.OverloadedError) as caught:
        client.pop(queue)
    assert caught.value.retryable


def test_deadline_exceeded(client: Client, queue: str) -> None:
    items = [PushItem(queue, i, partition=f"p{i % 50}") for i in range(10000)]
    with pytest.raises(queenside.DeadlineExceededError) as caught:
        client.push(items, timeout=0.001)
    assert caught.value.retryable
    assert "local" not in caught.value.details  # the sidecar's answer, not a local give-up
    assert client.health().ok


def test_cannot_connect(tmp_path: "pytest.TempPathFactory") -> None:
    with pytest.raises(queenside.ConnectionClosedError) as caught:
        Client(f"{tmp_path}/nobody-here.sock")
    assert isinstance(caught.value, ConnectionError)


def test_closed_client_refuses_calls(sidecar: Sidecar) -> None:
    c = Client(sidecar.socket)
    c.close()
    with pytest.raises(queenside.ConnectionClosedError):
        c.health()
