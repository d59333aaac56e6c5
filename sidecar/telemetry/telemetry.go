// Package telemetry is the sidecar's OpenTelemetry tracing. It is off
// unless the standard environment asks for it: OTEL_EXPORTER_OTLP_ENDPOINT
// or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT. Spans then go over OTLP
// (HTTP/protobuf) through a batch processor, and the SDK reads the rest of
// its usual variables itself: OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES,
// OTEL_TRACES_SAMPLER(_ARG), OTEL_BSP_*, OTEL_EXPORTER_OTLP_*HEADERS and
// *TIMEOUT.
//
// Off, there is no exporter, no goroutine and no tracer: every helper of
// this package checks one atomic pointer first and returns at once, so the
// request paths pay nothing for it.
package telemetry

import (
	"context"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of every span of the sidecar.
const ScopeName = "github.com/queenside/queenside/sidecar"

// flushTimeout bounds the export of the spans still buffered at shutdown.
const flushTimeout = 5 * time.Second

// current is the tracer in use; nil while tracing is off.
var current atomic.Pointer[trace.Tracer]

// Enabled reports whether spans are being made.
func Enabled() bool { return current.Load() != nil }

// tracer returns the tracer in use, or nil.
func tracer() trace.Tracer {
	if t := current.Load(); t != nil {
		return *t
	}
	return nil
}

// Use makes the sidecar's spans with tp from now on; nil turns tracing off.
// Setup calls it; tests use it with an in-memory provider.
func Use(tp trace.TracerProvider) {
	if tp == nil {
		current.Store(nil)
		return
	}
	t := tp.Tracer(ScopeName)
	current.Store(&t)
}

// Requested reports whether the environment asks for tracing, and why not
// when it does not.
func Requested() (bool, string) {
	if strings.EqualFold(strings.TrimSpace(os.Getenv("OTEL_SDK_DISABLED")), "true") {
		return false, "OTEL_SDK_DISABLED is true"
	}
	if v := strings.TrimSpace(os.Getenv("OTEL_TRACES_EXPORTER")); v != "" && v != "otlp" {
		return false, "OTEL_TRACES_EXPORTER is " + v
	}
	if os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
		return false, "no OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	}
	return true, ""
}

// Setup turns tracing on when the environment asks for it, and returns
// what flushes the spans still buffered and stops the exporter; call it
// once everything that makes spans has stopped. A tracing setup that fails
// is logged and the sidecar runs without it: tracing is never a reason not
// to serve.
func Setup(ctx context.Context, version string, log hclog.Logger) (shutdown func()) {
	if log == nil {
		log = hclog.NewNullLogger()
	}
	if on, _ := Requested(); !on {
		return func() {}
	}
	p := os.Getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if p == "" {
		p = os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	if p != "" && p != "http/protobuf" {
		log.Warn("only OTLP over HTTP/protobuf is supported; using it", "protocol", p)
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		log.Error("tracing is off: the OTLP exporter could not be made", "error", err)
		return func() {}
	}
	// Later options win: OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME
	// override the name and version given here.
	res, err := resource.New(ctx,
		resource.WithAttributes(
			attribute.String("service.name", "queenside"),
			attribute.String("service.version", version)),
		resource.WithTelemetrySDK(),
		resource.WithHost(),
		resource.WithFromEnv())
	if err != nil {
		log.Warn("tracing resource is partial", "error", err) // res is still usable
	}
	otel.SetErrorHandler(&quietErrors{log: log})
	// The sampler comes from OTEL_TRACES_SAMPLER(_ARG), and the batching
	// from OTEL_BSP_*, as the SDK reads them.
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	Use(tp)
	log.Info("tracing on: exporting spans over OTLP/HTTP")
	return func() {
		Use(nil)
		sctx, cancel := context.WithTimeout(context.Background(), flushTimeout)
		defer cancel()
		if err := tp.Shutdown(sctx); err != nil {
			log.Warn("flushing the last spans", "error", err)
		}
	}
}

// quietErrors logs the SDK's errors (a collector that cannot be reached,
// mostly) at most every errorEvery, so that an absent collector does not
// flood the log.
type quietErrors struct {
	log        hclog.Logger
	mu         sync.Mutex
	last       time.Time
	suppressed int
}

const errorEvery = 30 * time.Second

func (q *quietErrors) Handle(err error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if time.Since(q.last) < errorEvery {
		q.suppressed++
		return
	}
	q.log.Warn("tracing", "error", err, "suppressed_since_last", q.suppressed)
	q.last, q.suppressed = time.Now(), 0
}
