package sidecar

import (
	"context"
	"fmt"
	"time"

	"github.com/queenside/queenside/protocol"
	"github.com/queenside/queenside/sidecar/buffer"
)

// healthTimeout bounds the database round trip of a health check, so that a
// probe answers promptly even when PostgreSQL hangs.
const healthTimeout = 2 * time.Second

func (s *Server) opHealth(ctx context.Context, _ []byte) (any, error) {
	return s.Health(ctx), nil
}

// Health performs a real database round trip and reports the sidecar's state.
func (s *Server) Health(ctx context.Context) protocol.HealthResult {
	ctx, cancel := context.WithTimeout(ctx, healthTimeout)
	defer cancel()
	h := protocol.HealthResult{
		Status:        protocol.HealthOK,
		Version:       Version,
		UptimeSeconds: time.Since(s.started).Seconds(),
	}
	latency, err := s.store.Ping(ctx)
	switch {
	case err != nil:
		h.Status = protocol.HealthUnavailable
		h.Database.Error = err.Error()
		if ctx.Err() != nil {
			h.Database.Error = fmt.Sprintf("no answer within %v", healthTimeout)
		}
	case !s.ready.Load():
		h.Status = protocol.HealthUnavailable
		h.Database = protocol.DatabaseHealth{OK: true, LatencyMs: ms(latency), Error: "schema not migrated yet"}
	default:
		h.Database = protocol.DatabaseHealth{OK: true, LatencyMs: ms(latency)}
		// Within the same bound as the ping: a database that stalls
		// between the two is not healthy either.
		missing, err := s.store.MissingPrivileges(ctx)
		switch {
		case ctx.Err() != nil:
			h.Status = protocol.HealthUnavailable
			h.Database = protocol.DatabaseHealth{Error: fmt.Sprintf("no answer within %v", healthTimeout)}
		case err == nil && missing != "":
			h.Status = protocol.HealthUnavailable
			h.Database.OK = false
			h.Database.Error = "the sidecar's database role lacks " + missing
		}
	}
	if s.draining.Load() {
		h.Status = protocol.HealthDraining
	}
	h.Maintenance = s.control.maintenance()
	if s.buffer != nil {
		b := s.buffer.Stats()
		h.Spool = protocol.SpoolHealth{Records: int64(b.Records), Bytes: b.Bytes, Replaying: b.Replaying, Warnings: b.Warnings,
			Cause: s.spoolingCause(b), Spooled: s.metrics.spooledByCause()}
		if !b.Oldest.IsZero() {
			oldest := b.Oldest.UTC()
			h.Spool.OldestAt = &oldest
		}
	}
	return h
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// spoolingCause says why pushes go to the spool now (a
// protocol.SpoolCause*), "" while they go to PostgreSQL.
func (s *Server) spoolingCause(b buffer.Stats) string {
	if s.control.pushMaintenance() {
		return protocol.SpoolCauseMaintenance
	}
	return b.DownCause
}
