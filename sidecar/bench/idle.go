package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	queenside "github.com/queenside/queenside/clients/go"
)

// IdleFigures is what consumers waiting on an empty queue cost: the share
// of one core that PostgreSQL and the sidecar spent while nothing moved.
type IdleFigures struct {
	Seconds             float64  `json:"seconds"`
	Consumers           int      `json:"consumers"`
	Partitions          int      `json:"partitions"`
	Pops                int64    `json:"pops"` // answered, all empty
	PostgresCorePercent *float64 `json:"postgresCorePercent"`
	SidecarCorePercent  *float64 `json:"sidecarCorePercent"`
}

// scenarioIdle long-polls an empty queue of mixed's partitions with
// mixed's consumers for cfg.IdleDuration: a sidecar whose consumers have
// nothing to do must leave PostgreSQL (and the machine) alone. PostgreSQL
// is let settle first: the scenarios before leave it vacuuming and
// checkpointing their messages for a minute or more (2.6% of a core in
// idle's 30 s after curve), which is not what waiting consumers cost.
func (b *bench) scenarioIdle(ctx context.Context) Result {
	r := Result{Name: ScenarioIdle}
	queue := b.queue(ScenarioIdle)
	producers, doneP, err := dial(ctx, b.socket, 1)
	if err != nil {
		r.setupFailed(err)
		return r
	}
	defer doneP()
	consumers, doneC, err := dial(ctx, b.socket, b.cfg.MixedConsumers)
	if err != nil {
		r.setupFailed(err)
		return r
	}
	defer doneC()
	args := queenside.PopArgs{Queue: queue, Group: ScenarioIdle, Batch: b.cfg.PopBatch, Partitions: b.cfg.MixedPopPartitions}
	if err := b.warmQueue(ctx, producers, consumers[0], queue, b.cfg.MixedPartitions, args); err != nil {
		r.setupFailed(err)
		return r
	}

	b.settle(ctx)

	m := b.probe.start()
	end := time.Now().Add(b.cfg.IdleDuration)
	t := workers(consumers, 1, func(_ int, c *queenside.Client, t *tally) {
		for ctx.Err() == nil {
			left := time.Until(end)
			if left < time.Millisecond {
				return
			}
			a := args
			a.WaitMs = min(b.cfg.MixedWaitMs, int(left/time.Millisecond))
			if n := popAndAck(ctx, c, t, a); n > 0 {
				t.failf("idle: %d messages delivered from a queue nobody pushes to", n)
			}
			t.emptyPops++
		}
	})
	m.stop(&r)
	r.absorb(t, "pop")
	idle := &IdleFigures{Seconds: r.Seconds, Consumers: len(consumers), Partitions: b.cfg.MixedPartitions, Pops: t.emptyPops}
	if v := r.PostgresCPUSeconds; v != nil && r.Seconds > 0 {
		idle.PostgresCorePercent = ptr(*v / r.Seconds * 100)
	}
	if v := r.SidecarCPUSeconds; v != nil && r.Seconds > 0 {
		idle.SidecarCorePercent = ptr(*v / r.Seconds * 100)
	}
	r.Idle = idle
	return r
}

func idleLine(f *IdleFigures) string {
	return fmt.Sprintf("%d consumers long-polling %d empty partitions for %.0f s: %d pops; PostgreSQL %s of a core, sidecar %s",
		f.Consumers, f.Partitions, f.Seconds, f.Pops, opt(f.PostgresCorePercent, "%.2f%%"), opt(f.SidecarCorePercent, "%.2f%%"))
}

// settle vacuums and checkpoints the database, then waits (a minute at
// most) until no autovacuum worker runs, so that PostgreSQL's CPU in the
// measured part is the consumers' doing. Without the rights (a database
// given with --database-url) it does what it may and goes on.
func (b *bench) settle(ctx context.Context) {
	conn, err := pgx.Connect(ctx, b.dbURL)
	if err != nil {
		return
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, _ = conn.Exec(ctx, "VACUUM (ANALYZE)")
	_, _ = conn.Exec(ctx, "CHECKPOINT")
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline) && ctx.Err() == nil; {
		var workers int
		err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'autovacuum worker'").Scan(&workers)
		if err != nil || workers == 0 {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}
