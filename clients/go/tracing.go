package queenside

import (
	"context"
	"maps"
	"slices"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/queenside/queenside/protocol"
)

// Tracing. The client uses whatever OpenTelemetry tracer provider and
// propagator the program registered globally (otel.SetTracerProvider,
// otel.SetTextMapPropagator); with none registered, both are no-ops and so
// is all of this.
//
// Push and Transaction carry the caller's trace context to the consumers:
// when ctx holds a valid span, the propagator's fields (traceparent, and
// tracestate, with the W3C propagator) are added to the headers of each
// item that has no traceparent yet. The sidecar makes its push span a child
// of it, and stores the headers untouched.
//
// Consume starts a span per message, because it hands the handler one
// message at a time: "process <queue>", of kind consumer, whose parent is
// the context extracted from the message's headers and which also links to
// it, so that the processing joins the producer's trace. The handler's ctx
// carries that span.

// ScopeName is the instrumentation scope of the client's spans.
const ScopeName = "github.com/queenside/queenside/clients/go"

// withTraceContext returns items with the trace context of ctx in their
// headers, or items themselves when there is nothing to add. The caller's
// items and header maps are never modified.
func withTraceContext(ctx context.Context, items []PushItem) []PushItem {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return items
	}
	fields := propagation.MapCarrier{}
	otel.GetTextMapPropagator().Inject(ctx, fields)
	if len(fields) == 0 { // no propagator registered
		return items
	}
	var out []PushItem
	for i := range items {
		h := items[i].Headers
		if _, has := h["traceparent"]; has || len(h)+len(fields) > protocol.MaxHeaders {
			continue
		}
		if out == nil {
			out = slices.Clone(items)
		}
		if len(h) == 0 {
			out[i].Headers = fields // shared by such items: only read from here on
			continue
		}
		merged := maps.Clone(map[string]string(fields))
		maps.Copy(merged, h) // the item's own headers win
		out[i].Headers = merged
	}
	if out == nil {
		return items
	}
	return out
}

// startProcess starts the consumer span of one message; see above.
func startProcess(ctx context.Context, m Message, group string) (context.Context, trace.Span) {
	var opts []trace.SpanStartOption
	if len(m.Headers) > 0 {
		mctx := otel.GetTextMapPropagator().Extract(ctx, propagation.MapCarrier(m.Headers))
		if sc := trace.SpanContextFromContext(mctx); sc.IsValid() && sc.IsRemote() &&
			!sc.Equal(trace.SpanContextFromContext(ctx)) {
			ctx = mctx
			opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc}))
		}
	}
	opts = append(opts, trace.WithSpanKind(trace.SpanKindConsumer))
	ctx, span := otel.Tracer(ScopeName).Start(ctx, "process "+m.Queue, opts...)
	if span.IsRecording() {
		span.SetAttributes(
			attribute.String("messaging.system", "queenside"),
			attribute.String("messaging.operation.type", "process"),
			attribute.String("messaging.operation.name", "process"),
			attribute.String("messaging.destination.name", m.Queue),
			attribute.String("messaging.destination.partition.id", m.Partition),
			attribute.String("messaging.message.id", m.MessageID),
			attribute.String("queenside.transaction_id", m.TransactionID),
			attribute.Int64("queenside.offset", m.Offset),
			attribute.Bool("queenside.redelivered", m.Redelivered))
		if group != "" {
			span.SetAttributes(attribute.String("messaging.consumer.group.name", group))
		}
	}
	return ctx, span
}

// endProcess ends a consumer span, failed when the handler returned err.
func endProcess(span trace.Span, err error) {
	if err != nil && span.IsRecording() {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
