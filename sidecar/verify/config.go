package verify

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/queenside/queenside/sidecar/store"
)

// Config is everything a run is told. The JSON names are the command's flag
// names, so the report records exactly the flags a run had.
type Config struct {
	Sidecars   int           `json:"sidecars"`
	Stages     int           `json:"stages"`
	Partitions int           `json:"partitions"`
	Rate       int           `json:"rate"` // events per second pushed by the loader, over all partitions
	Duration   time.Duration `json:"duration"`
	// Consumers is the number of parallel consumers of each stage, and of
	// the checker.
	Consumers    int    `json:"consumers"`
	LeaseSeconds int    `json:"lease-seconds"`
	Seed         int64  `json:"seed"` // seeds the random choices (fault targets, sidecars picked); 0 picks one and reports it
	Out          string `json:"out"`  // where the JSON report goes; "" writes none

	// Citus runs on a Citus cluster instead of one PostgreSQL: a
	// coordinator, the sidecars' database (pg-restart stops it,
	// postgres-stall freezes it, partition cuts a sidecar off it), and
	// CitusWorkers workers holding the shards (worker-restart stops one,
	// worker-stall freezes one). A coordinator has no standby here, so
	// there are no pg-failovers.
	Citus        bool `json:"citus"`
	CitusWorkers int  `json:"citus-workers"`

	// Fault counts, run one after another within the traffic; Faults, when
	// set, replaces them with an explicit schedule
	// ("sidecar-kill@60s,pg-restart@2m,..."). A count is the most the run
	// places: fewer when they do not fit in Duration, unless its kind is in
	// ExactCounts, when the run is refused instead. WorkerRestarts and
	// WorkerStalls are of Citus workers, so only with Citus.
	SidecarKills      int    `json:"sidecar-kills"`
	SidecarTerms      int    `json:"sidecar-terms"`
	PGRestarts        int    `json:"pg-restarts"`
	PostgresStalls    int    `json:"postgres-stalls"`
	PGFailovers       int    `json:"pg-failovers"`
	NetworkPartitions int    `json:"network-partitions"`
	WorkerRestarts    int    `json:"worker-restarts"`
	WorkerStalls      int    `json:"worker-stalls"`
	SpoolDiskFulls    int    `json:"spool-disk-fulls"`
	SpoolDamages      int    `json:"spool-damages"`
	ConsumerKills     int    `json:"consumer-kills"`
	LeaseExpiries     int    `json:"lease-expiries"`
	Faults            string `json:"faults"`
	// ExactCounts are the kinds whose count was given (the command's
	// flags that were set).
	ExactCounts []FaultKind `json:"-"`
	// PGDown is how long PostgreSQL (or a Citus worker) stays stopped or
	// frozen, and a sidecar cut off it; SidecarDown how long a stopped
	// sidecar stays down before it is started again.
	PGDown      time.Duration `json:"pg-down"`
	SidecarDown time.Duration `json:"sidecar-down"`
	// OutageKills adds SIGKILLs inside every PostgreSQL outage, where a
	// sidecar's spool holds records: with 1, a sidecar is killed while
	// PostgreSQL is down and started again before it returns; with 2,
	// another is also killed as soon as PostgreSQL is back, while the
	// spools replay. Either must come back and replay what it had spooled.
	OutageKills int `json:"outage-kills"`
	// DatabaseTimeout is the sidecars' --database-timeout: how long a
	// push waits for its commit before it is spooled, and what the guards
	// that find a vanished peer are derived from.
	DatabaseTimeout time.Duration `json:"database-timeout"`

	PopBatch      int `json:"pop-batch"`      // messages per pop
	PopPartitions int `json:"pop-partitions"` // partitions per pop
	WaitMs        int `json:"wait-ms"`        // long-poll wait of a pop

	// DrainTimeout bounds the wait, after the loader is done, for every
	// event to reach the checker.
	DrainTimeout time.Duration `json:"drain-timeout"`
	// Interval is the width of the throughput-over-time buckets and of the
	// progress lines.
	Interval time.Duration `json:"interval"`

	// SidecarBinary is executed as `serve`; "" means this program.
	SidecarBinary string `json:"sidecar-binary"`
	// KeepFiles keeps the temporary directory (PostgreSQL, spools, sidecar
	// logs) even after a run that passed; a failed run always keeps it.
	KeepFiles bool `json:"keep-files"`
	// PGSettings are more settings of the PostgreSQL the run starts (and of
	// its standby, or of every Citus node), each "name=value": to see where
	// a run's time goes, say with pg_stat_statements loaded. They are read
	// back into the report's conditions, since they change what a run
	// measures.
	PGSettings []string `json:"pg-settings,omitempty"`

	// Output receives progress lines and the report; nil means os.Stdout.
	Output io.Writer `json:"-"`
	// Logger receives what PostgreSQL start-up and shutdown report; nil
	// discards it.
	Logger hclog.Logger `json:"-"`
}

// DefaultConfig is what `make verify` runs: the stated target.
func DefaultConfig() Config {
	return Config{
		Sidecars:          3,
		Stages:            4,
		Partitions:        1000,
		Rate:              2000,
		Duration:          600 * time.Second,
		Consumers:         2,
		LeaseSeconds:      10,
		Out:               "verify.json",
		CitusWorkers:      2,
		SidecarKills:      3,
		SidecarTerms:      1,
		PGRestarts:        2,
		PostgresStalls:    2,
		PGFailovers:       2,
		NetworkPartitions: 2,
		SpoolDiskFulls:    1,
		SpoolDamages:      1,
		ConsumerKills:     2,
		LeaseExpiries:     2,
		PGDown:            10 * time.Second,
		SidecarDown:       2 * time.Second,
		OutageKills:       2,
		DatabaseTimeout:   store.DefaultTimeout,
		PopBatch:          1000,
		PopPartitions:     50,
		WaitMs:            1000,
		DrainTimeout:      5 * time.Minute,
		Interval:          10 * time.Second,
	}
}

// DedupWindowSeconds is the deduplication window of every queue of the
// run. Exact deduplication holds inside the window (the seed), and a push
// whose commit was left in doubt by a fault is replayed from its spool
// once the fault ends: the window covers the longest fault twice over
// (the outage, then its drain) and 5 minutes more, so that every such
// replay is judged inside it. A window shorter than an outage lets the
// replay of a commit in doubt store the message again, as documented.
func (c Config) DedupWindowSeconds() int {
	return 300 + int(2*c.PGDown.Seconds())
}

// Events is the number of events the loader pushes.
func (c Config) Events() int64 {
	return int64(float64(c.Rate) * c.Duration.Seconds())
}

// Validate reports settings a run cannot work with.
func (c Config) Validate() error {
	var errs []error
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	check(c.Sidecars >= 1, "--sidecars %d: want at least 1", c.Sidecars)
	check(c.Stages >= 1, "--stages %d: want at least 1", c.Stages)
	check(c.Partitions >= 1 && c.Partitions <= 100_000, "--partitions %d: want 1..100000", c.Partitions)
	check(c.Rate >= 1, "--rate %d: want at least 1 event/s", c.Rate)
	check(c.Duration >= time.Second, "--duration %v: want at least 1s", c.Duration)
	check(c.Events() >= 1, "--rate × --duration must make at least one event")
	check(c.Consumers >= 1, "--consumers %d: want at least 1", c.Consumers)
	check(c.LeaseSeconds >= 1 && c.LeaseSeconds <= 3600, "--lease-seconds %d: want 1..3600", c.LeaseSeconds)
	check(!slices.ContainsFunc(slices.Collect(maps.Values(c.counts())), func(n int) bool { return n < 0 }), "fault counts must not be negative")
	check(c.PGDown >= 0 && c.SidecarDown >= 0, "--pg-down and --sidecar-down must not be negative")
	check(c.OutageKills >= 0 && c.OutageKills <= 2, "--outage-kills %d: want 0, 1 or 2", c.OutageKills)
	check(c.OutageKills == 0 || c.PGDown > c.SidecarDown, "--outage-kills needs --pg-down longer than --sidecar-down")
	check(c.DatabaseTimeout >= 100*time.Millisecond, "--database-timeout %v: want 100ms or more", c.DatabaseTimeout)
	check(c.PopBatch >= 1 && c.PopBatch <= 10_000, "--pop-batch %d: want 1..10000", c.PopBatch)
	check(c.PopPartitions >= 1 && c.PopPartitions <= 100, "--pop-partitions %d: want 1..100", c.PopPartitions)
	check(c.WaitMs >= 0 && c.WaitMs <= 60_000, "--wait-ms %d: want 0..60000", c.WaitMs)
	check(c.DrainTimeout > 0, "--drain-timeout must be positive")
	check(c.Interval >= 100*time.Millisecond, "--interval %v: want at least 100ms", c.Interval)
	for _, s := range c.PGSettings {
		_, ok := settingName(s)
		check(ok, "--pg-setting %q: want name=value", s)
		check(!c.Citus || citusFirst(s), "--pg-setting %q: on Citus, shared_preload_libraries must begin with citus (citus,pg_stat_statements, say)", s)
	}
	errs = append(errs, c.checkCitus()...)
	if _, err := c.schedule(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// checkCitus refuses the faults the run's database cannot take: a failover
// needs a standby, which a Citus coordinator does not have here, and a
// worker restart or stall needs Citus workers.
func (c Config) checkCitus() []error {
	var errs []error
	if c.Citus {
		if c.CitusWorkers < 1 || c.CitusWorkers > 16 {
			errs = append(errs, fmt.Errorf("--citus-workers %d: want 1..16", c.CitusWorkers))
		}
		if c.asksFor(FaultPGFailover) {
			errs = append(errs, fmt.Errorf("%s with --citus: a Citus coordinator has no standby here to fail over to; %s",
				c.askedFor(FaultPGFailover), c.leaveOut(FaultPGFailover)))
		}
		return errs
	}
	for _, k := range []FaultKind{FaultWorkerRestart, FaultWorkerStall} {
		if c.asksFor(k) {
			errs = append(errs, fmt.Errorf("%s: %s faults need --citus, without which there are no Citus workers to %s; add --citus or %s",
				c.askedFor(k), k, workerVerb[k], c.leaveOut(k)))
		}
	}
	return errs
}

// workerVerb says what a worker fault does to a worker, for the refusals.
var workerVerb = map[FaultKind]string{FaultWorkerRestart: "restart", FaultWorkerStall: "freeze"}

// asksFor tells whether the run asks for faults of kind k: in --faults
// when given (a list that does not parse is refused by schedule), else by
// its count.
func (c Config) asksFor(k FaultKind) bool {
	if !c.explicitSchedule() {
		return c.counts()[k] > 0
	}
	plan, _ := parseSchedule(c.Faults, c.Duration)
	return slices.ContainsFunc(plan, func(f plannedFault) bool { return f.Kind == k })
}

// askedFor names where the run asked for faults of kind k, for refusals.
func (c Config) askedFor(k FaultKind) string {
	if c.explicitSchedule() {
		return fmt.Sprintf("--faults has %s", k)
	}
	return fmt.Sprintf("--%s %d", countFlags[k], c.counts()[k])
}

// leaveOut says how to ask for no fault of kind k.
func (c Config) leaveOut(k FaultKind) string {
	if c.explicitSchedule() {
		return "leave it out of --faults"
	}
	return fmt.Sprintf("set --%s 0", countFlags[k])
}

// citusFirst tells whether setting, when it is shared_preload_libraries,
// loads citus first, as Citus requires: the run's settings come after the
// Citus nodes' own and replace them.
func citusFirst(setting string) bool {
	name, value, _ := strings.Cut(setting, "=")
	if strings.TrimSpace(name) != "shared_preload_libraries" {
		return true
	}
	first, _, _ := strings.Cut(strings.Trim(strings.TrimSpace(value), `'"`), ",")
	return strings.TrimSpace(first) == "citus"
}

// settingName is the name of a "name=value" PostgreSQL setting; ok is
// false when s is not of that form.
func settingName(s string) (name string, ok bool) {
	name, _, ok = strings.Cut(s, "=")
	name = strings.TrimSpace(name)
	return name, ok && name != ""
}

// pgSettingNames are the names of PGSettings, in their order.
func (c Config) pgSettingNames() []string {
	names := make([]string, len(c.PGSettings))
	for i, s := range c.PGSettings {
		names[i], _ = settingName(s)
	}
	return names
}
