package verify

import (
	"encoding/json"
	"os"
	"time"
)

// Report is everything a run found, and under which conditions. It is what
// --out holds.
type Report struct {
	RunID      string     `json:"runId"`
	StartedAt  time.Time  `json:"startedAt"`
	Conditions Conditions `json:"conditions"`
	Config     Config     `json:"flags"`
	Seed       int64      `json:"seed"` // the seed used (the flag may be 0)

	// Queues has one entry per queue: queue i is audited by the consumer
	// group reading it, stage i, and the last one by the checker.
	Queues []QueueReport `json:"queues"`
	Loader LoaderReport  `json:"loader"`
	// Totals over every queue.
	Duplicates int64 `json:"duplicates"`
	Gaps       int64 `json:"gaps"`
	// ReportedLost are events a spool-damage fault cost, each reported by
	// its sidecar by name, counted once (in the queue that lost them).
	ReportedLost    int64 `json:"reportedLost"`
	OrderViolations int64 `json:"orderViolations"`
	Redeliveries    int64 `json:"redeliveries"`

	Faults      []FaultRecord     `json:"faults"`
	FaultCounts map[FaultKind]int `json:"faultCounts"`
	Spool       SpoolReport       `json:"spool"`
	// Latency is end to end: from the loader's first push attempt of an
	// event to the checker's first receipt of it.
	Latency    *LatencySummary `json:"latency"`
	Throughput []Interval      `json:"throughput"`

	// UnexpectedErrors are answers the run never provokes (an
	// invalid_argument, say); each fails the run.
	UnexpectedErrors []string `json:"unexpectedErrors"`
	Unexpected       int64    `json:"unexpected"`

	Drained         bool             `json:"drained"`
	DrainSeconds    float64          `json:"drainSeconds"`
	ElapsedSeconds  float64          `json:"elapsedSeconds"`
	Violations      []Violation      `json:"violations"`
	ViolationCounts map[string]int64 `json:"violationCounts"`
	Passed          bool             `json:"passed"`
}

// QueueReport is one queue, as its consumer group saw it.
type QueueReport struct {
	Queue    int    `json:"queue"`
	Name     string `json:"name"`
	Consumer string `json:"consumer"`
	AuditStats
	// ConsumersReplaced counts consumers killed by a fault and replaced.
	ConsumersReplaced int64 `json:"consumersReplaced"`
	// Counts are the group's batches by outcome, its retries by operation
	// and code, and the transaction pushes answered duplicate.
	Counts map[string]int64 `json:"counts"`
}

// LoaderReport is what the loader pushed, by the status of the answers.
type LoaderReport struct {
	Events    int64            `json:"events"`
	Confirmed int64            `json:"confirmed"` // answered queued, duplicate or buffered
	Counts    map[string]int64 `json:"counts"`    // statuses, requests, retries by code
	// PushedSeconds is how long the loader generated events; past
	// --duration, Extended says how far and why.
	PushedSeconds float64 `json:"pushedSeconds"`
	Extended      string  `json:"extended,omitempty"`
}

// SpoolReport is what the spools went through. Buffered and Replayed are
// the sidecars' own counters (queenside_push_items_total{status="buffered"}
// and queenside_spool_replayed_total), summed over every sidecar and every
// incarnation, each incarnation as last sampled before it ended; the loader
// counts the buffered answers it received itself.
type SpoolReport struct {
	LoaderBuffered int64          `json:"loaderBuffered"`
	Buffered       int64          `json:"buffered"`
	Replayed       int64          `json:"replayed"`
	Rejected       int64          `json:"rejected"`
	RecordsLeft    int64          `json:"recordsLeft"`
	Sidecars       []SidecarSpool `json:"sidecars"`
}

// SidecarSpool is one sidecar slot's spool counters.
type SidecarSpool struct {
	Sidecar      int `json:"sidecar"`
	Incarnations int `json:"incarnations"`
	spoolCounters
}

// Interval is one bucket of the throughput over time.
type Interval struct {
	StartSeconds float64 `json:"startSeconds"`
	LoaderPerSec float64 `json:"loaderPerSec"`
	// PerSec has each group's first deliveries per second, stage 1 first
	// and the checker last.
	PerSec   []float64       `json:"perSec"`
	Buffered int64           `json:"buffered"`
	Latency  *LatencySummary `json:"latency"`
	Faults   []string        `json:"faults,omitempty"`
}

func (r *Report) write(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
