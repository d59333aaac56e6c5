package bench

import (
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	queenside "github.com/queenside/queenside/clients/go"
)

// What the soak prints while it runs and at the end.

func (b *bench) printSoakHeader(opts queenside.QueueOptions) {
	c := b.cfg
	fmt.Fprintf(b.out, "  %s msg/s for %v over %d partitions, %d-byte payloads in pushes of %d, %d producer and %d consumer connections\n",
		thousands(float64(c.SoakRate)), c.SoakDuration, c.SoakPartitions, c.PayloadBytes, c.Batch, c.Connections, c.Connections)
	fmt.Fprintf(b.out, "  queue: completed retention %d s, retention %d s, dedup window %d s (hashes kept %v); janitor every %v; warm-up %v\n",
		opts.CompletedRetentionSeconds, opts.RetentionSeconds, opts.DedupWindowSeconds, hashesHorizon, c.RetentionInterval, c.SoakWarmup)
	fmt.Fprintf(b.out, "  every %v: PostgreSQL's CPU a message consumed and the delivery p99 since the last look; each table: MB (heap + indexes + TOAST), live/dead tuples (dead with its TOAST table's)\n", c.SoakSample)
}

func (b *bench) printSoakSample(s SoakSample) {
	var line strings.Builder
	fmt.Fprintf(&line, "  %5.0fs  pushed %s  consumed %s  retained %s  pg %.0f µs/msg  p99 %.0f ms", s.Seconds,
		thousands(float64(s.Pushed)), thousands(float64(s.Consumed)), thousands(float64(s.Retained)),
		s.PostgresMicros, s.DeliveryP99Ms)
	for _, name := range soakTables {
		t := s.Tables[name]
		fmt.Fprintf(&line, " | %s %s %s/%s", name, mb(t.TotalBytes), thousands(float64(t.LiveTuples)),
			thousands(float64(t.DeadTuples+t.ToastDeadTuples)))
	}
	fmt.Fprintln(b.out, line.String())
}

func (b *bench) printSoakSummary(rep SoakReport) {
	if len(rep.Samples) == 0 {
		return
	}
	last := rep.Samples[len(rep.Samples)-1]
	fmt.Fprintf(b.out, "\n  soak, at the end (%.0f s):\n", last.Seconds)
	tw := tabwriter.NewWriter(b.out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "  table\ttotal MB\theap MB\tindexes MB\tTOAST MB\tlive\tdead\tTOAST dead\tautovacuums\t")
	for _, name := range soakTables {
		t := last.Tables[name]
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t\n", name, mb(t.TotalBytes), mb(t.HeapBytes), mb(t.IndexBytes),
			mb(t.ToastBytes), thousands(float64(t.LiveTuples)), thousands(float64(t.DeadTuples)),
			thousands(float64(t.ToastDeadTuples)), t.Autovacuums)
	}
	tw.Flush()
	warmup := time.Duration(rep.WarmupSeconds * float64(time.Second))
	fmt.Fprintf(b.out, "\n  after the warm-up (%v), each measure against its bound (%dx its largest in the warm-up's last two thirds, plus %s MB or %s tuples):\n",
		warmup, soakGrowth, mb(soakBytesFloor), thousands(soakTuplesFloor))
	tw = tabwriter.NewWriter(b.out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "  table\tmeasure\twarm-up\tpeak after\tbound\t\t")
	for _, c := range rep.Checked {
		verdict := "ok"
		if c.Peak > c.Bound {
			verdict = "GREW"
		}
		format := func(v int64) string { return thousands(float64(v)) }
		if c.Measure == "bytes" {
			format = mb
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t\n", c.Table, c.Measure, format(c.Reference), format(c.Peak), format(c.Bound), verdict)
	}
	tw.Flush()
	if f, l := rep.FirstMinute, rep.LastMinute; f != nil && l != nil {
		fmt.Fprintf(b.out, "\n  costs over time: PostgreSQL CPU a message consumed, delivery p99\n")
		fmt.Fprintf(b.out, "    first minute (%3.0f-%3.0f s): %6.1f µs, %7.1f ms\n", f.From, f.To, f.PostgresMicros, f.DeliveryP99Ms)
		fmt.Fprintf(b.out, "    last minute  (%3.0f-%3.0f s): %6.1f µs, %7.1f ms\n", l.From, l.To, l.PostgresMicros, l.DeliveryP99Ms)
		if f.PostgresMicros > 0 && f.DeliveryP99Ms > 0 {
			fmt.Fprintf(b.out, "    last / first: %.2f, %.2f\n", l.PostgresMicros/f.PostgresMicros, l.DeliveryP99Ms/f.DeliveryP99Ms)
		}
	}
	if len(rep.Unchecked) > 0 {
		fmt.Fprintf(b.out, "  not checked: %s; the hashes are kept %v whatever the window, and these tables grow until then by design\n",
			strings.Join(rep.Unchecked, ", "), hashesHorizon)
	}
	fmt.Fprintln(b.out)
}

// mb formats bytes as megabytes with two decimals.
func mb(bytes int64) string { return fmt.Sprintf("%.2f", float64(bytes)/(1<<20)) }
