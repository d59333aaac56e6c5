"""The golden frames of protocol/testdata/golden decode and re-encode byte for
byte (PROTOCOL.md, section 7), and the client's own builders and readers
agree with them."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any, Dict

import pytest

from harness import REPO

import queenside
from queenside import ops
from queenside.envelope import Request, Response
from queenside.framing import body_length, frame

GOLDEN = REPO / "protocol" / "testdata" / "golden"
MANIFEST = json.loads((GOLDEN / "manifest.json").read_text())
UTC = dt.timezone.utc


def load(name: str) -> bytes:
    return (GOLDEN / f"{name}.bin").read_bytes()


def body_of(name: str) -> bytes:
    data = load(name)
    assert body_length(data[:4]) == len(data) - 4
    return data[4:]


@pytest.mark.parametrize("entry", MANIFEST["frames"], ids=[f["name"] for f in MANIFEST["frames"]])
def test_frame_round_trips(entry: Dict[str, str]) -> None:
    data = (GOLDEN / entry["file"]).read_bytes()
    assert body_length(data[:4]) == len(data) - 4
    decoder = {"request": Request.decode, "response": Response.decode, "notice": Response.decode}[entry["kind"]]
    value: Any = decoder(data[4:])
    assert frame(value.encode()) == data


def test_manifest_lists_every_frame() -> None:
    listed = {f["file"] for f in MANIFEST["frames"]}
    assert listed == {p.name for p in GOLDEN.glob("*.bin")}


def test_hello_request_built_by_client() -> None:
    op = ops.hello("golden/1")
    assert frame(Request(1, op.name, op.args).encode()) == load("request_hello")


def test_push_request_built_by_client() -> None:
    op = ops.push(
        [
            queenside.PushItem(
                "orders",
                ["sku-1", 2, True, None, 1.5],
                partition="eu-1",
                transaction_id="order-1001",
                trace_id="trace-1",
                headers={"source": "web"},
            ),
            queenside.PushItem("orders", "plain text payload, 32+ bytes long"),
        ]
    )
    assert frame(Request(2, op.name, op.args, timeout_ms=5000).encode()) == load("request_push")


def test_configure_request_built_by_client() -> None:
    op = ops.configure("orders", queenside.QueueOptions())
    assert frame(Request(3, op.name, op.args).encode()) == load("request_configure")


def test_push_response_read_by_client() -> None:
    resp = Response.decode(body_of("response_push"))
    results = ops.push([]).parse(resp.result or {})
    queued, duplicate, failed = results
    assert (queued.status, queued.offset, queued.partition) == ("queued", 0, "eu-1")
    assert queued.committed_at == dt.datetime(2026, 11, 30, 12, 0, 0, 123456, tzinfo=UTC)
    assert (duplicate.status, duplicate.offset) == ("duplicate", 300)
    assert duplicate.committed_at == dt.datetime(2026, 11, 30, 11, 59, 59, tzinfo=UTC)
    assert duplicate.message_id == queued.message_id
    assert failed.status == "failed" and not failed.ok
    assert isinstance(failed.error, queenside.InvalidArgumentError)
    assert failed.error.message == "queue: is required"
    with pytest.raises(queenside.InvalidArgumentError):
        failed.raise_for_status()


def test_pop_response_read_by_client() -> None:
    resp = Response.decode(body_of("response_pop"))
    pop = ops.pop("orders").parse(resp.result or {})
    first, second = pop.messages
    assert first.payload == ["sku-2", 1]
    assert first.payload_raw == b"\x92\xa5sku-2\x01"
    assert first.headers == {"source": "web"} and first.trace_id == "trace-2"
    assert first.redelivered and not second.redelivered
    assert second.payload == "plain" and second.trace_id is None and second.headers == {}
    (lease,) = pop.leases
    assert (lease.from_offset, lease.to_offset, lease.head_attempts, lease.group) == (41, 42, 2, "billing")
    assert first.completed().to_wire() == {"leaseId": lease.lease_id, "offset": 41, "status": "completed"}


def test_stats_response_read_by_client() -> None:
    resp = Response.decode(body_of("response_stats"))
    stats = ops.stats("orders").parse(resp.result or {})
    part = stats.partition("eu-1")
    assert part is not None
    assert (part.head_offset, part.messages) == (70000, 65536)
    assert part.groups == [queenside.GroupStats("billing", 65000, 5000, True)]


def test_error_responses_become_exceptions() -> None:
    err = queenside.errors.error_from_wire(Response.decode(body_of("response_error")).error)
    assert isinstance(err, queenside.InvalidArgumentError)
    assert (err.code, err.retryable, err.details) == ("invalid_argument", False, {"field": "items"})
    retryable = queenside.errors.error_from_wire(Response.decode(body_of("response_error_retryable")).error)
    assert isinstance(retryable, queenside.UnavailableError)
    assert retryable.retryable and retryable.details == {}


def test_draining_notice() -> None:
    resp = Response.decode(body_of("notice_draining"))
    assert (resp.id, resp.notice, resp.result, resp.error) == (0, "draining", None, None)
