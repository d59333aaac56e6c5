package verify

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"
)

// sampleEvery is how often the sidecars' spool counters are read and their
// processes checked.
const sampleEvery = time.Second

// watchSidecars samples every sidecar's spool counters, so that the
// counters of an incarnation that is killed are known up to its last
// second, and restarts a sidecar that exited without being told to,
// reporting it as a violation with the end of its log.
func watchSidecars(ctx context.Context, cl *cluster, vl *violationLog, out io.Writer, start time.Time) {
	t := time.NewTicker(sampleEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, s := range cl.sidecars {
			if status, crashed := s.crashed(); crashed {
				vl.add(Violation{Kind: ViolationSidecarCrash, Detail: fmt.Sprintf("%s exited on its own (%s); its log ends:\n%s", s, status, s.logTail())})
				fmt.Fprintf(out, "%7.1fs  %s exited on its own (%s); starting it again\n", time.Since(start).Seconds(), s, status)
				if _, err := s.start(ctx, cl.pgDown.Load()); err != nil && ctx.Err() == nil {
					fmt.Fprintf(out, "%7.1fs  %s does not start again: %v\n", time.Since(start).Seconds(), s, err)
				}
				continue
			}
			s.sample(ctx) //nolint:errcheck // a sidecar restarting keeps its last sample
		}
	}
}

// progress prints one line per interval: what each part of the pipeline
// moved in it, and the records waiting in the spools.
func progress(ctx context.Context, r *run) {
	t := time.NewTicker(r.cfg.Interval)
	defer t.Stop()
	for b := 0; ; b++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		secs := r.cfg.Interval.Seconds()
		var line strings.Builder
		fmt.Fprintf(&line, "%7.1fs  loader %6.0f/s", time.Since(r.start).Seconds(), float64(r.tl.count("loader", b))/secs)
		for _, g := range r.groups {
			fmt.Fprintf(&line, "  %s %6.0f/s", shortLabel(g.label), float64(r.tl.count(g.label, b))/secs)
		}
		var spooled int64
		for _, s := range r.cl.sidecars {
			spooled += s.spool().Records
		}
		fmt.Fprintf(&line, "  buffered %d  spooled now %d", r.tl.count("buffered", b), spooled)
		if l := r.lat.inBucket(b); l != nil {
			fmt.Fprintf(&line, "  latency p50 %.0f ms p99 %.0f ms", l.P50Ms, l.P99Ms)
		}
		fmt.Fprintln(r.out, line.String())
	}
}

// shortLabel abbreviates "stage 2" to "s2" for the progress lines.
func shortLabel(label string) string {
	if n, ok := strings.CutPrefix(label, "stage "); ok {
		return "s" + n
	}
	return label
}
