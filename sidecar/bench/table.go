package bench

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
)

// What is printed for people. "?" is a figure that could not be observed,
// "-" one that does not apply to the scenario.

func printHeader(w io.Writer, rep *Report) {
	c := rep.Conditions
	fmt.Fprintf(w, "queenside bench, run %s\n", rep.RunID)
	fmt.Fprintf(w, "machine:  %d cores (%s), %.1f GiB, %s, %s\n",
		c.Cores, c.CPUModel, float64(c.MemoryBytes)/(1<<30), c.OSArch, c.GoVersion)
	if p := c.Postgres; p != nil {
		fmt.Fprintf(w, "postgres: %s, fsync %s, synchronous_commit %s, shared_buffers %s (%s)\n",
			p.Version, p.Fsync, p.SynchronousCommit, p.Settings["shared_buffers"], started(c.PostgresStarted))
	} else {
		fmt.Fprintln(w, "postgres: unknown (no --database-url)")
	}
	fmt.Fprintf(w, "sidecar:  version %s (%s)\n", c.SidecarVersion, started(c.SidecarStarted))
	if t := rep.Tracing; t != nil {
		fmt.Fprintf(w, "tracing:  on, OTLP/HTTP to %s (read and discarded), sampler %s, a trace context on every push\n", t.Endpoint, t.Sampler)
	}
	if c.Encrypt {
		fmt.Fprintln(w, "payloads: encrypted (encryptPayloads on every queue, AES-256-GCM; sealed on push, opened on pop)")
	}
	fmt.Fprintln(w)
}

func started(byBench bool) string {
	if byBench {
		return "started by bench"
	}
	return "given"
}

// printLine reports a scenario as soon as it ends, so a long run shows
// progress.
func printLine(w io.Writer, r Result) {
	fmt.Fprintf(w, "%s: %s messages in %.2f s, %s msg/s, %s",
		r.Name, thousands(float64(r.Messages)), r.Seconds, thousands(r.MsgsPerSec), verdict(r))
	if r.Errors > 0 {
		fmt.Fprintf(w, " (%s)", plural(int(r.Errors), "error"))
	}
	if r.Pushed > 0 { // mixed: whether the consumers kept up
		fmt.Fprintf(w, "; producers pushed %s (%s msg/s)", thousands(float64(r.Pushed)), thousands(r.PushedPerSec))
	}
	fmt.Fprintln(w)
	if r.Writes != nil {
		fmt.Fprintf(w, "  %s\n", writesLine(r.Writes))
	}
	for _, s := range r.ErrorSamples {
		fmt.Fprintf(w, "  error: %s\n", s)
	}
}

func verdict(r Result) string {
	switch {
	case r.Interrupted:
		return "INTERRUPTED"
	case r.Failed:
		return "FAILED"
	}
	return "ok"
}

func printTable(w io.Writer, rep *Report) {
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\tstatus\tmessages\tseconds\tmsg/s\treq p50 ms\treq p99 ms\treq max ms\t"+
		"deliv p50 ms\tdeliv p99 ms\tsidecar cpu s\tpg cpu s\tbench cpu s\tmsg/cpu-s\tsidecar rss MB\terrors\t")
	for _, r := range rep.Scenarios {
		cols := []string{
			r.Name, verdict(r), thousands(float64(r.Messages)), fmt.Sprintf("%.2f", r.Seconds), thousands(r.MsgsPerSec),
		}
		p50, p99, maxMs := latencyCols(r.Latency)
		d50, d99, _ := latencyCols(r.Delivery)
		cols = append(cols, p50, p99, maxMs, d50, d99,
			opt(r.SidecarCPUSeconds, "%.2f"), opt(r.PostgresCPUSeconds, "%.2f"), opt(r.BenchCPUSeconds, "%.2f"),
			optRate(r.MsgsPerCPUSecond), rss(r.SidecarPeakRSSBytes), strconv.FormatInt(r.Errors, 10))
		fmt.Fprintln(tw, strings.Join(cols, "\t")+"\t")
	}
	tw.Flush()
	for _, r := range rep.Scenarios {
		if len(r.Curve) > 0 {
			printCurve(w, r.Name, r.Curve)
		}
		if r.Idle != nil {
			fmt.Fprintf(w, "\nidle: %s\n", idleLine(r.Idle))
		}
	}
	if t := rep.Tracing; t != nil {
		fmt.Fprintf(w, "\ntracing: the sidecar sent %d OTLP exports, %.1f MB\n", t.Exports, float64(t.Bytes)/1e6)
	}
	fmt.Fprint(w, `
req:       latency of the requests that make the scenario: push for push, mixed (producers), latency and
           partitions; pop and ack for popack and fanout; pop for autoack (per operation in the JSON)
deliv:     push time written in the payload to the end of the pop that returned the message; over a
           backlog (popack, autoack, fanout) this includes how long the message waited in it
cpu:       utime+stime from /proc during the measured part; pg is the postmaster and all its processes
msg/cpu-s: messages per CPU second of sidecar and PostgreSQL together
rss:       the sidecar's VmHWM: its peak since it started, not only in that scenario
?          unknown: the process could not be observed; -  does not apply
`)
}

func latencyCols(s *LatencySummary) (p50, p99, maxMs string) {
	if s == nil {
		return "-", "-", "-"
	}
	return fmt.Sprintf("%.2f", s.P50Ms), fmt.Sprintf("%.2f", s.P99Ms), fmt.Sprintf("%.2f", s.MaxMs)
}

func opt(v *float64, format string) string {
	if v == nil {
		return "?"
	}
	return fmt.Sprintf(format, *v)
}

func optRate(v *float64) string {
	if v == nil {
		return "?"
	}
	return thousands(*v)
}

func rss(v *int64) string {
	if v == nil {
		return "?"
	}
	return fmt.Sprintf("%.1f", float64(*v)/(1<<20))
}

// thousands rounds v and groups its digits: 123456.7 is "123,457".
func thousands(v float64) string {
	s := strconv.FormatInt(int64(v+0.5), 10)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// printCurve is the table of curve, or of pgmq, which runs the curve's
// traffic through pgmq: per offered rate, what was delivered, how fast, at
// what cost a message, and to how many partitions (pgmq's groups).
func printCurve(w io.Writer, name string, points []CurvePoint) {
	heading := "curve (mixed's producers and consumers at each offered rate)"
	if name == ScenarioPgmq {
		heading = "pgmq (curve's producers and consumers through pgmq's FIFO-grouped reads, at each offered rate)"
	}
	fmt.Fprintf(w, "\n%s:\n", heading)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "offered/s\tdelivered/s\tleft\tdrain s\tdeliv p50 ms\tdeliv p99 ms\tdeliv max ms\t"+
		"push p50 ms\tpg µs/msg\tsidecar µs/msg\tpartitions served/pushed\terrors\t")
	for _, p := range points {
		d50, d99, dmax := latencyCols(p.Delivery)
		push50, _, _ := latencyCols(p.Push)
		drain := fmt.Sprintf("%.2f", p.DrainSeconds)
		if !p.Drained {
			drain = ">" + drain
		}
		fmt.Fprintln(tw, strings.Join([]string{
			thousands(float64(p.OfferedPerSec)), thousands(p.DeliveredPerSec), thousands(float64(p.Left)), drain,
			d50, d99, dmax, push50, opt(p.PostgresMicrosPer, "%.1f"), opt(p.SidecarMicrosPer, "%.1f"),
			fmt.Sprintf("%s/%s", thousands(float64(p.PartitionsServed)), thousands(float64(p.PartitionsPushed))),
			strconv.FormatInt(p.Errors, 10),
		}, "\t")+"\t")
	}
	tw.Flush()
}

// curveLine reports one point of the curve as soon as it is measured.
func curveLine(p CurvePoint) string {
	d50, d99, _ := latencyCols(p.Delivery)
	return fmt.Sprintf("%s msg/s offered: %s delivered/s, %s left, delivery p50 %s ms p99 %s ms, PostgreSQL %s µs and sidecar %s µs a message, %d of %d partitions served",
		thousands(float64(p.OfferedPerSec)), thousands(p.DeliveredPerSec), thousands(float64(p.Left)), d50, d99,
		opt(p.PostgresMicrosPer, "%.1f"), opt(p.SidecarMicrosPer, "%.1f"), p.PartitionsServed, p.PartitionsPushed) +
		"\n    " + writesLine(p.Writes)
}
