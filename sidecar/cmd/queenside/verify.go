package main

import (
	"github.com/urfave/cli/v2"

	"github.com/queenside/queenside/sidecar/verify"
)

// verifyCommand maps flags onto verify.Config; the defaults are the
// package's, so flags and library cannot drift apart.
func verifyCommand() *cli.Command {
	d := verify.DefaultConfig()
	return &cli.Command{
		Name:  "verify",
		Usage: "check exactly-once, in-order delivery through a pipeline of queues while sidecars and PostgreSQL are killed, frozen and cut off from each other; starts its own PostgreSQL and sidecars",
		Description: "Faults run one after another, each given about the time it takes (a failover or a PostgreSQL restart tens of seconds), " +
			"the consumer faults first, all within --duration. A fault count not given is the most the run places: fewer when they do not fit. " +
			"A count given that does not fit, or a --faults schedule whose consumer faults would run out of traffic, is refused before anything starts. " +
			"Should faults overrun, the loader pushes past --duration until the last consumer fault is carried out.",
		Flags: append([]cli.Flag{
			&cli.IntFlag{Name: "sidecars", Value: d.Sidecars, Usage: "sidecar processes on the one database"},
			&cli.IntFlag{Name: "stages", Value: d.Stages, Usage: "stages between the loader and the checker (queues: stages + 1)"},
			&cli.IntFlag{Name: "partitions", Value: d.Partitions, Usage: "partitions of every queue"},
			&cli.IntFlag{Name: "rate", Value: d.Rate, Usage: "events per second the loader pushes"},
			&cli.DurationFlag{Name: "duration", Value: d.Duration, Usage: "how long the loader pushes (then the pipeline drains)"},
			&cli.IntFlag{Name: "consumers", Value: d.Consumers, Usage: "parallel consumers of each stage and of the checker"},
			&cli.IntFlag{Name: "lease-seconds", Value: d.LeaseSeconds, Usage: "lease of every pop"},
			&cli.Int64Flag{Name: "seed", Value: d.Seed, Usage: "seed of the random choices: fault targets, sidecars picked (0: a new one, reported)"},
			&cli.StringFlag{Name: "out", Value: d.Out, Usage: "write the report as JSON here (empty: none)"},
			&cli.BoolFlag{Name: "citus", Usage: "run on a Citus cluster instead of one PostgreSQL: the sidecars on its coordinator (which pg-restart stops), the schema distributed over --citus-workers workers; no pg-failovers"},
			&cli.IntFlag{Name: "citus-workers", Value: d.CitusWorkers, Usage: "with --citus, the Citus workers"},
			&cli.IntFlag{Name: verify.CountFlag(verify.FaultSidecarKill), Value: d.SidecarKills, Usage: "SIGKILLs of a random sidecar, each restarted on its spool"},
			&cli.IntFlag{Name: verify.CountFlag(verify.FaultSidecarTerm), Value: d.SidecarTerms, Usage: "SIGTERMs (drains) of a random sidecar, each restarted"},
			&cli.IntFlag{Name: verify.CountFlag(verify.FaultPGRestart), Value: d.PGRestarts, Usage: "immediate stops of PostgreSQL (with --citus: the coordinator), each restarted after --pg-down"},
			&cli.IntFlag{Name: verify.CountFlag(verify.FaultPostgresStall), Value: d.PostgresStalls, Usage: "freezes of PostgreSQL (SIGSTOP of every process; the primary when there is a standby, with --citus the coordinator), each thawed after --pg-down"},
			&cli.IntFlag{Name: verify.CountFlag(verify.FaultPGFailover), Value: d.PGFailovers, Usage: "failovers: the primary stopped immediately, its synchronous standby promoted, the old primary rewound to follow it (none with --citus: its coordinator has no standby)"},
			&cli.IntFlag{Name: verify.CountFlag(verify.FaultPartition), Value: d.NetworkPartitions, Usage: "partitions: a random sidecar's packets to and from PostgreSQL dropped for --pg-down (PostgreSQL in a network namespace; skipped where none can be made, as without root)"},
			&cli.IntFlag{Name: verify.CountFlag(verify.FaultWorkerRestart), Value: d.WorkerRestarts, Usage: "with --citus, immediate stops of a random Citus worker, each restarted after --pg-down"},
			&cli.IntFlag{Name: verify.CountFlag(verify.FaultWorkerStall), Value: d.WorkerStalls, Usage: "with --citus, freezes of a random Citus worker, each thawed after --pg-down"},
			&cli.IntFlag{Name: verify.CountFlag(verify.FaultSpoolDiskFull), Value: d.SpoolDiskFulls, Usage: "a random sidecar's spool volume (a tmpfs the run mounts; skipped where it cannot, as without root) filled during a PostgreSQL outage and freed only once every spool is replayed"},
			&cli.IntFlag{Name: verify.CountFlag(verify.FaultSpoolDamage), Value: d.SpoolDamages, Usage: "a random sidecar killed during a PostgreSQL outage and one record of its spool damaged before it starts again: each loss must be reported by name"},
			&cli.IntFlag{Name: verify.CountFlag(verify.FaultConsumerKill), Value: d.ConsumerKills, Usage: "consumers that die mid-batch without acking"},
			&cli.IntFlag{Name: verify.CountFlag(verify.FaultLeaseExpiry), Value: d.LeaseExpiries, Usage: "consumers that commit only after their leases expired"},
			&cli.StringFlag{Name: "faults", Usage: "explicit fault schedule instead of the counts, e.g. sidecar-kill@90s,pg-restart@3m"},
			&cli.DurationFlag{Name: "pg-down", Value: d.PGDown, Usage: "how long PostgreSQL (or a Citus worker) stays down or frozen, and a sidecar cut off it"},
			&cli.DurationFlag{Name: "sidecar-down", Value: d.SidecarDown, Usage: "how long a stopped sidecar stays down"},
			&cli.IntFlag{Name: "outage-kills", Value: d.OutageKills, Usage: "SIGKILLs inside each PostgreSQL outage: 1 while it is down, 2 also as it comes back (during replay)"},
			&cli.DurationFlag{Name: "database-timeout", Value: d.DatabaseTimeout, Usage: "the sidecars' --database-timeout: how long a push waits for its commit before it is spooled"},
			&cli.IntFlag{Name: "pop-batch", Value: d.PopBatch, Usage: "messages per pop"},
			&cli.IntFlag{Name: "pop-partitions", Value: d.PopPartitions, Usage: "partitions per pop"},
			&cli.IntFlag{Name: "wait-ms", Value: d.WaitMs, Usage: "long-poll wait of a pop"},
			&cli.DurationFlag{Name: "drain-timeout", Value: d.DrainTimeout, Usage: "how long the pipeline may take to drain after the loader is done"},
			&cli.DurationFlag{Name: "interval", Value: d.Interval, Usage: "width of the progress lines and throughput buckets"},
			&cli.StringFlag{Name: "sidecar-binary", Usage: "binary to run as the sidecars (default: this one)"},
			&cli.BoolFlag{Name: "keep-files", Usage: "keep PostgreSQL, spools and sidecar logs even when the run passes"},
			&cli.StringSliceFlag{Name: "pg-setting", Usage: "a PostgreSQL setting name=value for the run's server, or every Citus node (repeatable), e.g. shared_preload_libraries=pg_stat_statements with --keep-files to read where the time went"},
		}, logFlags()...),
		Action: runVerify,
	}
}

func runVerify(c *cli.Context) error {
	log, err := newLogger(c)
	if err != nil {
		return err
	}
	cfg := verify.Config{
		Sidecars:          c.Int("sidecars"),
		Stages:            c.Int("stages"),
		Partitions:        c.Int("partitions"),
		Rate:              c.Int("rate"),
		Duration:          c.Duration("duration"),
		Consumers:         c.Int("consumers"),
		LeaseSeconds:      c.Int("lease-seconds"),
		Seed:              c.Int64("seed"),
		Out:               c.String("out"),
		Citus:             c.Bool("citus"),
		CitusWorkers:      c.Int("citus-workers"),
		SidecarKills:      c.Int(verify.CountFlag(verify.FaultSidecarKill)),
		SidecarTerms:      c.Int(verify.CountFlag(verify.FaultSidecarTerm)),
		PGRestarts:        c.Int(verify.CountFlag(verify.FaultPGRestart)),
		PostgresStalls:    c.Int(verify.CountFlag(verify.FaultPostgresStall)),
		PGFailovers:       c.Int(verify.CountFlag(verify.FaultPGFailover)),
		NetworkPartitions: c.Int(verify.CountFlag(verify.FaultPartition)),
		WorkerRestarts:    c.Int(verify.CountFlag(verify.FaultWorkerRestart)),
		WorkerStalls:      c.Int(verify.CountFlag(verify.FaultWorkerStall)),
		SpoolDiskFulls:    c.Int(verify.CountFlag(verify.FaultSpoolDiskFull)),
		SpoolDamages:      c.Int(verify.CountFlag(verify.FaultSpoolDamage)),
		ConsumerKills:     c.Int(verify.CountFlag(verify.FaultConsumerKill)),
		LeaseExpiries:     c.Int(verify.CountFlag(verify.FaultLeaseExpiry)),
		Faults:            c.String("faults"),
		PGDown:            c.Duration("pg-down"),
		SidecarDown:       c.Duration("sidecar-down"),
		OutageKills:       c.Int("outage-kills"),
		DatabaseTimeout:   c.Duration("database-timeout"),
		PopBatch:          c.Int("pop-batch"),
		PopPartitions:     c.Int("pop-partitions"),
		WaitMs:            c.Int("wait-ms"),
		DrainTimeout:      c.Duration("drain-timeout"),
		Interval:          c.Duration("interval"),
		SidecarBinary:     c.String("sidecar-binary"),
		KeepFiles:         c.Bool("keep-files"),
		PGSettings:        c.StringSlice("pg-setting"),
		Logger:            log,
	}
	for _, k := range verify.FaultKinds() {
		if c.IsSet(verify.CountFlag(k)) {
			cfg.ExactCounts = append(cfg.ExactCounts, k)
		}
	}
	// A Citus coordinator has no standby here: on Citus the failovers'
	// default is none, and only a count given is refused.
	if cfg.Citus && !c.IsSet(verify.CountFlag(verify.FaultPGFailover)) {
		cfg.PGFailovers = 0
	}
	ctx, stop := signalContext()
	defer stop()
	if _, err := verify.Run(ctx, cfg); err != nil {
		return exitError("verify: %v", err)
	}
	return nil
}
