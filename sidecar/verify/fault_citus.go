package verify

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// restartWorker stops a random Citus worker as a crash would and starts it
// again after --pg-down, then waits, as after a PostgreSQL restart, for the
// sidecars to replay their spools. Meanwhile the coordinator answers the
// calls that touch the worker's shards with 08006, which a sidecar takes
// for its database being unavailable: it spools those pushes, and the
// consumers of those partitions retry.
func (in *injector) restartWorker(ctx context.Context, r *FaultRecord) error {
	r.Target = "Citus worker"
	if in.cl.citus == nil {
		return errors.New("no Citus workers: the run was started without --citus")
	}
	workers := in.cl.citus.Workers
	i := in.rng.IntN(len(workers))
	w := workers[i]
	r.Target = fmt.Sprintf("Citus worker %d", i+1) // as its directory is named
	stopped := time.Now()
	if err := w.Stop("immediate"); err != nil {
		return err
	}
	if !sleep(ctx, in.cfg.PGDown) {
		w.Restart(context.Background()) //nolint:errcheck // the run is ending; closing reports it
		return ctx.Err()
	}
	began := time.Now()
	if err := w.Restart(ctx); err != nil {
		return err
	}
	r.Detail = fmt.Sprintf("pg_ctl stop -m immediate, down %.1f s; accepting connections %.1f s after restart",
		began.Sub(stopped).Seconds(), time.Since(began).Seconds())
	if err := in.awaitReplay(ctx); err != nil {
		return err
	}
	r.SpoolsDrained = seconds(time.Since(began))
	return nil
}

// stallWorker freezes a random Citus worker for --pg-down (SIGSTOP of
// every process), then thaws it and waits, as after a worker restart, for
// the sidecars to recover. Meanwhile the coordinator's calls to the
// worker's shards get no answer, so the sidecars' calls that touch them
// run into --database-timeout; the other partitions go on.
func (in *injector) stallWorker(ctx context.Context, r *FaultRecord) error {
	r.Target = "Citus worker"
	if in.cl.citus == nil {
		return errors.New("no Citus workers: the run was started without --citus")
	}
	workers := in.cl.citus.Workers
	i := in.rng.IntN(len(workers))
	r.Target = fmt.Sprintf("Citus worker %d", i+1)
	rows, err := in.workerRows(ctx, workers[i])
	if err != nil {
		return err
	}
	return in.stall(ctx, r, workers[i], rows)
}
