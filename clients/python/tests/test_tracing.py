"""OpenTelemetry context propagation: traceparent on push, a consumer span per message.

opentelemetry-api is an optional dependency that these tests cannot assume,
so the tests that need it put a stand-in for it (``otel_stub``, see its
README) on ``sys.path`` for their own duration only: the ``otel`` fixture
removes it, and every module it loaded, afterwards, and resets the client's
cached look-up, so no other test ever sees OpenTelemetry.
"""

from __future__ import annotations

import asyncio
import re
import sys
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Dict, Iterator, List, Optional

import pytest

from harness import Sidecar

from queenside import AsyncClient, Client, Message, PushItem, ops, tracing

STUB = str(Path(__file__).resolve().parent / "otel_stub")
TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")


def _stub_module(name: str) -> bool:
    return name == "opentelemetry" or name.startswith("opentelemetry.") or name == "stub_exporter"


@pytest.fixture
def otel(monkeypatch: pytest.MonkeyPatch) -> Iterator[SimpleNamespace]:
    """The stand-in API, importable as ``opentelemetry`` for this test only."""
    # A real opentelemetry-api, if one is installed, is set aside meanwhile.
    saved = {name: module for name, module in sys.modules.items() if _stub_module(name)}
    for name in saved:
        del sys.modules[name]
    sys.path.insert(0, STUB)
    monkeypatch.setattr(tracing, "_api", tracing._UNKNOWN)
    try:
        import stub_exporter
        from opentelemetry import context, propagate, trace

        stub_exporter.clear()
        yield SimpleNamespace(
            trace=trace,
            context=context,
            propagate=propagate,
            tracer=trace.get_tracer("queenside-tests"),
            finished=stub_exporter.finished_spans,
        )
    finally:
        sys.path.remove(STUB)
        for name in [name for name in sys.modules if _stub_module(name)]:
            del sys.modules[name]
        sys.modules.update(saved)


@pytest.fixture
def no_otel(monkeypatch: pytest.MonkeyPatch) -> None:
    """OpenTelemetry absent, even where it is installed: its import fails."""
    monkeypatch.setitem(sys.modules, "opentelemetry", None)  # type: ignore[arg-type]
    monkeypatch.setattr(tracing, "_api", tracing._UNKNOWN)


def traceparent_of(span: Any) -> str:
    ctx = span.get_span_context()
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{ctx.trace_flags:02x}"


def spans_named(otel: SimpleNamespace, name: str) -> List[Any]:
    return [s for s in otel.finished() if s.name == name]


# -- the stand-in itself -------------------------------------------------------


def test_stand_in_reads_and_writes_w3c_traceparent(otel: SimpleNamespace) -> None:
    header = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    ctx = otel.propagate.extract({"traceparent": header})
    span_context = otel.trace.get_current_span(ctx).get_span_context()
    assert (span_context.trace_id, span_context.span_id, span_context.trace_flags) == (
        0x4BF92F3577B34DA6A3CE929D0E0E4736,
        0x00F067AA0BA902B7,
        1,
    )
    carrier: Dict[str, str] = {}
    otel.propagate.inject(carrier, ctx)
    assert carrier == {"traceparent": header}
    for bad in (
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",  # zero trace id
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",  # zero parent id
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",  # forbidden version
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",  # uppercase
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",  # version 00 has 4 fields
        "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",  # short trace id
    ):
        assert not otel.trace.get_current_span(otel.propagate.extract({"traceparent": bad})).get_span_context().is_valid, bad
    # Surrounding blanks are allowed; a missing header clears the current span.
    assert otel.trace.get_current_span(otel.propagate.extract({"traceparent": f" {header}\t"})).get_span_context() == span_context
    with otel.tracer.start_as_current_span("outer"):
        assert otel.trace.get_current_span(otel.propagate.extract({})) is otel.trace.INVALID_SPAN


# -- push ----------------------------------------------------------------------


def test_push_inside_a_span_carries_its_traceparent(otel: SimpleNamespace, client: Client, queue: str) -> None:
    with otel.tracer.start_as_current_span("checkout") as span:
        client.push([PushItem(queue, 1, headers={"tenant": "t1"}), PushItem(queue, 2)])
        client.push_one(queue, 3)
    expected = traceparent_of(span)
    assert TRACEPARENT.match(expected)
    messages = client.pop(queue, batch=10, auto_ack=True).messages
    # Pop returns the headers as they were pushed: the app's own, and ours.
    assert [m.headers for m in messages] == [
        {"tenant": "t1", "traceparent": expected},
        {"traceparent": expected},
        {"traceparent": expected},
    ]


def test_the_pushed_item_is_not_changed(otel: SimpleNamespace) -> None:
    item = PushItem("q", 1, headers={"tenant": "t1"})
    with otel.tracer.start_as_current_span("checkout"):
        wire = ops.push([item]).args["items"][0]  # type: ignore[index]
    assert set(wire["headers"]) == {"tenant", "traceparent"}
    assert item.headers == {"tenant": "t1"}


def test_an_app_set_traceparent_is_kept(otel: SimpleNamespace, client: Client, queue: str) -> None:
    own = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    with otel.tracer.start_as_current_span("checkout"):
        client.push([PushItem(queue, 1, headers={"traceparent": own, "tracestate": "app=1"})])
    (m,) = client.pop(queue, auto_ack=True).messages
    assert m.headers == {"traceparent": own, "tracestate": "app=1"}


def test_an_item_at_the_header_limit_goes_without_context(otel: SimpleNamespace) -> None:
    full = {f"h{i}": "x" for i in range(64)}  # the sidecar takes at most 64
    with otel.tracer.start_as_current_span("checkout"):
        wire = ops.push([PushItem("q", 1, headers=full), PushItem("q", 2, headers={"h": "x"})]).args["items"]  # type: ignore[index]
    assert wire[0]["headers"] == full
    assert set(wire[1]["headers"]) == {"h", "traceparent"}


def test_outside_any_span_no_headers_are_added(otel: SimpleNamespace, client: Client, queue: str) -> None:
    assert "headers" not in ops.push([PushItem(queue, 1)]).args["items"][0]  # type: ignore[index]
    client.push_one(queue, 1)
    (m,) = client.pop(queue, auto_ack=True).messages
    assert m.headers == {}


def test_transaction_pushes_carry_the_context(otel: SimpleNamespace, client: Client, queue: str) -> None:
    out = queue + "-out"
    client.push_one(queue, "in")
    pop = client.pop(queue)
    with otel.tracer.start_as_current_span("forward") as span:
        client.transaction(acks=[pop.messages[0].completed()], pushes=[PushItem(out, "out")])
    (m,) = client.pop(out, auto_ack=True).messages
    assert m.headers == {"traceparent": traceparent_of(span)}


def test_async_client_pushes_carry_the_context(otel: SimpleNamespace, sidecar: Sidecar, queue: str) -> None:
    async def main() -> str:
        async with AsyncClient(sidecar.socket) as qs:
            with otel.tracer.start_as_current_span("async-checkout") as span:
                await qs.push([PushItem(queue, 1)])
                await qs.push_one(queue, 2)
                pop = await qs.pop(queue, batch=5)
                await qs.transaction(acks=[m.completed() for m in pop.messages], pushes=[PushItem(queue, 3)])
            return traceparent_of(span)

    expected = asyncio.run(main())
    with Client(sidecar.socket) as qs:
        messages = qs.pop(queue, group="check", batch=5, auto_ack=True).messages
    assert [(m.payload, m.headers) for m in messages] == [(n, {"traceparent": expected}) for n in (1, 2, 3)]


# -- consume -------------------------------------------------------------------


def check_consumer_span(otel: SimpleNamespace, span: Any, message: Message, producer: Any, group: str) -> None:
    assert span.name == f"process {message.queue}"
    assert span.kind is otel.trace.SpanKind.CONSUMER
    assert span.parent == producer.get_span_context()
    assert span.context.trace_id == producer.get_span_context().trace_id
    assert [link.context for link in span.links] == [producer.get_span_context()]
    expected = {
        "messaging.system": "queenside",
        "messaging.operation.type": "process",
        "messaging.operation.name": "process",
        "messaging.destination.name": message.queue,
        "messaging.destination.partition.id": message.partition,
        "messaging.message.id": message.message_id,
        "queenside.transaction_id": message.transaction_id,
        "queenside.offset": message.offset,
        "queenside.redelivered": message.redelivered,
    }
    if group:
        expected["messaging.consumer.group.name"] = group
    assert span.attributes == expected


def test_consumer_span_is_a_child_of_the_pushed_context(otel: SimpleNamespace, client: Client, queue: str) -> None:
    with otel.tracer.start_as_current_span("checkout") as producer:
        client.push_one(queue, "order", partition="p1")
    stop = threading.Event()
    seen: List[Message] = []
    current: List[Any] = []

    def handler(m: Message) -> None:
        seen.append(m)
        current.append(otel.trace.get_current_span())
        with otel.tracer.start_as_current_span("bill"):
            pass
        stop.set()

    client.consume(queue, handler, group="billing", stop=stop, wait_ms=300)
    (span,) = spans_named(otel, f"process {queue}")
    check_consumer_span(otel, span, seen[0], producer, "billing")
    assert span.status.status_code is otel.trace.StatusCode.UNSET and span.events == []
    assert current == [span]  # the consumer span is current while the handler runs
    (bill,) = spans_named(otel, "bill")
    assert bill.parent == span.context  # the handler's own spans nest under it
    assert otel.trace.get_current_span() is otel.trace.INVALID_SPAN  # and the loop put things back


def test_a_handler_exception_is_recorded(otel: SimpleNamespace, client: Client, queue: str) -> None:
    with otel.tracer.start_as_current_span("checkout") as producer:
        client.push_one(queue, "order")
    stop = threading.Event()

    def handler(m: Message) -> None:
        if not m.redelivered:
            raise ValueError("card declined")
        stop.set()

    stats = client.consume(queue, handler, stop=stop, wait_ms=300)
    assert (stats.failed, stats.completed) == (1, 1)
    failed, retried = spans_named(otel, f"process {queue}")
    assert failed.status.status_code is otel.trace.StatusCode.ERROR
    assert failed.status.description == "ValueError: card declined"
    (event,) = failed.events
    assert event.name == "exception"
    assert (event.attributes["exception.type"], event.attributes["exception.message"]) == ("ValueError", "card declined")
    # The redelivery is a new span with the same parent and link.
    assert retried.status.status_code is otel.trace.StatusCode.UNSET
    for span in (failed, retried):
        assert span.parent == producer.get_span_context()
        assert [link.context for link in span.links] == [producer.get_span_context()]
        assert "messaging.consumer.group.name" not in span.attributes  # queue mode


def test_forwarded_pushes_carry_the_consumer_span(otel: SimpleNamespace, client: Client, queue: str) -> None:
    out = queue + "-out"
    with otel.tracer.start_as_current_span("checkout"):
        client.push_one(queue, 21)
    stop = threading.Event()

    def double(m: Message) -> List[PushItem]:
        stop.set()
        return [PushItem(out, m.payload * 2)]

    client.consume(queue, double, stop=stop, wait_ms=300)
    (span,) = spans_named(otel, f"process {queue}")
    (m,) = client.pop(out, auto_ack=True).messages
    assert m.payload == 42 and m.headers == {"traceparent": traceparent_of(span)}


def test_a_message_without_context_gets_a_span_without_link(otel: SimpleNamespace, client: Client, queue: str) -> None:
    client.push_one(queue, "untraced")
    stop = threading.Event()
    client.consume(queue, lambda m: stop.set(), stop=stop, wait_ms=300)
    (span,) = spans_named(otel, f"process {queue}")
    assert span.parent is None and span.links == []


def test_async_consumer_span(otel: SimpleNamespace, sidecar: Sidecar, queue: str) -> None:
    async def main() -> Dict[str, Any]:
        got: Dict[str, Any] = {}
        async with AsyncClient(sidecar.socket) as qs:
            with otel.tracer.start_as_current_span("checkout") as producer:
                await qs.push_one(queue, "order")
            got["producer"] = producer
            stop = asyncio.Event()

            async def handler(m: Message) -> None:
                got["message"] = m
                await asyncio.sleep(0)  # the span stays current across awaits
                got["current"] = otel.trace.get_current_span()
                with otel.tracer.start_as_current_span("bill"):
                    pass
                if not m.redelivered:
                    raise RuntimeError("try again")
                stop.set()

            await qs.consume(queue, handler, group="g", stop=stop, wait_ms=300)
        return got

    got = asyncio.run(main())
    failed, span = spans_named(otel, f"process {queue}")
    check_consumer_span(otel, span, got["message"], got["producer"], "g")
    assert got["current"] is span
    assert [b.parent for b in spans_named(otel, "bill")] == [failed.context, span.context]
    assert failed.status.status_code is otel.trace.StatusCode.ERROR
    assert failed.events[0].attributes["exception.message"] == "try again"


def test_the_loop_context_is_the_parent_of_untraced_messages(otel: SimpleNamespace, sidecar: Sidecar, queue: str) -> None:
    async def main() -> Any:
        async with AsyncClient(sidecar.socket) as qs:
            await qs.push_one(queue, "untraced")
            stop = asyncio.Event()
            with otel.tracer.start_as_current_span("worker") as worker:
                await qs.consume(queue, lambda m: stop.set(), stop=stop, wait_ms=300)
        return worker

    worker = asyncio.run(main())
    (span,) = spans_named(otel, f"process {queue}")
    assert span.parent == worker.get_span_context() and span.links == []


# -- without OpenTelemetry -----------------------------------------------------


def test_without_opentelemetry_nothing_changes(no_otel: None, client: Client, queue: str) -> None:
    assert "headers" not in ops.push([PushItem(queue, 1)]).args["items"][0]  # type: ignore[index]
    assert tracing._api is None  # looked for once, and remembered
    items = [PushItem(queue, 1)]
    assert tracing.with_trace_context(items) is items  # passed through, not copied
    client.push(items + [PushItem(queue, 2, headers={"tenant": "t1"})])
    stop = threading.Event()
    seen: List[Dict[str, str]] = []

    def handler(m: Message) -> Optional[List[PushItem]]:
        seen.append(m.headers)
        if len(seen) == 2:
            stop.set()
        return None

    stats = client.consume(queue, handler, stop=stop, wait_ms=300)
    assert stats.completed == 2
    assert seen == [{}, {"tenant": "t1"}]
