"""opentelemetry.propagate: inject and extract with the W3C Trace Context format.

The real package's default propagator is W3C Trace Context plus baggage;
this one does Trace Context only, following the specification
(https://www.w3.org/TR/trace-context/): a traceparent is
``{version}-{trace-id}-{parent-id}-{trace-flags}`` in lowercase hex, an
all-zero trace or parent id is invalid, version ``ff`` is invalid, and a
version 00 header has exactly those four fields.
"""

from __future__ import annotations

import re
from typing import Any, Mapping, MutableMapping, Optional

from opentelemetry import trace
from opentelemetry.context import Context

__all__ = ["inject", "extract", "format_traceparent", "parse_traceparent"]

_TRACEPARENT = re.compile(r"^[ \t]*([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?[ \t]*$")


def format_traceparent(span_context: "trace.SpanContext") -> str:
    return f"00-{span_context.trace_id:032x}-{span_context.span_id:016x}-{span_context.trace_flags:02x}"


def parse_traceparent(value: str) -> Optional["trace.SpanContext"]:
    match = _TRACEPARENT.match(value)
    if match is None:
        return None
    version, trace_id, span_id, flags, rest = match.groups()
    if version == "ff" or (version == "00" and rest is not None):
        return None
    if int(trace_id, 16) == 0 or int(span_id, 16) == 0:
        return None
    return trace.SpanContext(int(trace_id, 16), int(span_id, 16), is_remote=True, trace_flags=int(flags, 16))


def inject(carrier: MutableMapping[str, str], context: Optional[Context] = None, setter: Any = None) -> None:
    span_context = trace.get_current_span(context).get_span_context()
    if not span_context.is_valid:
        return
    _set(carrier, setter, "traceparent", format_traceparent(span_context))
    if span_context.trace_state:
        _set(carrier, setter, "tracestate", span_context.trace_state)


def extract(carrier: Mapping[str, str], context: Optional[Context] = None, getter: Any = None) -> Context:
    header = _get(carrier, getter, "traceparent")
    span_context = parse_traceparent(header) if header is not None else None
    if span_context is None:
        # As the real propagator does: no valid header clears the span, it
        # does not leave the current one in place.
        return trace.set_span_in_context(trace.INVALID_SPAN, context)
    state = _get(carrier, getter, "tracestate")
    if state:
        span_context = trace.SpanContext(
            span_context.trace_id, span_context.span_id, True, span_context.trace_flags, state
        )
    return trace.set_span_in_context(trace.NonRecordingSpan(span_context), context)


def _set(carrier: MutableMapping[str, str], setter: Any, key: str, value: str) -> None:
    if setter is not None:
        setter.set(carrier, key, value)
    else:
        carrier[key] = value


def _get(carrier: Mapping[str, str], getter: Any, key: str) -> Optional[str]:
    if getter is not None:
        values = getter.get(carrier, key)
        return values[0] if values else None
    return carrier.get(key)
