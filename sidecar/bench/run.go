package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/queenside/queenside/sidecar/pgserver"
)

// bench is one run: its settings, the sidecar it drives, and what earlier
// scenarios left for later ones.
type bench struct {
	cfg     Config
	runID   string
	out     io.Writer
	socket  string
	probe   *probe
	pay     payloads
	dbURL   string           // the database, when the run knows it (soak reads its tables)
	writes  *writeProbe      // PostgreSQL's write counters; nil without dbURL
	backlog *backlog         // push's queue, consumed by popack and autoack
	pg      *pgserver.Server // the PostgreSQL the bench started; nil when given one
	spooled *backlog         // what spool left in the sidecar's spool, for replay
}

// queue names a scenario's queue; the run id makes it unique, so a run
// against a shared database never meets an earlier run's messages.
func (b *bench) queue(scenario string) string { return "bench-" + b.runID + "-" + scenario }

// scenarioFuncs maps names to scenarios; Scenarios() gives the order.
var scenarioFuncs = map[string]func(*bench, context.Context) Result{
	ScenarioPush:       (*bench).scenarioPush,
	ScenarioInsert:     (*bench).scenarioInsert,
	ScenarioSQLSend:    (*bench).scenarioSQLSend,
	ScenarioPopAck:     (*bench).scenarioPopAck,
	ScenarioAutoAck:    (*bench).scenarioAutoAck,
	ScenarioMixed:      (*bench).scenarioMixed,
	ScenarioCurve:      (*bench).scenarioCurve,
	ScenarioPgmq:       (*bench).scenarioPgmq,
	ScenarioIdle:       (*bench).scenarioIdle,
	ScenarioLatency:    (*bench).scenarioLatency,
	ScenarioPartitions: (*bench).scenarioPartitions,
	ScenarioFanout:     (*bench).scenarioFanout,
	ScenarioHeld:       (*bench).scenarioHeld,
	ScenarioFloor:      (*bench).scenarioFloor,
	ScenarioSoak:       (*bench).scenarioSoak,
	ScenarioSpool:      (*bench).scenarioSpool,
	ScenarioReplay:     (*bench).scenarioReplay,
	ScenarioConsume:    (*bench).scenarioConsume,
	ScenarioAckAsync:   (*bench).scenarioAckAsync,
}

// Run sets up what cfg asks for, runs the selected scenarios, prints a line
// for each as it ends and a table at the end, writes the JSON report, and
// stops what it started. It returns an error, after printing everything,
// when a scenario failed or the run was interrupted.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	sealPayloads.Store(cfg.Encrypt)
	if cfg.SidecarBinary == "" && cfg.Socket == "" {
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
	log := cfg.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	pay, err := newPayloads(cfg.PayloadBytes)
	if err != nil {
		return nil, err
	}
	rep := &Report{RunID: newRunID(), StartedAt: time.Now().UTC(), Config: cfg}

	env, err := setup(ctx, cfg, log)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err := env.close(); err != nil {
			log.Error("cleaning up", "error", err)
			fmt.Fprintf(out, "cleaning up: %v\n", err)
		}
	}()
	rep.Conditions = conditions(env, cfg)
	b := &bench{cfg: cfg, runID: rep.RunID, out: out, socket: env.socket, probe: env.probe, pay: pay, pg: env.pg, dbURL: env.dbURL}
	if b.writes, err = openWriteProbe(ctx, env.dbURL, cfg.WritesQuiet); err != nil {
		return nil, err
	}
	defer b.writes.close()

	if env.sink != nil {
		ctx = withProducerSpans(ctx)
		rep.Tracing = env.sink.info()
	}
	printHeader(out, rep)
	var gone error
	for _, name := range allScenarios() {
		if !cfg.selected(name) || ctx.Err() != nil {
			continue
		}
		if gone = env.sidecarGone(); gone != nil {
			break
		}
		if stopsPostgres(name) && env.pg == nil {
			fmt.Fprintf(out, "%s: skipped; it stops PostgreSQL, so it needs the one the bench starts (no --database-url)\n", name)
			continue
		}
		fmt.Fprintf(out, "%s ...\n", name)
		r := scenarioFuncs[name](b, ctx)
		r.Interrupted = ctx.Err() != nil
		r.finish()
		rep.Scenarios = append(rep.Scenarios, r)
		printLine(out, r)
	}
	failed := 0
	for _, r := range rep.Scenarios {
		if r.Failed {
			failed++
		}
	}
	rep.Failed = failed > 0 || gone != nil || ctx.Err() != nil
	if env.sink != nil {
		rep.Tracing = env.sink.info()
	}
	printTable(out, rep)
	if failed > 0 {
		if tail := env.sidecarLog(); tail != "" {
			fmt.Fprintf(out, "\nthe sidecar logged:\n%s\n", tail)
		}
	}
	if cfg.Out != "" {
		if err := rep.write(cfg.Out); err != nil {
			return rep, fmt.Errorf("write %s: %w", cfg.Out, err)
		}
		fmt.Fprintf(out, "\nwrote %s\n", cfg.Out)
	}
	switch {
	case gone != nil:
		return rep, gone
	case ctx.Err() != nil:
		return rep, fmt.Errorf("interrupted: %w", context.Cause(ctx))
	case failed > 0:
		return rep, errors.New(plural(failed, "scenario") + " failed")
	}
	return rep, nil
}

// conditions gathers the facts of the run that do not change during it.
func conditions(env *environment, cfg Config) Conditions {
	cores, model, mem := machine()
	c := Conditions{
		Cores: cores, CPUModel: model, MemoryBytes: mem,
		GoVersion: runtime.Version(), OSArch: runtime.GOOS + "/" + runtime.GOARCH,
		ClockTicks:      int64(env.probe.hz),
		SidecarVersion:  env.version,
		SidecarStarted:  env.child != nil,
		PostgresStarted: env.pg != nil,
		Postgres:        env.pgInfo,
		Encrypt:         sealPayloads.Load(),
	}
	if env.probe.sidecarPID > 0 {
		c.SidecarPID = ptr(env.probe.sidecarPID)
	}
	if env.probe.postmasterPID > 0 {
		c.PostmasterPID = ptr(env.probe.postmasterPID)
	}
	return c
}

// newRunID is sortable by time and unique among runs started the same
// second.
func newRunID() string {
	b := make([]byte, 2)
	rand.Read(b)
	return time.Now().UTC().Format("20060102T150405") + "-" + hex.EncodeToString(b)
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}
