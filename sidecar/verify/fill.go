package verify

import (
	"fmt"
	"time"
)

// fill puts the run's figures into the report.
func (r *run) fill(rep *Report, stats []AuditStats, s pipelineState) {
	for _, f := range r.inj.snapshot() {
		rep.ReportedLost += int64(len(f.ReportedLost))
	}
	for i, g := range r.groups {
		counts, samples := g.stats.snapshot()
		rep.Queues = append(rep.Queues, QueueReport{Queue: g.queue, Name: g.queueName, Consumer: g.label,
			AuditStats: stats[i], ConsumersReplaced: g.replacements.Load(), Counts: counts})
		rep.Duplicates += stats[i].Duplicates
		rep.Gaps += stats[i].Gaps
		rep.OrderViolations += stats[i].OrderViolations
		rep.Redeliveries += stats[i].Redeliveries
		rep.Unexpected += counts["unexpected"]
		rep.UnexpectedErrors = append(rep.UnexpectedErrors, samples...)
	}
	counts, samples := r.loader.stats.snapshot()
	rep.Loader = LoaderReport{Events: r.loader.events(), Confirmed: r.loader.confirmed.Load(), Counts: counts,
		PushedSeconds: time.Duration(r.loader.endedAt.Load()).Seconds(), Extended: r.loader.extension(r.cfg.Duration)}
	rep.Unexpected += counts["unexpected"]
	rep.UnexpectedErrors = append(rep.UnexpectedErrors, samples...)

	rep.FaultCounts = map[FaultKind]int{}
	for _, f := range r.inj.snapshot() {
		rep.Faults = append(rep.Faults, *f)
		if f.Error == "" && f.Skipped == "" {
			rep.FaultCounts[f.Kind]++
		}
	}

	rep.Spool = SpoolReport{LoaderBuffered: counts["buffered"], RecordsLeft: s.spooled}
	for _, sc := range r.cl.sidecars {
		c := sc.spool()
		rep.Spool.Sidecars = append(rep.Spool.Sidecars, SidecarSpool{Sidecar: sc.index, Incarnations: sc.incarnationCount(), spoolCounters: c})
		rep.Spool.Buffered += c.Buffered
		rep.Spool.Replayed += c.Replayed
		rep.Spool.Rejected += c.Rejected
	}

	rep.Latency = r.lat.overall()
	rep.Throughput = r.throughput(rep.Faults)
	rep.Violations, rep.ViolationCounts = r.vl.snapshot()
}

// throughput turns the timeline into one row per interval.
func (r *run) throughput(faults []FaultRecord) []Interval {
	secs := r.cfg.Interval.Seconds()
	n := r.tl.buckets()
	out := make([]Interval, n)
	for b := range n {
		iv := Interval{StartSeconds: float64(b) * secs, LoaderPerSec: float64(r.tl.count("loader", b)) / secs,
			Buffered: r.tl.count("buffered", b), Latency: r.lat.inBucket(b)}
		for _, g := range r.groups {
			iv.PerSec = append(iv.PerSec, float64(r.tl.count(g.label, b))/secs)
		}
		for _, f := range faults {
			if f.Skipped != "" {
				continue
			}
			if r.tl.bucket(r.start.Add(time.Duration(f.StartedAt*float64(time.Second)))) == b {
				iv.Faults = append(iv.Faults, fmt.Sprintf("%s@%.0fs", f.Kind, f.StartedAt))
			}
		}
		out[b] = iv
	}
	return out
}
