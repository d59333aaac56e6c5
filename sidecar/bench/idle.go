package bench

import (
	"context"
	"fmt"
	"time"

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
// nothing to do must leave PostgreSQL (and the machine) alone.
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
