"""OpenTelemetry context propagation, when the app has opentelemetry-api.

- Every push item sent while a span is current carries that span's W3C
  context (``traceparent``, and ``tracestate`` when there is one) in its
  ``headers``, written by the app's configured propagator. A traceparent the
  app put there itself is kept as it is.
- The consume loops run each handler inside a CONSUMER span named
  ``"process <queue>"``, whose parent is the context found in the message's
  headers and which links to it.

opentelemetry-api is optional (``pip install queenside[otel]``). It is looked
for once, on first use; without it every function here returns at once and
items and messages go through untouched. The calls made are a small, stable
part of the API: ``trace.get_tracer``, ``trace.get_current_span``,
``trace.set_span_in_context``, ``trace.SpanKind``, ``trace.Link``,
``trace.Status``/``StatusCode``, ``propagate.inject``/``extract`` and
``context.attach``/``detach``.
"""

from __future__ import annotations

import dataclasses
from types import TracebackType
from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Optional, Type

from .version import __version__

if TYPE_CHECKING:
    from .items import PushItem
    from .results import Message

__all__ = ["with_trace_context", "consumer_span", "ConsumerSpan"]

TRACEPARENT = "traceparent"
# The sidecar refuses an item with more headers than this; an item that
# would pass it goes without trace context rather than fail.
MAX_HEADERS = 64


class _Otel:
    """The loaded API modules, and the tracer of the consume loops."""

    def __init__(self, context: Any, propagate: Any, trace: Any) -> None:
        self.context = context
        self.propagate = propagate
        self.trace = trace
        # A ProxyTracer until the app sets a tracer provider, which it then
        # follows: safe to keep even if the provider is set later.
        self.tracer = trace.get_tracer("queenside", __version__)


_UNKNOWN: Any = object()
# _UNKNOWN until the first use, then the loaded API or None (not installed).
_api: Any = _UNKNOWN


def _otel() -> Optional[_Otel]:
    global _api
    if _api is _UNKNOWN:
        try:
            from opentelemetry import context, propagate, trace
        except ImportError:
            _api = None
        else:
            _api = _Otel(context, propagate, trace)
    api: Optional[_Otel] = _api
    return api


def with_trace_context(items: Iterable["PushItem"]) -> Iterable["PushItem"]:
    """``items``, with the current trace context added to each one's headers.

    Items are copied, never changed: the app may push the same item again
    from another span. Without OpenTelemetry, or outside any span, ``items``
    is returned as it is.
    """
    api = _otel()
    if api is None or not api.trace.get_current_span().get_span_context().is_valid:
        return items
    carrier: Dict[str, str] = {}
    api.propagate.inject(carrier)
    if not carrier:
        return items
    return [_with_headers(item, carrier) for item in items]


def _with_headers(item: "PushItem", carrier: Dict[str, str]) -> "PushItem":
    own = item.headers or {}
    # The app's own traceparent says where the message belongs; the
    # tracestate that came with it must not be mixed with ours either.
    if any(key.lower() == TRACEPARENT for key in own):
        return item
    headers = dict(own)
    for key, value in carrier.items():
        headers.setdefault(key, value)
    if len(headers) > MAX_HEADERS:
        return item
    return dataclasses.replace(item, headers=headers)


class ConsumerSpan:
    """The span of one message in a consume loop, current while it is handled.

    ``with consumer_span(message, group) as span:`` starts it, makes it the
    current span (so that the handler's own spans nest under it), and ends
    it on leaving; ``span.fail(exc)`` marks it failed for an exception the
    loop catches itself. Without OpenTelemetry it is a shared object that
    does nothing.
    """

    def __enter__(self) -> "ConsumerSpan":
        return self

    def __exit__(
        self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        return None

    def fail(self, exc: BaseException) -> None:
        return None


_NO_SPAN = ConsumerSpan()


class _RecordingConsumerSpan(ConsumerSpan):
    def __init__(self, api: _Otel, message: "Message", group: str) -> None:
        self._api = api
        self._message = message
        self._group = group
        self._span: Any = None
        self._token: Any = None

    def __enter__(self) -> "ConsumerSpan":
        api, m = self._api, self._message
        trace = api.trace
        # A message pushed outside any trace has no context of its own: its
        # span is then a child of whatever context the loop runs in. An
        # extracted context is remote; one that is not came from elsewhere.
        parent: Any = None
        links: List[Any] = []
        extracted = api.propagate.extract(m.headers)
        producer = trace.get_current_span(extracted).get_span_context()
        if producer.is_valid and producer.is_remote:
            parent, links = extracted, [trace.Link(producer)]
        # The names of OpenTelemetry's messaging conventions, and those of
        # queenside's other clients for what they do not cover.
        attributes: Dict[str, Any] = {
            "messaging.system": "queenside",
            "messaging.operation.type": "process",
            "messaging.operation.name": "process",
            "messaging.destination.name": m.queue,
            "messaging.destination.partition.id": m.partition,
            "messaging.message.id": m.message_id,
            "queenside.transaction_id": m.transaction_id,
            "queenside.offset": m.offset,
            "queenside.redelivered": m.redelivered,
        }
        if self._group:
            attributes["messaging.consumer.group.name"] = self._group
        self._span = api.tracer.start_span(
            f"process {m.queue}", context=parent, kind=trace.SpanKind.CONSUMER, attributes=attributes, links=links
        )
        self._token = api.context.attach(trace.set_span_in_context(self._span, parent))
        return self

    def fail(self, exc: BaseException) -> None:
        trace = self._api.trace
        self._span.record_exception(exc)
        self._span.set_status(trace.Status(trace.StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))

    def __exit__(
        self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        try:
            if exc is not None:
                self.fail(exc)
        finally:
            self._api.context.detach(self._token)
            self._span.end()


def consumer_span(message: "Message", group: str) -> ConsumerSpan:
    """The span to handle ``message`` in (a no-op without OpenTelemetry)."""
    api = _otel()
    if api is None:
        return _NO_SPAN
    return _RecordingConsumerSpan(api, message, group)
