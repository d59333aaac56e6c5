package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"regexp"
	"slices"
	"time"

	"github.com/hashicorp/go-hclog"

	queenside "github.com/queenside/queenside/clients/go"
	"github.com/queenside/queenside/protocol"
	"github.com/queenside/queenside/sidecar/janitor"
)

// Scenario names, in the order Run runs them.
const (
	ScenarioPush       = "push"
	ScenarioInsert     = "insert"
	ScenarioSQLSend    = "sqlsend"
	ScenarioPopAck     = "popack"
	ScenarioAutoAck    = "autoack"
	ScenarioMixed      = "mixed"
	ScenarioCurve      = "curve"
	ScenarioIdle       = "idle"
	ScenarioLatency    = "latency"
	ScenarioPartitions = "partitions"
	ScenarioFanout     = "fanout"
	ScenarioFloor      = "floor"
	ScenarioSoak       = "soak"
	ScenarioSpool      = "spool"
	ScenarioReplay     = "replay"
	ScenarioConsume    = "consume"
	ScenarioAckAsync   = "ackasync"
	ScenarioHeld       = "held"
	ScenarioPgmq       = "pgmq"
)

// Scenarios returns the scenarios a run does by default, in the order Run
// runs them. The order is fixed, not the one asked for, because popack and
// autoack consume the backlog push leaves.
func Scenarios() []string {
	return slices.DeleteFunc(allScenarios(), onRequest)
}

// allScenarios is every scenario, in the order Run runs them.
func allScenarios() []string {
	return []string{ScenarioPush, ScenarioInsert, ScenarioSQLSend, ScenarioPopAck, ScenarioAutoAck, ScenarioConsume, ScenarioAckAsync, ScenarioMixed,
		ScenarioCurve, ScenarioPgmq, ScenarioIdle, ScenarioLatency, ScenarioPartitions, ScenarioFanout, ScenarioHeld, ScenarioFloor, ScenarioSoak,
		ScenarioSpool, ScenarioReplay}
}

// onRequest names the scenarios that run only when named: soak takes
// minutes, not seconds, and held pushes and drains twice a backlog of a
// million; consume and ackasync compare the Go client's consume loop with
// and without AckAsync (consumeloop.go); pgmq needs pgmq's SQL, which the
// bench does not hold (--pgmq-sql, pgmq.go).
func onRequest(name string) bool {
	return name == ScenarioSoak || name == ScenarioHeld || name == ScenarioConsume || name == ScenarioAckAsync ||
		name == ScenarioPgmq
}

// stopsPostgres names the scenarios that stop and restart PostgreSQL: they
// run last, and only against the PostgreSQL the bench started itself.
func stopsPostgres(name string) bool { return name == ScenarioSpool || name == ScenarioReplay }

// Config is everything a run is told. The JSON names are the command's flag
// names, so the report records exactly the flags a run had.
type Config struct {
	// DatabaseURL uses an existing database instead of starting PostgreSQL.
	DatabaseURL string `json:"database-url"`
	// Socket uses a running sidecar instead of starting one.
	Socket string `json:"socket"`
	// SidecarPID lets the CPU and memory of a sidecar given by Socket be read.
	SidecarPID int `json:"sidecar-pid"`
	// SidecarBinary is executed as `serve` when the sidecar is started here;
	// "" means this program's own binary.
	SidecarBinary string `json:"sidecar-binary"`
	// Out is where the JSON report is written; "" writes none.
	Out       string   `json:"out"`
	Scenarios []string `json:"scenarios"`

	Messages      int `json:"messages"`       // push, partitions; and the backlog of popack and autoack
	PayloadBytes  int `json:"payload-bytes"`  // every message; the first 8 bytes carry the push time
	Batch         int `json:"batch"`          // items per push request
	Partitions    int `json:"partitions"`     // push, and the backlogs
	Connections   int `json:"connections"`    // push, popack, autoack, partitions, fanout
	Inflight      int `json:"inflight"`       // sequential workers per connection (requests in flight on it)
	PopBatch      int `json:"pop-batch"`      // messages per pop
	PopPartitions int `json:"pop-partitions"` // partitions per pop in popack, autoack, fanout

	MixedDuration      time.Duration `json:"mixed-duration"`
	MixedRate          int           `json:"mixed-rate"` // messages/s over all producers; 0 pushes at full speed
	MixedPartitions    int           `json:"mixed-partitions"`
	MixedProducers     int           `json:"mixed-producers"` // connections
	MixedConsumers     int           `json:"mixed-consumers"` // connections
	MixedPopPartitions int           `json:"mixed-pop-partitions"`
	MixedWaitMs        int           `json:"mixed-wait-ms"`

	// The live queue's consumers (mixed and curve; live.go): Consumer is
	// ConsumerLoop (the Go client's Consume with its defaults) or
	// ConsumerPop (the tuned pop cycle of PopBatch and MixedPopPartitions);
	// ConsumerCommand, when set, runs that program a consumer instead.
	// ConsumeConcurrency is the consume loops' concurrency (0: their
	// default), HandlerWait how long their handler waits a message.
	Consumer           string        `json:"consumer"`
	ConsumerCommand    string        `json:"consumer-command"`
	ConsumeConcurrency int           `json:"consume-concurrency"`
	HandlerWait        time.Duration `json:"handler-wait"`

	// The curve: mixed's producers and consumers at each of CurveRates
	// (messages/s offered) for CurveDuration, each on a fresh queue.
	CurveRates    []int         `json:"curve-rates"`
	CurveDuration time.Duration `json:"curve-duration"`
	// PgmqSQL is pgmq's pgmq-extension/sql/pgmq.sql, which the pgmq
	// scenario loads to run the curve's traffic through pgmq (pgmq.go).
	PgmqSQL string `json:"pgmq-sql"`
	// IdleDuration is how long idle watches mixed's consumers long-polling
	// an empty queue of mixed's partitions.
	IdleDuration time.Duration `json:"idle-duration"`

	// WritesQuiet is how long PostgreSQL's write counters must hold still
	// before the bench reads them, around push, partitions, mixed and each
	// rate of curve (writes.go); 0 reads none.
	WritesQuiet time.Duration `json:"writes-quiet"`

	LatencyRequests int `json:"latency-requests"`
	ScalePartitions int `json:"scale-partitions"`
	FanoutGroups    int `json:"fanout-groups"`
	FanoutMessages  int `json:"fanout-messages"`

	// The held scenario: a backlog of HeldMessages over HeldPartitions,
	// drained with every partition free and with HeldBack heads leased
	// and never acked (held.go).
	HeldMessages   int `json:"held-messages"`
	HeldPartitions int `json:"held-partitions"`
	HeldBack       int `json:"held-back"`

	// The floor: the row writes mixed's traffic needs at the least, as
	// plain SQL (see floor.go).
	FloorDuration            time.Duration `json:"floor-duration"`
	FloorPartitions          int           `json:"floor-partitions"`
	FloorTransactionMessages int           `json:"floor-transaction-messages"` // messages a push transaction
	FloorLeaseMessages       int           `json:"floor-lease-messages"`       // messages a lease; 0: no cursor writes
	FloorLeasePartitions     int           `json:"floor-lease-partitions"`     // cursors a lease or ack statement

	// The soak: producers at a steady rate and consumers keeping up, for
	// long, with retention on, watching the tables' sizes. Zero values take
	// the defaults of DefaultConfig.
	SoakDuration   time.Duration `json:"soak-duration"`
	SoakRate       int           `json:"soak-rate"` // messages/s over all producers
	SoakPartitions int           `json:"soak-partitions"`
	// SoakSample is the time between two looks at the tables.
	SoakSample time.Duration `json:"soak-sample"`
	// SoakWarmup is the time the tables get to reach their steady state;
	// after it they must stay within soakGrowth times their largest size
	// in its last two thirds (see checkSoak).
	SoakWarmup time.Duration `json:"soak-warmup"`
	// SoakCompletedRetention is the soak queue's completed_retention_seconds.
	SoakCompletedRetention int `json:"soak-completed-retention"`

	// RetentionInterval is the --retention-interval of the sidecar the
	// bench starts. Zero is serve's default, or 1 s when soak runs, so
	// that the soak reaches its steady state quickly; negative runs no
	// janitor at all.
	RetentionInterval time.Duration `json:"retention-interval"`

	// Tracing runs the sidecar with OpenTelemetry tracing on, exporting to
	// a receiver in the bench process, and has every push carry a
	// producer's trace context (see tracing.go).
	Tracing bool `json:"tracing"`

	// Encrypt runs the sidecar with an encryption key and every queue the
	// scenarios configure with encryptPayloads, so that each payload is
	// sealed on push and opened on pop.
	Encrypt bool `json:"encrypt"`

	// StallTimeout ends a consuming scenario that has received nothing for
	// this long, as an error, instead of waiting forever for lost messages.
	StallTimeout time.Duration `json:"stall-timeout"`

	// Output receives progress lines and the table; nil means os.Stdout.
	Output io.Writer `json:"-"`
	// Logger receives what PostgreSQL start-up and shutdown report; nil
	// discards it.
	Logger hclog.Logger `json:"-"`
}

// DefaultConfig returns the scenarios' standard sizes, those the targets
// are stated for.
func DefaultConfig() Config {
	return Config{
		Out:             "bench.json",
		Scenarios:       Scenarios(),
		Messages:        200_000,
		PayloadBytes:    200,
		Batch:           100,
		Partitions:      10,
		Connections:     4,
		Inflight:        1,
		PopBatch:        100,
		PopPartitions:   1,
		MixedDuration:   60 * time.Second,
		MixedPartitions: 1000,
		// The steady state of the target: producers hold 40,000 msg/s and
		// the question is whether consumers keep up with a short delivery
		// time. At full speed (0) a backlog only measures who is faster.
		MixedRate:          40000,
		MixedProducers:     4,
		MixedConsumers:     4,
		MixedPopPartitions: 10,
		MixedWaitMs:        1000,
		Consumer:           ConsumerLoop,
		CurveRates:         []int{2000, 5000, 10000, 20000, 30000},
		CurveDuration:      20 * time.Second,
		IdleDuration:       30 * time.Second,
		LatencyRequests:    5000,
		ScalePartitions:    10_000,
		FanoutGroups:       5,
		FanoutMessages:     100_000,
		HeldMessages:       1_000_000,
		HeldPartitions:     1000,
		HeldBack:           100,
		// mixed's traffic: 1,000 partitions, and 25 ms of it at 40,000 msg/s
		// in each push transaction (a quarter of the 100 ms delivery target
		// spent gathering it).
		FloorDuration:            15 * time.Second,
		WritesQuiet:              10500 * time.Millisecond,
		FloorPartitions:          1000,
		FloorTransactionMessages: 1000,
		FloorLeaseMessages:       4,
		FloorLeasePartitions:     10,
		StallTimeout:             30 * time.Second,

		SoakDuration:           10 * time.Minute,
		SoakRate:               5000,
		SoakPartitions:         10,
		SoakSample:             10 * time.Second,
		SoakWarmup:             2 * time.Minute,
		SoakCompletedRetention: 5,
	}
}

// withDefaults gives the fields left zero their default. Only the soak's
// and the retention interval: the others are always set by whoever builds
// a Config, and a zero there is a mistake Validate reports.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.SoakDuration == 0 {
		c.SoakDuration = d.SoakDuration
	}
	if c.SoakRate == 0 {
		c.SoakRate = d.SoakRate
	}
	if c.SoakPartitions == 0 {
		c.SoakPartitions = d.SoakPartitions
	}
	if c.SoakSample == 0 {
		c.SoakSample = d.SoakSample
	}
	if c.SoakWarmup == 0 {
		c.SoakWarmup = min(d.SoakWarmup, c.SoakDuration/3)
	}
	if c.SoakCompletedRetention == 0 {
		c.SoakCompletedRetention = d.SoakCompletedRetention
	}
	if c.RetentionInterval == 0 {
		c.RetentionInterval = janitor.DefaultInterval
		if c.selected(ScenarioSoak) {
			c.RetentionInterval = time.Second
		}
	}
	return c
}

// Validate checks every number against what the protocol accepts.
func (c Config) Validate() error {
	for _, s := range c.Scenarios {
		if !slices.Contains(allScenarios(), s) {
			return fmt.Errorf("unknown scenario %q (want some of %v)", s, allScenarios())
		}
	}
	if len(c.Scenarios) == 0 {
		return fmt.Errorf("no scenario selected")
	}
	checks := []struct {
		name      string
		v, lo, hi int
	}{
		{"messages", c.Messages, 1, 1 << 30},
		{"payload-bytes", c.PayloadBytes, 8, 1 << 24},
		{"batch", c.Batch, 1, protocol.MaxPushItems},
		{"partitions", c.Partitions, 1, 1 << 30},
		{"connections", c.Connections, 1, 4096},
		{"inflight", c.Inflight, 1, 256},
		{"pop-batch", c.PopBatch, 1, protocol.MaxPopBatch},
		{"pop-partitions", c.PopPartitions, 1, protocol.MaxPopPartitions},
		{"mixed-rate", c.MixedRate, 0, 1 << 30},
		{"mixed-partitions", c.MixedPartitions, 1, 1 << 30},
		{"mixed-producers", c.MixedProducers, 1, 4096},
		{"mixed-consumers", c.MixedConsumers, 1, 4096},
		{"mixed-pop-partitions", c.MixedPopPartitions, 1, protocol.MaxPopPartitions},
		{"mixed-wait-ms", c.MixedWaitMs, 0, protocol.MaxWaitMs},
		{"consume-concurrency", c.ConsumeConcurrency, 0, queenside.MaxConcurrency},
		{"latency-requests", c.LatencyRequests, 1, 1 << 30},
		{"scale-partitions", c.ScalePartitions, 1, 1 << 30},
		{"fanout-groups", c.FanoutGroups, 1, 1000},
		{"fanout-messages", c.FanoutMessages, 1, 1 << 30},
		{"held-messages", c.HeldMessages, 1, 1 << 30},
		{"held-partitions", c.HeldPartitions, 1, 1 << 30},
		{"held-back", c.HeldBack, 0, c.HeldPartitions - 1},
		{"floor-partitions", c.FloorPartitions, 1, 1 << 30},
		{"floor-transaction-messages", c.FloorTransactionMessages, 1, 1 << 20},
		{"floor-lease-messages", c.FloorLeaseMessages, 0, 1 << 20},
		{"floor-lease-partitions", c.FloorLeasePartitions, 1, 1 << 20},
		{"sidecar-pid", c.SidecarPID, 0, 1 << 30},
		{"soak-rate", c.SoakRate, 1, 1 << 30},
		{"soak-partitions", c.SoakPartitions, 1, 1 << 30},
		{"soak-completed-retention", c.SoakCompletedRetention, 1, 86400},
	}
	for _, k := range checks {
		if k.v < k.lo || k.v > k.hi {
			return fmt.Errorf("--%s %d: want %d..%d", k.name, k.v, k.lo, k.hi)
		}
	}
	if c.Consumer != ConsumerLoop && c.Consumer != ConsumerPop {
		return fmt.Errorf("--consumer %q: want %s or %s", c.Consumer, ConsumerLoop, ConsumerPop)
	}
	if c.HandlerWait < 0 {
		return fmt.Errorf("--handler-wait %v: want 0 or more", c.HandlerWait)
	}
	if c.Encrypt && c.Socket != "" {
		return fmt.Errorf("--encrypt needs the sidecar the bench starts (no --socket)")
	}
	if c.Tracing && c.Socket != "" {
		return fmt.Errorf("--tracing needs the sidecar the bench starts (no --socket)")
	}
	if len(c.CurveRates) == 0 {
		return fmt.Errorf("--curve-rates: want at least one rate")
	}
	for _, r := range c.CurveRates {
		if r < 1 || r > 1<<30 {
			return fmt.Errorf("--curve-rates %d: want 1..%d", r, 1<<30)
		}
	}
	if c.CurveDuration <= 0 || c.IdleDuration <= 0 {
		return fmt.Errorf("--curve-duration %v, --idle-duration %v: want more than 0", c.CurveDuration, c.IdleDuration)
	}
	if c.MixedDuration <= 0 {
		return fmt.Errorf("--mixed-duration %v: want more than 0", c.MixedDuration)
	}
	if c.FloorDuration <= 0 {
		return fmt.Errorf("--floor-duration %v: want more than 0", c.FloorDuration)
	}
	if c.StallTimeout <= 0 {
		return fmt.Errorf("--stall-timeout %v: want more than 0", c.StallTimeout)
	}
	if c.SoakSample <= 0 || c.SoakWarmup <= 0 || c.SoakDuration < c.SoakWarmup+2*c.SoakSample {
		return fmt.Errorf("--soak-duration %v, --soak-warmup %v, --soak-sample %v: want a duration of at least the warm-up and two samples",
			c.SoakDuration, c.SoakWarmup, c.SoakSample)
	}
	return nil
}

func (c Config) selected(name string) bool { return slices.Contains(c.Scenarios, name) }

// MarshalJSON writes durations as Go duration strings (the form the flags
// take) and hides a password in the database URL.
func (c Config) MarshalJSON() ([]byte, error) {
	type plain Config // drops this method, so no recursion
	return json.Marshal(struct {
		plain
		DatabaseURL   string `json:"database-url"`
		MixedDuration string `json:"mixed-duration"`
		CurveDuration string `json:"curve-duration"`
		IdleDuration  string `json:"idle-duration"`
		FloorDuration string `json:"floor-duration"`
		WritesQuiet   string `json:"writes-quiet"`
		StallTimeout  string `json:"stall-timeout"`
		SoakDuration  string `json:"soak-duration"`
		SoakSample    string `json:"soak-sample"`
		SoakWarmup    string `json:"soak-warmup"`
		Retention     string `json:"retention-interval"`
	}{plain(c), redactURL(c.DatabaseURL), c.MixedDuration.String(), c.CurveDuration.String(), c.IdleDuration.String(), c.FloorDuration.String(), c.WritesQuiet.String(), c.StallTimeout.String(),
		c.SoakDuration.String(), c.SoakSample.String(), c.SoakWarmup.String(), c.RetentionInterval.String()})
}

// redactURL hides the password of a connection string, URL or keyword/value.
func redactURL(conn string) string {
	if u, err := url.Parse(conn); err == nil && u.Scheme != "" {
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
		}
		q := u.Query()
		if q.Has("password") {
			q.Set("password", "xxxxx")
			u.RawQuery = q.Encode()
		}
		return u.String()
	}
	return keywordPassword.ReplaceAllString(conn, "${1}xxxxx")
}

var keywordPassword = regexp.MustCompile(`(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)`)
