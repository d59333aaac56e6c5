package verify

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/queenside/queenside/schema"
)

// maxPrintedViolations bounds the violations printed; the JSON report keeps
// more, and counts them all.
const maxPrintedViolations = 50

func printHeader(out io.Writer, rep *Report, plan []plannedFault) {
	c := rep.Config
	fmt.Fprintf(out, "queenside verify: run %s, seed %d\n", rep.RunID, rep.Seed)
	fmt.Fprintf(out, "  %d sidecars, %d stages, %d partitions, %d events/s for %v (%d events), %d consumers per stage and for the checker\n",
		c.Sidecars, c.Stages, c.Partitions, c.Rate, c.Duration, c.Events(), c.Consumers)
	fmt.Fprintf(out, "  lease %d s, dedup window %d s, pop batch %d over up to %d partitions, long-poll %d ms\n",
		c.LeaseSeconds, c.DedupWindowSeconds(), c.PopBatch, c.PopPartitions, c.WaitMs)
	if c.Citus {
		fmt.Fprintf(out, "  on Citus: the sidecars on the coordinator, the schema over %d shards on %d workers\n", schema.DefaultShardCount, c.CitusWorkers)
	}
	var faults []string
	for _, f := range plan {
		faults = append(faults, fmt.Sprintf("%s@%v", f.Kind, f.At))
	}
	if len(faults) == 0 {
		faults = []string{"none"}
	}
	fmt.Fprintf(out, "  faults: %s (%s)\n", strings.Join(faults, ", "), downTimes(c))
	if fewer := c.scaledCounts(plan); len(fewer) > 0 {
		fmt.Fprintf(out, "  fewer than the counts, so that they fit in %gs of traffic one after another: %s\n", c.Duration.Seconds(), strings.Join(fewer, ", "))
	}
	fmt.Fprintln(out)
}

// downTimes says how long each fault keeps its target down.
func downTimes(c Config) string {
	if c.Citus {
		return fmt.Sprintf("the coordinator and a Citus worker down or frozen, and a sidecar cut off, %v each, the coordinator's restarts with %d more sidecar kills inside; sidecars down %v each; the sidecars' database timeout %v",
			c.PGDown, c.OutageKills, c.SidecarDown, c.DatabaseTimeout)
	}
	return fmt.Sprintf("PostgreSQL down or frozen, and a sidecar cut off it, %v each, the restarts with %d more sidecar kills inside; sidecars down %v each; the sidecars' database timeout %v",
		c.PGDown, c.OutageKills, c.SidecarDown, c.DatabaseTimeout)
}

func printReport(out io.Writer, rep *Report) {
	cond := rep.Conditions
	fmt.Fprintf(out, "\nconditions: %d × %s, %.1f GiB, %s; %s %s; PostgreSQL %s (fsync %s, synchronous_commit %s, full_page_writes %s); sidecar %s\n",
		cond.Cores, cond.CPUModel, float64(cond.MemoryBytes)/(1<<30), cond.OS, cond.GoVersion, cond.OSArch,
		cond.Postgres["server_version"], cond.Postgres["fsync"], cond.Postgres["synchronous_commit"], cond.Postgres["full_page_writes"], cond.SidecarVersion)
	if given := rep.Config.pgSettingNames(); len(given) > 0 {
		read := make([]string, len(given))
		for i, name := range given {
			read[i] = name + " " + cond.Postgres[name]
		}
		fmt.Fprintf(out, "PostgreSQL settings given: %s\n", strings.Join(read, ", "))
	}
	if ct := cond.Citus; ct != nil {
		fmt.Fprintf(out, "on Citus %s: that PostgreSQL the coordinator, %d workers, %d shards\n", ct.Version, ct.Workers, ct.Shards)
	}

	fmt.Fprintln(out, "\nper queue (each audited by the group consuming it):")
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "QUEUE\tCONSUMER\tEVENTS\tVERIFIED\tDELIVERIES\tREDELIVERIES\tFLAGGED\tFLAGGED NEW\tDUPLICATES\tGAPS\tORDER\tCOMMITTED\tREFUSED\tGAVE UP\tREPLACED")
	for _, q := range rep.Queues {
		fmt.Fprintf(tw, "%d\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\n", q.Queue, q.Consumer, q.Events, q.Verified,
			q.Deliveries, q.Redeliveries, q.FlaggedRedelivered, q.FirstSeenFlagged, q.Duplicates, q.Gaps, q.OrderViolations,
			q.Counts["batches:committed"], q.Counts["batches:refused"], q.Counts["batches:gave up"], q.ConsumersReplaced)
	}
	tw.Flush()

	lc := rep.Loader.Counts
	fmt.Fprintf(out, "\nloader: %d of %d events pushed in %d requests over %.1f s: %d queued, %d buffered, %d duplicate (retries%s)\n",
		rep.Loader.Confirmed, rep.Loader.Events, lc["requests"], rep.Loader.PushedSeconds, lc["queued"], lc["buffered"], lc["duplicate"], retryText(lc, "retry:"))
	if rep.Loader.Extended != "" {
		fmt.Fprintf(out, "  the loader %s\n", rep.Loader.Extended)
	}
	for _, q := range rep.Queues {
		if t := retryText(q.Counts, "retry:"); t != ": none" {
			fmt.Fprintf(out, "%s retries%s\n", q.Consumer, t)
		}
	}

	printFaults(out, rep)

	s := rep.Spool
	fmt.Fprintf(out, "\nspool: %d records written (the loader's buffered answers); the sidecars counted %d buffered, %d replayed, %d rejected; %d left at the end\n",
		s.LoaderBuffered, s.Buffered, s.Replayed, s.Rejected, s.RecordsLeft)
	for _, sc := range s.Sidecars {
		fmt.Fprintf(out, "  sidecar %d: %d incarnations, %d buffered, %d replayed\n", sc.Sidecar, sc.Incarnations, sc.Buffered, sc.Replayed)
	}

	if l := rep.Latency; l != nil {
		fmt.Fprintf(out, "\nend-to-end latency (loader push to checker receipt, %d events): p50 %.1f ms, p99 %.1f ms, max %.1f ms\n",
			l.Count, l.P50Ms, l.P99Ms, l.MaxMs)
	}

	printThroughput(out, rep)
	printViolations(out, rep)

	verdict := "PASS"
	if !rep.Passed {
		verdict = "FAIL"
	}
	var checker AuditStats
	if n := len(rep.Queues); n > 0 {
		checker = rep.Queues[n-1].AuditStats
	}
	lost := ""
	if rep.ReportedLost > 0 {
		lost = fmt.Sprintf(" (%d lost to damaged spool records, each reported by its sidecar by name)", rep.ReportedLost)
	}
	fmt.Fprintf(out, "\n%s: %d duplicates, %d gaps, %d order violations over all queues; %d of %d events through all %d stages to the checker%s; %d redeliveries; %d faults injected; drained %v in %.1f s\n",
		verdict, rep.Duplicates, rep.Gaps, rep.OrderViolations, checker.Verified, checker.Events, rep.Config.Stages, lost,
		rep.Redeliveries, faultsInjected(rep), rep.Drained, rep.DrainSeconds)
	fmt.Fprintln(out, verdictRule)
}

// retryText lists the counters under prefix: ": unavailable 12, connection 3".
func retryText(counts map[string]int64, prefix string) string {
	var parts []string
	for _, k := range sortedKeys(counts) {
		if rest, ok := strings.CutPrefix(k, prefix); ok {
			parts = append(parts, fmt.Sprintf("%s %d", rest, counts[k]))
		}
	}
	if len(parts) == 0 {
		return ": none"
	}
	return ": " + strings.Join(parts, ", ")
}

func printFaults(out io.Writer, rep *Report) {
	var byKind []string
	for _, k := range FaultKinds() {
		if n := rep.FaultCounts[k]; n > 0 {
			byKind = append(byKind, fmt.Sprintf("%d %s", n, k))
		}
	}
	skipped := ""
	if n := len(rep.Faults) - faultsInjected(rep) - faultErrors(rep); n > 0 {
		skipped = fmt.Sprintf("; %d skipped", n)
	}
	fmt.Fprintf(out, "\nfaults injected: %d (%s)%s\n", faultsInjected(rep), strings.Join(byKind, ", "), skipped)
	for _, f := range rep.Faults {
		if f.Skipped != "" {
			fmt.Fprintf(out, "  %7.1fs  %-14s skipped: %s\n", f.StartedAt, f.Kind, f.Skipped)
			continue
		}
		fmt.Fprintf(out, "  %7.1fs  %-14s %s: %s\n", f.StartedAt, f.Kind, f.Target, f.Detail)
		if t := figuresText(&f); t != "" {
			fmt.Fprintf(out, "            %s\n", t)
		}
		if f.Outcome != "" {
			fmt.Fprintf(out, "            outcome: %s\n", f.Outcome)
		}
		if f.Error != "" {
			fmt.Fprintf(out, "            ERROR: %s\n", f.Error)
		}
	}
}

func printThroughput(out io.Writer, rep *Report) {
	if len(rep.Throughput) == 0 {
		return
	}
	fmt.Fprintln(out, "\nthroughput over time (events per second: pushed by the loader, first delivered to each stage and to the checker):")
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	head := "FROM S\tLOADER\t"
	for _, q := range rep.Queues {
		head += strings.ToUpper(shortLabel(q.Consumer)) + "\t"
	}
	fmt.Fprintln(tw, head+"BUFFERED\tP50 MS\tP99 MS\tFAULTS\t")
	for _, iv := range rep.Throughput {
		row := fmt.Sprintf("%.0f\t%.0f\t", iv.StartSeconds, iv.LoaderPerSec)
		for _, v := range iv.PerSec {
			row += fmt.Sprintf("%.0f\t", v)
		}
		p50, p99 := "-", "-"
		if iv.Latency != nil {
			p50, p99 = fmt.Sprintf("%.0f", iv.Latency.P50Ms), fmt.Sprintf("%.0f", iv.Latency.P99Ms)
		}
		fmt.Fprintf(tw, "%s%d\t%s\t%s\t%s\t\n", row, iv.Buffered, p50, p99, strings.Join(iv.Faults, " "))
	}
	tw.Flush()
}

func printViolations(out io.Writer, rep *Report) {
	if len(rep.UnexpectedErrors) > 0 {
		fmt.Fprintf(out, "\nunexpected errors (%d; first ones):\n", rep.Unexpected)
		for _, e := range rep.UnexpectedErrors {
			fmt.Fprintf(out, "  %s\n", e)
		}
	}
	if len(rep.Violations) == 0 {
		return
	}
	var kinds []string
	for _, k := range sortedKeys(rep.ViolationCounts) {
		kinds = append(kinds, fmt.Sprintf("%d %s", rep.ViolationCounts[k], k))
	}
	fmt.Fprintf(out, "\nVIOLATIONS: %s\n", strings.Join(kinds, ", "))
	for i, v := range rep.Violations {
		if i == maxPrintedViolations {
			fmt.Fprintf(out, "  ... %d more in the JSON report\n", len(rep.Violations)-i)
			break
		}
		fmt.Fprintf(out, "  %s\n", v)
	}
}
