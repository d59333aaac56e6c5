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
	// Cause says why pushes go to the spool now (revision 1.2): one of
	// the SpoolCause values; absent while they go to PostgreSQL.
	Cause string `msgpack:"cause,omitempty" json:"cause,omitempty"`
	// Spooled counts the push items spooled since the sidecar started,
	// by cause (revision 1.2); absent while none was.
	Spooled map[string]uint64 `msgpack:"spooled,omitempty" json:"spooled,omitempty"`
}

// Why push items go to the spool (SpoolHealth.Cause and Spooled).
const (
	SpoolCauseTimeout     = "timeout"     // PostgreSQL did not answer within the database timeout
	SpoolCauseRefused     = "refused"     // it refused or reset the connection, or was shutting down
	SpoolCauseMaintenance = "maintenance" // push maintenance is on
	SpoolCauseBehind      = "behind"      // an earlier item of the partition was still spooled
)

// SpoolCauses lists the causes, in the order they are shown.
var SpoolCauses = [...]string{SpoolCauseTimeout, SpoolCauseRefused, SpoolCauseMaintenance, SpoolCauseBehind}
