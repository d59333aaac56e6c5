package sidecar

import (
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/queenside/queenside/protocol"
)

// metrics are served as Prometheus text on /metrics. They live in their own
// registry: only what queenside measures, plus the Go runtime and process.
type metrics struct {
	known     map[string]bool // op names; others are counted as "unknown"
	registry  *prometheus.Registry
	requests  *prometheus.CounterVec // by op and code ("ok" when served)
	pushItems *prometheus.CounterVec // by status
	// byStatus holds pushItems' counters resolved once, in pushStatuses'
	// order: a push adds to each status once per request, not per item.
	byStatus [len(pushStatuses)]prometheus.Counter
	leases   prometheus.Counter
	// refusals counts what PostgreSQL refused for want of a grant, by
	// the sidecar's role and the right.
	refusals *prometheus.CounterVec
	// spooledBy counts push items written to the spool, by cause, in
	// protocol.SpoolCauses' order.
	spooledBy [len(protocol.SpoolCauses)]atomic.Uint64
	// popped counts the messages this sidecar's pops delivered, those of
	// acks carrying a pop included; the dashboard charts it too.
	popped atomic.Uint64
}

func newMetrics(s *Server) *metrics {
	m := &metrics{
		known:    make(map[string]bool, len(s.ops)),
		registry: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "queenside_requests_total", Help: "Requests answered, by operation and outcome code (ok when served).",
		}, []string{"op", "code"}),
		pushItems: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "queenside_push_items_total", Help: "Push items answered, by status: queued, duplicate, buffered, failed.",
		}, []string{"status"}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "queenside_refusals_total", Help: "Calls and push items refused because the sidecar's database role was not granted the right on the queue (forbidden), by role and right.",
		}, []string{"role", "right"}),
		leases: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "queenside_leases_granted_total", Help: "Partition leases granted by pops without autoAck, those of acks carrying a pop included.",
		}),
	}
	for name := range s.ops {
		m.known[name] = true
	}
	for i, st := range pushStatuses {
		m.byStatus[i] = m.pushItems.WithLabelValues(st)
	}
	gauge := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f)
	}
	counter := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, f)
	}
	for i, cause := range protocol.SpoolCauses {
		m.registry.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name:        "queenside_push_items_spooled_total",
			Help:        "Push items written to the spool, by cause: timeout (PostgreSQL did not answer within --database-timeout), refused (it refused or reset the connection), maintenance (push maintenance), behind (an earlier item of the partition was still spooled).",
			ConstLabels: prometheus.Labels{"cause": cause},
		}, func() float64 { return float64(m.spooledBy[i].Load()) }))
	}
	m.registry.MustRegister(m.requests, m.pushItems, m.leases, m.refusals,
		counter("queenside_database_timeouts_total", "Calls to PostgreSQL ended by --database-timeout: it did not answer in time.",
			func() float64 { return float64(s.store.Timeouts()) }),
		counter("queenside_messages_popped_total", "Messages delivered by pops (leased or auto-acked), those of acks carrying a pop included.",
			func() float64 { return float64(m.popped.Load()) }),
		prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}),
		gauge("queenside_database_up", "1 while PostgreSQL answered the last attempt and the schema is migrated.", func() float64 {
			up := s.ready.Load() && (s.buffer == nil || s.buffer.Stats().DatabaseUp)
			return boolFloat(up)
		}),
		gauge("queenside_connections", "Client connections open.", func() float64 {
			s.mu.Lock()
			defer s.mu.Unlock()
			return float64(len(s.conns))
		}),
		gauge("queenside_requests_in_flight", "Requests being served.", func() float64 { return float64(s.active.Load()) }),
		gauge("queenside_draining", "1 once shutdown has begun.", func() float64 { return boolFloat(s.draining.Load()) }),
		gauge("queenside_maintenance_push", "1 while push maintenance is on: pushes are spooled, not stored.", func() float64 {
			return boolFloat(s.control.pushMaintenance())
		}),
		gauge("queenside_maintenance_pop", "1 while pop maintenance is on: pops deliver nothing.", func() float64 {
			m := s.control.maintenance()
			return boolFloat(m != nil && m.Pop)
		}),
		gauge("queenside_paused_queues", "Queues whose consumption is paused.", func() float64 {
			if st := s.control.state.Load(); st != nil {
				return float64(len(st.Paused))
			}
			return 0
		}),
	)
	if s.buffer != nil {
		b := s.buffer
		m.registry.MustRegister(
			gauge("queenside_spool_records", "Spooled push items not yet in PostgreSQL.", func() float64 { return float64(b.Stats().Records) }),
			gauge("queenside_spool_bytes", "Bytes of the spool's segment files.", func() float64 { return float64(b.Stats().Bytes) }),
			gauge("queenside_spool_oldest_age_seconds", "Age of the oldest spooled item not yet replayed; 0 when none.", func() float64 {
				if o := b.Stats().Oldest; !o.IsZero() {
					return time.Since(o).Seconds()
				}
				return 0
			}),
			gauge("queenside_spool_replaying", "1 while the spool is being replayed.", func() float64 { return boolFloat(b.Stats().Replaying) }),
			counter("queenside_spool_replayed_total", "Spooled items stored by replay (queued or duplicate).", func() float64 { return float64(b.Stats().Replayed) }),
			counter("queenside_spool_rejected_total", "Spooled items the database refused, kept in quarantine/.", func() float64 { return float64(b.Stats().Rejected) }),
			counter("queenside_spool_damaged_total", "Stretches of spooled records found damaged on disk, each holding at least one record lost to the replay.", func() float64 { return float64(b.Stats().Damaged) }),
			gauge("queenside_spool_quarantined_files", "Files moved to the spool's quarantine/ since start.", func() float64 { return float64(len(b.Stats().Quarantined)) }),
		)
	}
	return m
}

// served counts one answered request.
func (m *metrics) served(op string, perr *protocol.Error, res any) {
	code := "ok"
	if !m.known[op] {
		op = "unknown" // a client's typo must not grow the label set
	}
	if perr != nil {
		code = string(perr.Code)
	}
	m.requests.WithLabelValues(op, code).Inc()
	switch r := res.(type) {
	case protocol.PushReply:
		var counts [len(pushStatuses)]int
		for i := range r.Results {
			counts[pushStatusIndex(r.Results[i].Status)]++
		}
		for i, n := range counts {
			if n > 0 {
				m.byStatus[i].Add(float64(n))
			}
		}
	case protocol.PopResult:
		m.poppedBy(r)
	case protocol.AckResult:
		if r.Pop != nil {
			m.poppedBy(*r.Pop)
		}
	}
}

// spooled counts n push items written to the spool for cause.
func (m *metrics) spooled(cause string, n int) {
	for i, c := range protocol.SpoolCauses {
		if c == cause {
			m.spooledBy[i].Add(uint64(n))
			return
		}
	}
}

// spooledByCause is what spooled counted, by cause; nil while nothing was
// spooled.
func (m *metrics) spooledByCause() map[string]uint64 {
	var out map[string]uint64
	for i, c := range protocol.SpoolCauses {
		if n := m.spooledBy[i].Load(); n > 0 {
			if out == nil {
				out = make(map[string]uint64, len(protocol.SpoolCauses))
			}
			out[c] = n
		}
	}
	return out
}

// poppedBy counts what one pop delivered.
func (m *metrics) poppedBy(r protocol.PopResult) {
	m.leases.Add(float64(len(r.Leases)))
	m.popped.Add(uint64(len(r.Messages)))
}

// pushStatuses are the statuses of push items, as counted.
var pushStatuses = [...]string{protocol.StatusQueued, protocol.StatusDuplicate, protocol.StatusBuffered, protocol.StatusFailed}

func pushStatusIndex(status string) int {
	switch status {
	case protocol.StatusQueued:
		return 0
	case protocol.StatusDuplicate:
		return 1
	case protocol.StatusBuffered:
		return 2
	}
	return 3 // failed
}

func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{})
}

func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
