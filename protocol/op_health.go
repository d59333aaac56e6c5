package protocol

import "time"

// Health statuses.
const (
	HealthOK          = "ok"
	HealthUnavailable = "unavailable"
	HealthDraining    = "draining"
)

// HealthResult is the answer of health and of the HTTP /health probe.
type HealthResult struct {
	Status        string         `msgpack:"status" json:"status"`
	Database      DatabaseHealth `msgpack:"database" json:"database"`
	Spool         SpoolHealth    `msgpack:"spool" json:"spool"`
	Version       string         `msgpack:"version" json:"version"`
	UptimeSeconds float64        `msgpack:"uptimeSeconds" json:"uptimeSeconds"`
	// Maintenance is the cluster's maintenance state as this sidecar
	// applies it (revision 1.1); absent until it was read once.
	Maintenance *MaintenanceState `msgpack:"maintenance,omitempty" json:"maintenance,omitempty"`
}

// DatabaseHealth is the outcome of a real round trip to PostgreSQL.
type DatabaseHealth struct {
	OK        bool    `msgpack:"ok" json:"ok"`
	LatencyMs float64 `msgpack:"latencyMs,omitempty" json:"latencyMs,omitempty"`
	Error     string  `msgpack:"error,omitempty" json:"error,omitempty"`
}

// SpoolHealth describes the local disk spool.
type SpoolHealth struct {
	Records   int64      `msgpack:"records" json:"records"`
	Bytes     int64      `msgpack:"bytes" json:"bytes"`
	OldestAt  *time.Time `msgpack:"oldestAt,omitempty" json:"oldestAt,omitempty"`
	Replaying bool       `msgpack:"replaying" json:"replaying"`
	// Warnings name what an operator must look at: spool files moved to
	// quarantine/, records older than their queue's dedup window.
	Warnings []string `msgpack:"warnings,omitempty" json:"warnings,omitempty"`
}
