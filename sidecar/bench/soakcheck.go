package bench

import (
	"fmt"
	"time"
)

// What the soak asserts: once the tables had time to reach their steady
// state, they stay flat. A janitor that stopped would let segments and the
// retained messages grow with every push; autovacuum falling behind would
// let the dead tuples and the bytes grow.
//
// Flat is measured against the table itself: every sample after its
// warm-up must be within soakGrowth times the largest value seen in the
// last two thirds of the warm-up (a reference that spans vacuum cycles, so
// that samples taken just after vacuums do not make it near zero), plus a
// floor under which growth is noise (a table of a few pages, or the dead
// tuples one vacuum cycle leaves).
const (
	soakGrowth      = 3
	soakBytesFloor  = 1 << 20
	soakTuplesFloor = 1000
)

// hashesHorizon is how long the soak queue keeps its hashes: never less
// than 900 s (see 0003_retention.sql). The hashes' tables grow until then
// by design, so they are checked only in a run that long.
const hashesHorizon = 900 * time.Second

// hashTables hold transaction id hashes.
var hashTables = map[string]bool{"dedup": true, "orphan_hashes": true}

// SoakSample is the state of the soak queue and of the tables at one moment.
type SoakSample struct {
	Seconds  float64                `json:"seconds"`  // since the soak started
	Pushed   int64                  `json:"pushed"`   // the partitions' head offsets, summed
	Consumed int64                  `json:"consumed"` // the group's cursors, summed
	Retained int64                  `json:"retained"` // messages stats reports retained
	Tables   map[string]TableSample `json:"tables"`
	// PostgresCPUSeconds is PostgreSQL's CPU since it started; nil when it
	// could not be read.
	PostgresCPUSeconds *float64 `json:"postgresCpuSeconds,omitempty"`
	// Since the sample before: PostgreSQL's CPU a message consumed (0 when
	// unknown) and the delivery p99 (0 when nothing was delivered).
	PostgresMicros float64 `json:"postgresMicrosPerMessage,omitempty"`
	DeliveryP99Ms  float64 `json:"deliveryP99Ms,omitempty"`
}

// SoakWindow is what a stretch of the soak cost: PostgreSQL's CPU a
// message consumed (0 when it could not be read) and the delivery p99.
type SoakWindow struct {
	From           float64 `json:"from"` // seconds since the soak started
	To             float64 `json:"to"`
	Consumed       int64   `json:"consumed"`
	PostgresMicros float64 `json:"postgresMicrosPerMessage"`
	DeliveryP99Ms  float64 `json:"deliveryP99Ms"`
}

// SoakReport is what the soak saw, and its verdict on it.
type SoakReport struct {
	Samples       []SoakSample `json:"samples"`
	WarmupSeconds float64      `json:"warmupSeconds"`
	// Checked lists, per table, the value each measure was held to and
	// the largest seen after the warm-up; Unchecked the tables the run
	// was too short for.
	Checked    []SoakCheck `json:"checked"`
	Unchecked  []string    `json:"unchecked,omitempty"`
	Violations []string    `json:"violations,omitempty"`
	// FirstMinute and LastMinute say whether the costs held over the run;
	// nil when the run was too short to tell.
	FirstMinute *SoakWindow `json:"firstMinute,omitempty"`
	LastMinute  *SoakWindow `json:"lastMinute,omitempty"`
}

// SoakCheck is one measure of one table (or "retained" messages) held to
// its bound.
type SoakCheck struct {
	Table     string `json:"table"`
	Measure   string `json:"measure"`
	Reference int64  `json:"reference"` // largest in the last two thirds of the warm-up
	Bound     int64  `json:"bound"`
	Peak      int64  `json:"peak"` // largest after the warm-up
}

// measures are what is held flat, and the floor of each.
var measures = []struct {
	name  string
	floor int64
	of    func(TableSample) int64
}{
	{"bytes", soakBytesFloor, func(t TableSample) int64 { return t.TotalBytes }},
	{"live tuples", soakTuplesFloor, func(t TableSample) int64 { return t.LiveTuples }},
	{"dead tuples", soakTuplesFloor, func(t TableSample) int64 { return t.DeadTuples + t.ToastDeadTuples }},
}

// checkSoak judges samples: each table settles warmup after the start, the
// hashes' tables warmup after their horizon.
func checkSoak(samples []SoakSample, warmup time.Duration) SoakReport {
	rep := SoakReport{Samples: samples, WarmupSeconds: warmup.Seconds()}
	hold := func(table, measure string, floor int64, settle time.Duration, of func(SoakSample) int64) {
		var ref, peak int64
		var after int
		for _, s := range samples {
			at := time.Duration(s.Seconds * float64(time.Second))
			switch {
			case at > settle-warmup+warmup/3 && at <= settle:
				ref = max(ref, of(s))
			case at > settle:
				peak = max(peak, of(s))
				after++
			}
		}
		if after == 0 {
			return
		}
		c := SoakCheck{Table: table, Measure: measure, Reference: ref, Bound: soakGrowth*ref + floor, Peak: peak}
		rep.Checked = append(rep.Checked, c)
		if c.Peak > c.Bound {
			rep.Violations = append(rep.Violations, fmt.Sprintf("%s %s grew to %d after the warm-up, past %d (%dx %d, plus %d)",
				table, measure, c.Peak, c.Bound, soakGrowth, ref, floor))
		}
	}
	hold("queue", "retained messages", soakTuplesFloor, warmup, func(s SoakSample) int64 { return s.Retained })
	for _, table := range soakTables {
		settle := warmup
		if hashTables[table] {
			settle = hashesHorizon + warmup
		}
		if len(samples) == 0 || time.Duration(samples[len(samples)-1].Seconds*float64(time.Second)) <= settle {
			rep.Unchecked = append(rep.Unchecked, table)
			continue
		}
		for _, m := range measures {
			hold(table, m.name, m.floor, settle, func(s SoakSample) int64 { return m.of(s.Tables[table]) })
		}
	}
	return rep
}
