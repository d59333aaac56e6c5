package bench

import (
	"context"
	"encoding/binary"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"sync/atomic"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Tracing (Config.Tracing) measures the sidecar with OpenTelemetry tracing
// on, as a traced deployment runs it: the sidecar exports every span over
// OTLP/HTTP to a receiver in the bench process that reads and discards
// them (a collector's work is not the sidecar's), with the sampler
// parentbased_always_on; and every push request carries a producer's
// trace context, a new sampled one each, which the Go client puts in each
// item's traceparent header, so the sidecar parents and links spans and
// PostgreSQL stores the headers, as it would for traced producers.

// TracingInfo is what the bench's OTLP receiver was sent.
type TracingInfo struct {
	Endpoint string `json:"endpoint"`
	Sampler  string `json:"sampler"`
	Exports  int64  `json:"exports"` // POST /v1/traces requests
	Bytes    int64  `json:"bytes"`   // their bodies, as sent
}

// tracingSampler is the sampler the sidecar is started with.
const tracingSampler = "parentbased_always_on"

// otlpSink is the discarding OTLP/HTTP receiver.
type otlpSink struct {
	srv     *http.Server
	url     string
	exports atomic.Int64
	bytes   atomic.Int64
}

// startOTLPSink listens on a free port of 127.0.0.1 and points the sidecar
// the bench starts at it: the child inherits this process's environment.
func startOTLPSink() (*otlpSink, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &otlpSink{url: "http://" + ln.Addr().String()}
	s.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		s.exports.Add(1)
		s.bytes.Add(n)
		// An empty body is an empty ExportTraceServiceResponse: all accepted.
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK)
	})}
	go s.srv.Serve(ln) //nolint:errcheck // ends with close
	for k, v := range map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT": s.url,
		"OTEL_TRACES_SAMPLER":         tracingSampler,
		"OTEL_SERVICE_NAME":           "queenside-bench",
	} {
		if err := os.Setenv(k, v); err != nil {
			s.close()
			return nil, err
		}
	}
	// The producers' trace contexts reach the items through the global
	// propagator, as in a traced program.
	otel.SetTextMapPropagator(propagation.TraceContext{})
	return s, nil
}

func (s *otlpSink) info() *TracingInfo {
	return &TracingInfo{Endpoint: s.url, Sampler: tracingSampler, Exports: s.exports.Load(), Bytes: s.bytes.Load()}
}

func (s *otlpSink) close() error { return s.srv.Close() }

type producerSpansKey struct{}

// withProducerSpans marks ctx so that each push made with it carries a
// trace context of its own.
func withProducerSpans(ctx context.Context) context.Context {
	return context.WithValue(ctx, producerSpansKey{}, true)
}

// producerContext returns ctx with a new sampled span context when ctx is
// marked by withProducerSpans, as a traced producer's push would have.
func producerContext(ctx context.Context) context.Context {
	if ctx.Value(producerSpansKey{}) == nil {
		return ctx
	}
	var tid trace.TraceID
	var sid trace.SpanID
	for !tid.IsValid() || !sid.IsValid() {
		binary.LittleEndian.PutUint64(tid[:8], rand.Uint64())
		binary.LittleEndian.PutUint64(tid[8:], rand.Uint64())
		binary.LittleEndian.PutUint64(sid[:], rand.Uint64())
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled})
	return trace.ContextWithSpanContext(ctx, sc)
}
