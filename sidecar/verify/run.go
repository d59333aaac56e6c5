package verify

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"os"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	queenside "github.com/queenside/queenside/clients/go"
)

// run is one verification: its settings, what it started, and its parts.
type run struct {
	cfg    Config
	runID  string
	seed   int64
	start  time.Time
	out    io.Writer
	cl     *cluster
	vl     *violationLog
	tl     *timeline
	lat    *latencies
	loader *loader
	groups []*group // stage 1 first, the checker last
	inj    *injector
}

// Run starts PostgreSQL and the sidecars, drives the loader, the stages,
// the checker and the faults, waits for the pipeline to drain, checks
// everything, prints the report and writes it as JSON. It returns an
// error, after printing everything, when any check failed.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.SidecarBinary == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("find the sidecar binary: %w", err)
		}
		cfg.SidecarBinary = exe
	}
	out := cfg.Output
	if out == nil {
		out = os.Stdout
	}
	out = &lockedWriter{w: out}
	log := cfg.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	plan, _ := cfg.schedule() // Validate checked it
	seed := cfg.Seed
	if seed == 0 {
		var b [8]byte
		rand.Read(b[:])
		seed = int64(binary.LittleEndian.Uint64(b[:]) >> 2)
	}
	rep := &Report{RunID: newRunID(), StartedAt: time.Now().UTC(), Config: cfg, Seed: seed}
	printHeader(out, rep, plan)

	cl, err := startCluster(ctx, cfg, log)
	if err != nil {
		return nil, err
	}
	defer func() {
		keep := cfg.KeepFiles || !rep.Passed
		if err := cl.close(keep); err != nil {
			fmt.Fprintf(out, "cleaning up: %v\n", err)
		}
		if keep {
			fmt.Fprintf(out, "kept %s (PostgreSQL's cluster and log, the sidecars' spools and logs)\n", cl.tmp)
		}
	}()
	if cl.netSkip != "" {
		fmt.Fprintf(out, "every partition fault will be skipped: %s\n\n", cl.netSkip)
	}
	rep.Conditions = conditions(ctx, cl, cfg.pgSettingNames())
	r := &run{cfg: cfg, runID: rep.RunID, seed: seed, out: out, cl: cl, vl: newViolationLog()}
	if err := r.configureQueues(ctx); err != nil {
		return rep, err
	}
	r.assemble(time.Now())

	state, drained, drainTook := r.execute(ctx, plan)
	rep.ElapsedSeconds = time.Since(r.start).Seconds()
	rep.Drained, rep.DrainSeconds = drained, drainTook.Seconds()
	stats := r.finalChecks(state, drained)
	r.fill(rep, stats, state)
	interrupted := ctx.Err() != nil
	rep.Passed = passed(rep, interrupted)
	printReport(out, rep)
	if cfg.Out != "" {
		if err := rep.write(cfg.Out); err != nil {
			return rep, fmt.Errorf("write %s: %w", cfg.Out, err)
		}
		fmt.Fprintf(out, "\nwrote %s\n", cfg.Out)
	}
	switch {
	case interrupted:
		return rep, fmt.Errorf("interrupted: %w", context.Cause(ctx))
	case !rep.Passed:
		return rep, errors.New(failureSummary(rep))
	}
	return rep, nil
}

// configureQueues gives every queue of the run the short lease and the
// 300-second deduplication window before anything is pushed.
func (r *run) configureQueues(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	c, err := queenside.Dial(ctx, r.cl.sidecars[0].socket)
	if err != nil {
		return err
	}
	defer c.Close()
	opts := queenside.DefaultQueueOptions()
	opts.LeaseSeconds = r.cfg.LeaseSeconds
	opts.DedupWindowSeconds = r.cfg.DedupWindowSeconds()
	for i := 1; i <= r.cfg.Stages+1; i++ {
		if _, err := c.Configure(ctx, queueName(r.runID, i), opts); err != nil {
			return fmt.Errorf("configure %s: %w", queueName(r.runID, i), err)
		}
	}
	return nil
}

// assemble builds the loader, the groups and the injector; start is the
// moment the loader's first event is due.
func (r *run) assemble(start time.Time) {
	r.start = start
	r.tl = newTimeline(start, r.cfg.Interval)
	r.lat = newLatencies(r.tl)
	r.loader = newLoader(queueName(r.runID, 1), r.cfg, r.cl.sidecars, start, r.tl)
	for i := 1; i <= r.cfg.Stages+1; i++ {
		g := &group{queue: i, label: "stage " + fmt.Sprint(i), queueName: queueName(r.runID, i),
			groupName: groupName(i, r.cfg.Stages), cfg: r.cfg, sidecars: r.cl.sidecars,
			tl: r.tl, stats: newCounters(), vl: r.vl, orders: make(chan *order, 1)}
		if i <= r.cfg.Stages {
			g.nextQueue = queueName(r.runID, i+1)
		} else {
			g.label, g.lat = "checker", r.lat
		}
		g.audit = newAuditor(i, g.label, r.cfg.Events(), r.cfg.Partitions, r.vl)
		g.audit.pushed = r.loader.events
		r.groups = append(r.groups, g)
	}
	r.inj = &injector{cfg: r.cfg, cl: r.cl, groups: r.groups, loader: r.loader,
		rng: mrand.New(mrand.NewPCG(uint64(r.seed), 0x5eed)), start: start, out: r.out, traffic: make(chan struct{})}
	r.loader.hold = r.inj.traffic
}

// execute runs the pipeline and the faults, then drains. It returns the
// pipeline's last state, whether it drained, and how long the drain took.
func (r *run) execute(ctx context.Context, plan []plannedFault) (pipelineState, bool, time.Duration) {
	monCtx, stopMonitors := context.WithCancel(ctx)
	var monitors sync.WaitGroup
	monitors.Go(func() { watchSidecars(monCtx, r.cl, r.vl, r.out, r.start) })
	monitors.Go(func() { progress(monCtx, r) })
	defer func() { stopMonitors(); monitors.Wait() }()

	consCtx, stopConsumers := context.WithCancel(ctx)
	var consumers sync.WaitGroup
	for i, g := range r.groups {
		consumers.Go(func() { g.run(consCtx, uint64(r.seed)+uint64(i)) })
	}
	defer func() { stopConsumers(); consumers.Wait() }()

	var faults sync.WaitGroup
	faults.Go(func() { r.inj.run(ctx, plan) })
	r.loader.run(ctx)
	ext := r.loader.extension(r.cfg.Duration)
	if ext != "" {
		ext = "; it " + ext
	}
	fmt.Fprintf(r.out, "%7.1fs  the loader has pushed all %d events%s\n", time.Since(r.start).Seconds(), r.loader.confirmed.Load(), ext)
	faults.Wait()

	began := time.Now()
	state, drained := r.drain(ctx)
	took := time.Since(began)
	if drained {
		fmt.Fprintf(r.out, "%7.1fs  drained in %.1f s: every event reached the checker, nothing is left in any queue or spool\n",
			time.Since(r.start).Seconds(), took.Seconds())
	} else {
		fmt.Fprintf(r.out, "%7.1fs  NOT drained after %.1f s: %s\n", time.Since(r.start).Seconds(), took.Seconds(), state)
	}
	return state, drained, took
}

// newRunID is sortable by time and unique among runs started the same
// second; it names the run's queues.
func newRunID() string {
	b := make([]byte, 2)
	rand.Read(b)
	return time.Now().UTC().Format("20060102T150405") + "-" + hex.EncodeToString(b)
}
