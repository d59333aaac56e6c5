package bench

import (
	"encoding/json"
	"os"
	"time"
)

// Report is everything a run measured, and under which conditions. It is
// what --out holds.
type Report struct {
	RunID      string     `json:"runId"`
	StartedAt  time.Time  `json:"startedAt"`
	Conditions Conditions `json:"conditions"`
	Config     Config     `json:"flags"`
	Scenarios  []Result   `json:"scenarios"`
	Failed     bool       `json:"failed"`
	// Tracing is what the sidecar exported in a run with tracing on (as
	// of the end of the last scenario); null when tracing was off.
	Tracing *TracingInfo `json:"tracing,omitempty"`
}

// Conditions are the facts that decide whether two reports can be compared.
type Conditions struct {
	Cores          int    `json:"cores"` // processors listed in /proc/cpuinfo
	CPUModel       string `json:"cpuModel,omitempty"`
	MemoryBytes    int64  `json:"memoryBytes"` // MemTotal of /proc/meminfo
	GoVersion      string `json:"goVersion"`
	OSArch         string `json:"osArch"`
	ClockTicks     int64  `json:"clockTicksPerSecond"`
	SidecarVersion string `json:"sidecarVersion"`
	// Started* say whether the run started the process itself, or used one
	// given by --socket or --database-url.
	SidecarStarted  bool `json:"sidecarStartedByBench"`
	PostgresStarted bool `json:"postgresStartedByBench"`
	// The processes measured; null when they could not be found, and then
	// their CPU and memory are unknown.
	SidecarPID    *int          `json:"sidecarPid"`
	PostmasterPID *int          `json:"postmasterPid"`
	Postgres      *PostgresInfo `json:"postgres"` // null without a database URL
	// Encrypt: every queue sealed its payloads (--encrypt).
	Encrypt bool `json:"encrypt"`
}

// PostgresInfo is what PostgreSQL says of itself.
type PostgresInfo struct {
	Version           string            `json:"version"`
	SynchronousCommit string            `json:"synchronousCommit"`
	Fsync             string            `json:"fsync"`
	Settings          map[string]string `json:"settings"` // other settings that move the numbers
}

// Result is one scenario's figures. Pointers are null in JSON when the
// figure does not apply or could not be observed.
type Result struct {
	Name        string `json:"name"`
	Failed      bool   `json:"failed"`
	Interrupted bool   `json:"interrupted,omitempty"`
	Errors      int64  `json:"errors"`
	// ErrorSamples are the first distinct error messages.
	ErrorSamples []string `json:"errorSamples,omitempty"`
	// Messages moved: pushed and queued for push scenarios, delivered
	// (summed over groups) for consuming ones.
	Messages   int64   `json:"messages"`
	Seconds    float64 `json:"seconds"`
	MsgsPerSec float64 `json:"msgsPerSec"`
	// Latency is the request latency that characterises the scenario (see
	// LatencyOf); Requests has every operation's separately.
	Latency   *LatencySummary           `json:"latency"`
	LatencyOf string                    `json:"latencyOf"`
	Requests  map[string]LatencySummary `json:"requests"`
	// Delivery is push-to-delivery latency: from the time the producer
	// wrote into the payload to the moment the pop returning it ended.
	Delivery *LatencySummary `json:"delivery"`

	SidecarCPUSeconds  *float64 `json:"sidecarCpuSeconds"`
	PostgresCPUSeconds *float64 `json:"postgresCpuSeconds"`
	BenchCPUSeconds    *float64 `json:"benchCpuSeconds"`
	// MsgsPerCPUSecond is Messages over the CPU of sidecar and PostgreSQL
	// together: what a message costs the server side.
	MsgsPerCPUSecond *float64 `json:"msgsPerCpuSecond"`
	// SidecarPeakRSSBytes is VmHWM at the end of the scenario: the most
	// memory the sidecar has held since it started, not only in this
	// scenario.
	SidecarPeakRSSBytes *int64 `json:"sidecarPeakRssBytes"`

	Redelivered int64 `json:"redelivered,omitempty"` // deliveries of messages an earlier lease held
	EmptyPops   int64 `json:"emptyPops,omitempty"`
	// Pushed and PushedPerSec are the producers' side of mixed.
	Pushed       int64   `json:"pushed,omitempty"`
	PushedPerSec float64 `json:"pushedPerSec,omitempty"`

	// Writes is what PostgreSQL wrote for the scenario's messages (push,
	// partitions, mixed; the curve has it for each rate).
	Writes *Writes `json:"writes,omitempty"`

	// Curve has the curve's figures at each rate; Idle the idle scenario's.
	Curve []CurvePoint `json:"curve,omitempty"`
	Idle  *IdleFigures `json:"idle,omitempty"`

	// Soak is the soak's samples of the tables, and its verdict on them.
	Soak *SoakReport `json:"soak,omitempty"`
	// Held is what the held scenario measured.
	Held *HeldReport `json:"held,omitempty"`
}

// absorb fills r from the merged tally of its workers; latencyOf names the
// operations whose requests make the headline latency.
func (r *Result) absorb(t *tally, latencyOf ...string) {
	r.Errors += t.errors
	for _, s := range t.samples {
		if len(r.ErrorSamples) < maxSamples {
			r.ErrorSamples = append(r.ErrorSamples, s)
		}
	}
	r.Messages += t.messages
	r.Redelivered += t.redelivered
	r.EmptyPops += t.emptyPops
	r.Pushed += t.pushed
	r.Requests = map[string]LatencySummary{}
	var headline []time.Duration
	for _, op := range latencyOf {
		headline = append(headline, t.requests[op]...)
	}
	r.Latency = summarize(headline)
	for op, d := range t.requests {
		r.Requests[op] = *summarize(d)
	}
	r.Delivery = summarize(t.delivery)
	for i, op := range latencyOf {
		if i > 0 {
			r.LatencyOf += "+"
		}
		r.LatencyOf += op
	}
}

// finish derives the rates and the verdict once the figures are in.
func (r *Result) finish() {
	if r.Seconds > 0 {
		r.MsgsPerSec = float64(r.Messages) / r.Seconds
		r.PushedPerSec = float64(r.Pushed) / r.Seconds
	}
	if r.SidecarCPUSeconds != nil && r.PostgresCPUSeconds != nil {
		if cpu := *r.SidecarCPUSeconds + *r.PostgresCPUSeconds; cpu > 0 {
			r.MsgsPerCPUSecond = ptr(float64(r.Messages) / cpu)
		}
	}
	r.Failed = r.Errors > 0 || r.Interrupted
}

func (r *Report) write(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// setupFailed records an error that kept the scenario from running.
func (r *Result) setupFailed(err error) {
	r.Errors++
	r.ErrorSamples = append(r.ErrorSamples, err.Error())
}

// inherit records the errors of an unmeasured step the scenario relied on,
// such as the push that made its backlog.
func (r *Result) inherit(step string, t *tally) {
	r.Errors += t.errors
	for _, s := range t.samples {
		if len(r.ErrorSamples) < maxSamples {
			r.ErrorSamples = append(r.ErrorSamples, step+": "+s)
		}
	}
}
