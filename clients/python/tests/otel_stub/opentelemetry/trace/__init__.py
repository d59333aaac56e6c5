"""opentelemetry.trace: spans, span contexts and the current span.

The same names and signatures as the real API for what queenside and its
tests use. The real API's tracer makes non-recording spans until an SDK is
installed; this one records, as an SDK would, and hands ended spans to
``stub_exporter``.
"""

from __future__ import annotations

import enum
import random
import time
import traceback
from contextlib import contextmanager
from typing import Any, Dict, Iterator, List, Optional, Sequence

import stub_exporter

from opentelemetry.context import Context, attach, create_key, detach, get_value, set_value
from opentelemetry.trace.status import Status, StatusCode

__all__ = [
    "SpanKind",
    "SpanContext",
    "Link",
    "Span",
    "NonRecordingSpan",
    "Tracer",
    "Status",
    "StatusCode",
    "INVALID_SPAN",
    "INVALID_SPAN_CONTEXT",
    "get_tracer",
    "get_current_span",
    "set_span_in_context",
    "use_span",
]

_SPAN_KEY = create_key("current-span")


class SpanKind(enum.Enum):
    INTERNAL = 0
    SERVER = 1
    CLIENT = 2
    PRODUCER = 3
    CONSUMER = 4


class SpanContext:
    def __init__(self, trace_id: int, span_id: int, is_remote: bool, trace_flags: int = 0, trace_state: str = "") -> None:
        self.trace_id = trace_id
        self.span_id = span_id
        self.is_remote = is_remote
        self.trace_flags = trace_flags
        self.trace_state = trace_state

    @property
    def is_valid(self) -> bool:
        return self.trace_id != 0 and self.span_id != 0

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SpanContext) and (self.trace_id, self.span_id, self.trace_flags) == (
            other.trace_id,
            other.span_id,
            other.trace_flags,
        )

    def __hash__(self) -> int:
        return hash((self.trace_id, self.span_id, self.trace_flags))

    def __repr__(self) -> str:
        return f"SpanContext(trace_id=0x{self.trace_id:032x}, span_id=0x{self.span_id:016x}, is_remote={self.is_remote})"


INVALID_SPAN_CONTEXT = SpanContext(0, 0, False)


class Link:
    def __init__(self, context: SpanContext, attributes: Optional[Dict[str, Any]] = None) -> None:
        self._context = context
        self._attributes = attributes

    @property
    def context(self) -> SpanContext:
        return self._context

    @property
    def attributes(self) -> Optional[Dict[str, Any]]:
        return self._attributes


class Event:
    def __init__(self, name: str, attributes: Dict[str, Any]) -> None:
        self.name = name
        self.attributes = attributes


class Span:
    """A recording span, with the attributes of the SDK's ReadableSpan."""

    def __init__(
        self,
        name: str,
        context: SpanContext,
        parent: Optional[SpanContext],
        kind: SpanKind,
        attributes: Optional[Dict[str, Any]],
        links: Optional[Sequence[Link]],
    ) -> None:
        self.name = name
        self.context = context
        self.parent = parent
        self.kind = kind
        self.attributes: Dict[str, Any] = dict(attributes or {})
        self.links: List[Link] = list(links or [])
        self.events: List[Event] = []
        self.status = Status()
        self.start_time = time.time_ns()
        self.end_time: Optional[int] = None

    def get_span_context(self) -> SpanContext:
        return self.context

    def is_recording(self) -> bool:
        return self.end_time is None

    def set_attribute(self, key: str, value: Any) -> None:
        self.attributes[key] = value

    def set_attributes(self, attributes: Dict[str, Any]) -> None:
        self.attributes.update(attributes)

    def add_event(self, name: str, attributes: Optional[Dict[str, Any]] = None, timestamp: Optional[int] = None) -> None:
        self.events.append(Event(name, dict(attributes or {})))

    def record_exception(
        self,
        exception: BaseException,
        attributes: Optional[Dict[str, Any]] = None,
        timestamp: Optional[int] = None,
        escaped: bool = False,
    ) -> None:
        event = {
            "exception.type": type(exception).__name__,
            "exception.message": str(exception),
            "exception.stacktrace": "".join(traceback.format_exception(type(exception), exception, exception.__traceback__)),
            "exception.escaped": str(escaped),
        }
        event.update(attributes or {})
        self.add_event("exception", event)

    def set_status(self, status: Any, description: Optional[str] = None) -> None:
        self.status = status if isinstance(status, Status) else Status(status, description)

    def update_name(self, name: str) -> None:
        self.name = name

    def end(self, end_time: Optional[int] = None) -> None:
        if self.end_time is not None:
            return
        self.end_time = end_time or time.time_ns()
        stub_exporter.export(self)


class NonRecordingSpan:
    def __init__(self, context: SpanContext) -> None:
        self._context = context

    def get_span_context(self) -> SpanContext:
        return self._context

    def is_recording(self) -> bool:
        return False

    def set_attribute(self, key: str, value: Any) -> None:
        pass

    def set_attributes(self, attributes: Dict[str, Any]) -> None:
        pass

    def add_event(self, name: str, attributes: Optional[Dict[str, Any]] = None, timestamp: Optional[int] = None) -> None:
        pass

    def record_exception(self, exception: BaseException, attributes: Any = None, timestamp: Any = None, escaped: bool = False) -> None:
        pass

    def set_status(self, status: Any, description: Optional[str] = None) -> None:
        pass

    def update_name(self, name: str) -> None:
        pass

    def end(self, end_time: Optional[int] = None) -> None:
        pass


INVALID_SPAN = NonRecordingSpan(INVALID_SPAN_CONTEXT)


class Tracer:
    def __init__(self, name: str, version: Optional[str]) -> None:
        self.name = name
        self.version = version

    def start_span(
        self,
        name: str,
        context: Optional[Context] = None,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: Optional[Dict[str, Any]] = None,
        links: Optional[Sequence[Link]] = None,
        start_time: Optional[int] = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
    ) -> Span:
        parent = get_current_span(context).get_span_context()
        if parent.is_valid:
            trace_id, parent_context, flags = parent.trace_id, parent, parent.trace_flags
        else:
            trace_id, parent_context, flags = random.getrandbits(128) or 1, None, 1
        span_context = SpanContext(trace_id, random.getrandbits(64) or 1, False, flags)
        return Span(name, span_context, parent_context, kind, attributes, links)

    @contextmanager
    def start_as_current_span(
        self,
        name: str,
        context: Optional[Context] = None,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: Optional[Dict[str, Any]] = None,
        links: Optional[Sequence[Link]] = None,
        start_time: Optional[int] = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
        end_on_exit: bool = True,
    ) -> Iterator[Span]:
        span = self.start_span(name, context, kind, attributes, links)
        with use_span(span, end_on_exit, record_exception, set_status_on_exception) as current:
            yield current


def get_tracer(
    instrumenting_module_name: str,
    instrumenting_library_version: Optional[str] = None,
    tracer_provider: Any = None,
    schema_url: Optional[str] = None,
    attributes: Any = None,
) -> Tracer:
    return Tracer(instrumenting_module_name, instrumenting_library_version)


def get_current_span(context: Optional[Context] = None) -> Any:
    span = get_value(_SPAN_KEY, context)
    return span if span is not None else INVALID_SPAN


def set_span_in_context(span: Any, context: Optional[Context] = None) -> Context:
    return set_value(_SPAN_KEY, span, context)


@contextmanager
def use_span(
    span: Any, end_on_exit: bool = False, record_exception: bool = True, set_status_on_exception: bool = True
) -> Iterator[Any]:
    token = attach(set_span_in_context(span))
    try:
        yield span
    except BaseException as exc:
        if record_exception:
            span.record_exception(exc, escaped=True)
        if set_status_on_exception:
            span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
        raise
    finally:
        detach(token)
        if end_on_exit:
            span.end()
