package telemetry

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/queenside/queenside/protocol"
)

// Attribute keys: OpenTelemetry's messaging and database conventions, and
// queenside's own under "queenside.".
const (
	keySystem         = attribute.Key("messaging.system")
	keyOperationType  = attribute.Key("messaging.operation.type")
	keyOperationName  = attribute.Key("messaging.operation.name")
	keyDestination    = attribute.Key("messaging.destination.name")
	keyPartitionID    = attribute.Key("messaging.destination.partition.id")
	keyConsumerGroup  = attribute.Key("messaging.consumer.group.name")
	keyMessageCount   = attribute.Key("messaging.batch.message_count")
	keyDBSystem       = attribute.Key("db.system.name")
	keyDBOperation    = attribute.Key("db.operation.name")
	keyQueues         = attribute.Key("queenside.queues")
	keyPartitions     = attribute.Key("queenside.partitions")
	keyPartitionCount = attribute.Key("queenside.partitions.count")
)

// System is the messaging.system of every span.
const System = "queenside"

// Operation types of the messaging conventions. "send" is what the
// conventions call "publish" since their version 1.26.
const (
	OperationSend    = "send"
	OperationReceive = "receive"
	OperationProcess = "process"
	OperationSettle  = "settle"
)

const (
	// MaxListed is how many queues, or partitions, a span names at most;
	// queenside.partitions.count says how many there were.
	MaxListed = 10
	// MaxLinks is how many links a span gets to the requests it shares a
	// transaction with, or to the messages it carries.
	MaxLinks = 16
)

// noSpan is what the helpers return while tracing is off: a no-op span,
// got without allocating.
var noSpan = trace.SpanFromContext(context.Background())

var w3c = propagation.TraceContext{}

// RemoteParent returns the span context carried by a W3C traceparent (and
// tracestate) in a message's headers. A missing or malformed traceparent
// gives false: it is ignored, never an error.
func RemoteParent(headers map[string]string) (trace.SpanContext, bool) {
	if headers["traceparent"] == "" {
		return trace.SpanContext{}, false
	}
	sc := trace.SpanContextFromContext(w3c.Extract(context.Background(), propagation.MapCarrier(headers)))
	return sc, sc.IsValid()
}

// RemoteParentPacked is RemoteParent of headers as stored: a msgpack map.
func RemoteParentPacked(packed []byte) (trace.SpanContext, bool) {
	if len(packed) == 0 {
		return trace.SpanContext{}, false
	}
	var h map[string]string
	if protocol.Unmarshal(packed, &h) != nil {
		return trace.SpanContext{}, false
	}
	return RemoteParent(h)
}

// linkSet gathers distinct span contexts, up to MaxLinks, parsing each
// distinct traceparent once (the items of a push usually share one).
type linkSet struct {
	lastRaw string
	seen    map[spanKey]bool
	links   []trace.Link
}

func (l *linkSet) addHeaders(h map[string]string) {
	raw := h["traceparent"]
	if raw == "" || raw == l.lastRaw || len(l.links) >= MaxLinks {
		return
	}
	l.lastRaw = raw
	if sc, ok := RemoteParent(h); ok {
		l.add(sc)
	}
}

type spanKey struct {
	trace trace.TraceID
	span  trace.SpanID
}

func (l *linkSet) add(sc trace.SpanContext) {
	k := spanKey{sc.TraceID(), sc.SpanID()}
	if len(l.links) >= MaxLinks || !sc.IsValid() || l.seen[k] {
		return
	}
	if l.seen == nil {
		l.seen = map[spanKey]bool{}
	}
	l.seen[k] = true
	l.links = append(l.links, trace.Link{SpanContext: sc})
}

// itemsParent returns ctx with the remote parent carried by the first
// item that has a valid traceparent, and links to the others' distinct
// ones.
func itemsParent(ctx context.Context, items []protocol.PushItem) (context.Context, []trace.Link) {
	var l linkSet
	for i := range items {
		l.addHeaders(items[i].Headers)
	}
	if len(l.links) == 0 {
		return ctx, nil
	}
	return trace.ContextWithRemoteSpanContext(ctx, l.links[0].SpanContext), l.links[1:]
}

// destinations names the queues and partitions of a push's items, the
// first MaxListed of each, with how many partitions there were.
func destinations(items []protocol.PushItem) []attribute.KeyValue {
	var queues, partitions seen
	for i := range items {
		it := &items[i]
		if it.Queue == "" {
			continue // an invalid item
		}
		p := it.Partition
		if p == "" {
			p = protocol.DefaultPartition
		}
		queues.add(it.Queue, "")
		partitions.add(it.Queue, p)
	}
	qs := make([]string, 0, min(len(queues.keys), MaxListed))
	for _, k := range queues.keys[:cap(qs)] {
		qs = append(qs, k[0])
	}
	ps := make([]string, 0, min(len(partitions.keys), MaxListed))
	for _, k := range partitions.keys[:cap(ps)] {
		ps = append(ps, k[0]+"/"+k[1])
	}
	attrs := []attribute.KeyValue{keyQueues.StringSlice(qs), keyPartitions.StringSlice(ps),
		keyPartitionCount.Int(partitions.count())}
	if queues.count() == 1 {
		attrs = append(attrs, keyDestination.String(qs[0]))
	}
	if partitions.count() == 1 {
		attrs = append(attrs, keyPartitionID.String(partitions.keys[0][1]))
	}
	return attrs
}

// seen is a set of (queue, partition) keys that keeps the first ones in
// order. A push names a few partitions, usually: those are compared in a
// short list, and a map is made only past seenList.
type seen struct {
	keys [][2]string // the first seenList, in order
	more map[[2]string]bool
}

const seenList = 32

func (s *seen) add(queue, partition string) {
	k := [2]string{queue, partition}
	if n := len(s.keys); n > 0 && s.keys[n-1] == k { // items come in runs
		return
	}
	if s.more != nil {
		s.more[k] = true
		return
	}
	for _, x := range s.keys {
		if x == k {
			return
		}
	}
	if len(s.keys) < seenList {
		s.keys = append(s.keys, k)
		return
	}
	s.more = make(map[[2]string]bool, 2*seenList)
	for _, x := range s.keys {
		s.more[x] = true
	}
	s.more[k] = true
}

func (s *seen) count() int {
	if s.more != nil {
		return len(s.more)
	}
	return len(s.keys)
}

func withQueue(op string, queues []string) string {
	if len(queues) == 1 {
		return op + " " + queues[0]
	}
	return op
}

// StartPush starts the span of a push request: its parent is the
// traceparent of the first item carrying a valid one, and it links the
// other items' distinct trace contexts.
func StartPush(ctx context.Context, items []protocol.PushItem) (context.Context, trace.Span) {
	t := tracer()
	if t == nil {
		return ctx, noSpan
	}
	pctx, links := itemsParent(ctx, items)
	dest := destinations(items)
	attrs := append(dest, keySystem.String(System), keyOperationType.String(OperationSend),
		keyOperationName.String("push"), keyMessageCount.Int(len(items)))
	return t.Start(pctx, withQueue("push", dest[0].Value.AsStringSlice()), trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithLinks(links...), trace.WithAttributes(attrs...))
}

// EndPush records how a push's items fared and ends its span.
func EndPush(span trace.Span, results []protocol.PushResult, err error) {
	if !span.IsRecording() {
		return
	}
	var n [4]int
	for _, r := range results {
		switch r.Status {
		case protocol.StatusQueued:
			n[0]++
		case protocol.StatusDuplicate:
			n[1]++
		case protocol.StatusBuffered:
			n[2]++
		default:
			n[3]++
		}
	}
	span.SetAttributes(attribute.Int("queenside.push.queued", n[0]), attribute.Int("queenside.push.duplicate", n[1]),
		attribute.Int("queenside.push.buffered", n[2]), attribute.Int("queenside.push.failed", n[3]))
	switch {
	case err != nil:
		fail(span, err)
	case n[3] > 0:
		span.SetStatus(codes.Error, "some items failed")
	}
	span.End()
}

// StartPop starts the span of a pop request.
func StartPop(ctx context.Context, a protocol.PopArgs) (context.Context, trace.Span) {
	t := tracer()
	if t == nil {
		return ctx, noSpan
	}
	attrs := []attribute.KeyValue{keySystem.String(System), keyOperationType.String(OperationReceive),
		keyOperationName.String("pop"), keyDestination.String(a.Queue),
		attribute.Int("queenside.pop.batch", a.Batch), attribute.Int("queenside.pop.wait_ms", a.WaitMs),
		attribute.Bool("queenside.pop.auto_ack", a.AutoAck)}
	if a.Group != "" {
		attrs = append(attrs, keyConsumerGroup.String(a.Group))
	}
	if a.Partition != "" {
		attrs = append(attrs, keyPartitionID.String(a.Partition))
	}
	return t.Start(ctx, "pop "+a.Queue, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
}

// EndPop records what a pop delivered, with links to the trace contexts
// its messages carry (the first MaxLinks distinct ones), and ends its span.
func EndPop(span trace.Span, res protocol.PopResult, err error) {
	if !span.IsRecording() {
		return
	}
	if err != nil {
		fail(span, err)
	}
	var l linkSet
	for i := range res.Messages {
		l.addHeaders(res.Messages[i].Headers)
	}
	for _, link := range l.links {
		span.AddLink(link)
	}
	span.SetAttributes(keyMessageCount.Int(len(res.Messages)), attribute.Int("queenside.pop.leases", len(res.Leases)))
	span.End()
}

// StartAck starts the span of an ack request.
func StartAck(ctx context.Context, items []protocol.AckItem) (context.Context, trace.Span) {
	t := tracer()
	if t == nil {
		return ctx, noSpan
	}
	failed := 0
	for _, it := range items {
		if it.Status == protocol.AckFailed {
			failed++
		}
	}
	return t.Start(ctx, "ack", trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
		keySystem.String(System), keyOperationType.String(OperationSettle), keyOperationName.String("ack"),
		keyMessageCount.Int(len(items)), attribute.Int("queenside.ack.failed_items", failed)))
}

// EndAck records how many items succeeded and ends an ack's span.
func EndAck(span trace.Span, res protocol.AckResult, err error) {
	if !span.IsRecording() {
		return
	}
	ok, dead := 0, 0
	for _, r := range res.Results {
		if r.Success {
			ok++
		}
		if r.DeadLettered {
			dead++
		}
	}
	span.SetAttributes(attribute.Int("queenside.ack.succeeded", ok), attribute.Int("queenside.ack.dead_lettered", dead))
	if err != nil {
		fail(span, err)
	} else if ok < len(res.Results) {
		span.SetStatus(codes.Error, "some items did not succeed")
	}
	span.End()
}

// StartTransaction starts the span of a transaction request; its pushes
// give it a parent as a push's items do.
func StartTransaction(ctx context.Context, acks []protocol.AckItem, pushes []protocol.PushItem) (context.Context, trace.Span) {
	t := tracer()
	if t == nil {
		return ctx, noSpan
	}
	pctx, links := itemsParent(ctx, pushes)
	op := OperationSettle
	if len(pushes) > 0 {
		op = OperationSend
	}
	attrs := append(destinations(pushes), keySystem.String(System), keyOperationType.String(op),
		keyOperationName.String("transaction"), attribute.Int("queenside.transaction.acks", len(acks)),
		attribute.Int("queenside.transaction.pushes", len(pushes)))
	return t.Start(pctx, "transaction", trace.WithSpanKind(trace.SpanKindClient), trace.WithLinks(links...),
		trace.WithAttributes(attrs...))
}

// End ends span, with an error status when err is not nil.
func End(span trace.Span, err error) {
	if !span.IsRecording() {
		return
	}
	if err != nil {
		fail(span, err)
	}
	span.End()
}

func fail(span trace.Span, err error) {
	span.RecordError(err)
	span.SetStatus(codes.Error, err.Error())
}

// StartSpoolWrite starts the span of writing n push items to the spool.
func StartSpoolWrite(ctx context.Context, n int) (context.Context, trace.Span) {
	t := tracer()
	if t == nil {
		return ctx, noSpan
	}
	return t.Start(ctx, "spool write", trace.WithAttributes(keySystem.String(System), keyMessageCount.Int(n)))
}

// StartReplay starts the span of replaying a batch of spooled records into
// PostgreSQL. Replay is the sidecar's own work, so the span is a root; it
// links the trace contexts the records' headers (packed, as spooled) carry,
// the first MaxLinks distinct ones.
func StartReplay(ctx context.Context, segment string, headers [][]byte) (context.Context, trace.Span) {
	t := tracer()
	if t == nil {
		return ctx, noSpan
	}
	var l linkSet
	var last []byte
	for _, h := range headers {
		if len(l.links) >= MaxLinks {
			break
		}
		if len(h) == 0 || string(h) == string(last) {
			continue
		}
		last = h
		if sc, ok := RemoteParentPacked(h); ok {
			l.add(sc)
		}
	}
	return t.Start(ctx, "spool replay", trace.WithNewRoot(), trace.WithLinks(l.links...), trace.WithAttributes(
		keySystem.String(System), keyMessageCount.Int(len(headers)), attribute.String("queenside.spool.segment", segment)))
}

// Database spans.
const (
	DBPush        = "push"        // the push transaction
	DBRound       = "round"       // a consumption round: pops and acks
	DBTransaction = "transaction" // the transaction op's
)

// StartDB starts the span of one PostgreSQL transaction that does the
// work of the requests whose contexts are given, several when it fuses
// them. Its parent is the first request's span; the others are linked, and
// each of their spans gets a link back to it, so that a trace of any of
// them leads to the transaction and from it to every request it carried.
// A span has one parent: the first request stands for the rest.
func StartDB(op string, requests []context.Context, attrs ...attribute.KeyValue) trace.Span {
	t := tracer()
	if t == nil || len(requests) == 0 {
		return noSpan
	}
	var others []trace.Span
	for _, ctx := range requests[1:] {
		others = append(others, trace.SpanFromContext(ctx))
		others = append(others, servedBy(ctx)...)
	}
	others = append(others, servedBy(requests[0])...)
	var links []trace.Link
	for _, s := range others {
		if sc := s.SpanContext(); sc.IsValid() && len(links) < MaxLinks {
			links = append(links, trace.Link{SpanContext: sc})
		}
	}
	attrs = append(attrs, keyDBSystem.String("postgresql"), keyDBOperation.String(op),
		attribute.Int("queenside.fused.requests", 1+len(others)))
	_, span := t.Start(requests[0], "db "+op, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithLinks(links...), trace.WithAttributes(attrs...))
	back := trace.Link{SpanContext: span.SpanContext()}
	for _, s := range others {
		s.AddLink(back)
	}
	return span
}

// MessageCount is the attribute of how many messages a span carries.
func MessageCount(n int) attribute.KeyValue { return keyMessageCount.Int(n) }

type servingKey struct{}

// Serving marks ctx as doing the work of other requests too, whose spans
// are given (a pop look serves every pop waiting on its key): a database
// span started from it links them.
func Serving(ctx context.Context, spans []trace.Span) context.Context {
	if len(spans) == 0 {
		return ctx
	}
	return context.WithValue(ctx, servingKey{}, spans)
}

func servedBy(ctx context.Context) []trace.Span {
	s, _ := ctx.Value(servingKey{}).([]trace.Span)
	return s
}

// ForRequests returns ctx for work done for several requests at once,
// whose spans are given: the first one's span is its span, and a database
// span started from it links the others.
func ForRequests(ctx context.Context, spans []trace.Span) context.Context {
	if len(spans) == 0 {
		return ctx
	}
	return Serving(trace.ContextWithSpan(ctx, spans[0]), spans[1:])
}
