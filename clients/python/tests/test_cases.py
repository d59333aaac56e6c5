"""The cases the Go, Python and Node clients share (clients/testdata/cases.json):
the same call must behave the same in the three. Every case of the file that
applies to this client is checked here."""

from __future__ import annotations

import asyncio
import inspect
import json
from typing import Any, Dict, List

import pytest

import queenside
from queenside import AsyncClient, AsyncConsumer, Client, Consumer, PushItem

from harness import REPO, Sidecar

CASES: Dict[str, Any] = json.loads((REPO / "clients" / "testdata" / "cases.json").read_text())

# A case's "q" stands for a queue of the test's own.
PLACEHOLDER_QUEUE = "q"


def part(value: Any) -> Any:
    """A transaction id part as the cases write it: {"bytes": hex}, {"int": decimal}, or the JSON value."""
    if isinstance(value, dict):
        if "bytes" in value:
            return bytes.fromhex(value["bytes"])
        return int(value["int"])
    return value


@pytest.mark.parametrize("case", CASES["transactionIds"], ids=lambda c: repr(c["parts"]))
def test_transaction_ids(case: Dict[str, Any]) -> None:
    assert queenside.transaction_id(*[part(p) for p in case["parts"]]) == case["id"]


@pytest.mark.parametrize("case", CASES["transactionIdRefusals"], ids=lambda c: c["why"])
def test_transaction_id_refusals(case: Dict[str, Any]) -> None:
    with pytest.raises(TypeError) as refused:
        queenside.transaction_id(*case["parts"])
    if case["parts"]:
        # The part's position and type are named.
        kind = {bool: "bool", float: "float", type(None): "None"}[type(case["parts"][0])]
        assert "part 0" in str(refused.value) and kind in str(refused.value)
    # A refused part is refused wherever it stands.
    if case["parts"]:
        with pytest.raises(TypeError, match="part 2"):
            queenside.transaction_id("order", 1, *case["parts"])


def test_bytearray_parts_are_bytes() -> None:
    assert queenside.transaction_id(bytearray(b"\x00\xff")) == queenside.transaction_id(b"\x00\xff")


@pytest.mark.parametrize("consumer", [Consumer, AsyncConsumer])
def test_consume_defaults(consumer: type) -> None:
    defaults = CASES["consumeDefaults"]
    params = inspect.signature(consumer.__init__).parameters
    assert params["batch"].default == defaults["batch"]
    assert params["partitions"].default == defaults["partitions"]
    assert params["concurrency"].default == defaults["concurrency"]
    assert params["wait_ms"].default == defaults["waitMs"]
    assert params["stop_on_signals"].default is defaults["stopOnSignals"]
    backoff = params["failure_backoff"].default
    assert backoff == queenside.DEFAULT_FAILURE_BACKOFF
    assert (backoff.initial * 1000, backoff.max * 1000) == (
        defaults["failureBackoff"]["initialMs"],
        defaults["failureBackoff"]["maxMs"],
    )
    # Client.consume and AsyncClient.consume add no defaults of their own.
    for consume in (Client.consume, AsyncClient.consume):
        assert set(inspect.signature(consume).parameters) == {"self", "queue", "handler", "group", "stop", "options"}


@pytest.mark.parametrize("consumer", [Consumer, AsyncConsumer])
@pytest.mark.parametrize("concurrency", [0, CASES["concurrencyMax"] + 1, True, 1.5])
def test_concurrency_out_of_bounds_is_refused(consumer: type, concurrency: Any) -> None:
    # Refused in the constructor, before anything is sent: no client is needed.
    with pytest.raises(ValueError, match=f"concurrency must be an integer from 1 to {CASES['concurrencyMax']}"):
        consumer(None, "q", lambda m: None, concurrency=concurrency)


@pytest.mark.parametrize("case", CASES["failureBackoffDelays"], ids=lambda c: f"{c['failures']} failures")
def test_failure_backoff_delays(case: Dict[str, Any]) -> None:
    assert round(queenside.DEFAULT_FAILURE_BACKOFF.delay(case["failures"]) * 1000) == case["delayMs"]


def python_item(item: Dict[str, Any], queue: str) -> Dict[str, Any]:
    return {k: (queue if k == "queue" and v == PLACEHOLDER_QUEUE else v) for k, v in item.items()}


@pytest.mark.parametrize("case", CASES["pushRefusals"], ids=lambda c: c["error"])
def test_push_refusals(client: Client, queue: str, case: Dict[str, Any]) -> None:
    item = python_item(case["item"], queue)
    # A dict as it is, and the PushItem with the same fields.
    for refused in (item, PushItem(**item)):
        with pytest.raises(queenside.InvalidArgumentError) as caught:
            client.push(refused)
        assert caught.value.code == "invalid_argument"
        assert caught.value.message == f"push item 0: {case['error']}"
    # Refused before anything is sent: the valid item before it is not stored.
    with pytest.raises(queenside.InvalidArgumentError, match=f"push item 1: {case['error']}"):
        client.push([PushItem(queue, "valid"), item])
    with pytest.raises(queenside.InvalidArgumentError, match=f"push item 1: {case['error']}"):
        client.transaction(pushes=[PushItem(queue, "valid"), item])
    assert client.pop(queue, auto_ack=True).messages == []


@pytest.mark.parametrize("case", CASES["pushAccepted"], ids=lambda c: c["why"])
def test_push_accepted(client: Client, queue: str, case: Dict[str, Any]) -> None:
    item = python_item(case["item"], queue)
    results = client.push(item) + client.push(PushItem(**item))
    assert [r.status for r in results] == ["queued", "queued"]
    got = client.pop(queue, batch=10, auto_ack=True).messages
    assert [(m.payload_raw, m.payload) for m in got] == [(b"\xc0", case["item"]["payload"])] * 2


def unknown_option_error(sidecar: Sidecar, client: Client, queue: str, case: Dict[str, Any]) -> BaseException:
    options = case["options"]
    if case["call"] == "pop":
        with pytest.raises(TypeError) as caught:
            client.pop(queue, **options)
        return caught.value
    if case["call"] == "consume":
        with pytest.raises(TypeError) as caught:
            client.consume(queue, lambda m: None, **options)
        assert "wait_ms" in str(caught.value)  # the known ones are listed

        async def consume_async() -> None:
            async with AsyncClient(sidecar.socket) as qs:
                with pytest.raises(TypeError) as caught_async:
                    await qs.consume(queue, lambda m: None, **options)
                assert str(caught_async.value) == str(caught.value)

        asyncio.run(consume_async())
        return caught.value
    assert case["call"] == "pushItem"
    with pytest.raises(TypeError) as refused:
        client.push(python_item(options, queue))
    assert "transactionId" in str(refused.value)  # the known ones are listed
    return refused.value


@pytest.mark.parametrize("case", CASES["unknownOptions"], ids=lambda c: c["call"])
def test_unknown_options_are_refused_by_name(sidecar: Sidecar, client: Client, queue: str, case: Dict[str, Any]) -> None:
    error = unknown_option_error(sidecar, client, queue, case)
    # Python's own keyword check names the first unknown keyword; the
    # checks of this client name every one.
    names: List[str] = case["names"] if case["call"] != "pop" else case["names"][:1]
    for name in names:
        assert repr(name) in str(error) or f" {name}" in str(error), (name, str(error))
    assert client.pop(queue, auto_ack=True).messages == []  # nothing was pushed


def test_ack_item_codes_have_their_texts() -> None:
    # The table is generated from protocol/ (protocol.ItemCodes), as Go's
    # and Node's are: protocol's tests fail when it differs.
    assert queenside.ACK_ITEM_CODES[queenside.ALREADY_ACKED] == "already acknowledged"
    assert queenside.ALREADY_ACKED == "already_acked"
    for code, text in queenside.ACK_ITEM_CODES.items():
        assert str(queenside.AckItemResult(3, False, code)) == f"ack item 3: {text} ({code})"
