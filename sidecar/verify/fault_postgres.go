package verify

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// restartPostgres stops PostgreSQL as a crash would and starts it again
// after --pg-down, then waits for the sidecars to replay their spools. With
// --outage-kills it also kills sidecars whose spools hold records: one
// while PostgreSQL is down, one as soon as it is back.
func (in *injector) restartPostgres(ctx context.Context, r *FaultRecord) error {
	r.Target = "PostgreSQL"
	if in.cl.citus != nil {
		r.Target = "Citus coordinator"
	}
	o, err := in.stopPostgres()
	if err != nil {
		return err
	}
	if in.cfg.OutageKills >= 1 && sleep(ctx, (in.cfg.PGDown-in.cfg.SidecarDown)/3) {
		in.outageKill(ctx, "while PostgreSQL is down", true)
	}
	began, err := o.end(ctx)
	if err != nil {
		return err
	}
	up := time.Since(began)
	r.Detail = fmt.Sprintf("pg_ctl stop -m immediate, down %.1f s; accepting connections %.1f s after restart",
		began.Sub(o.stopped).Seconds(), up.Seconds())
	if in.cfg.OutageKills >= 2 {
		in.outageKill(ctx, "as PostgreSQL came back", false)
	}
	if err := in.awaitReplay(ctx); err != nil {
		return err
	}
	r.SpoolsDrained = seconds(time.Since(began))
	return nil
}

// outage is a PostgreSQL crash in course (stopPostgres).
type outage struct {
	in      *injector
	stopped time.Time
}

// stopPostgres stops PostgreSQL as a crash would.
func (in *injector) stopPostgres() (*outage, error) {
	o := &outage{in: in, stopped: time.Now()}
	in.cl.pgDown.Store(true)
	if err := in.cl.pg.Stop("immediate"); err != nil {
		return nil, err
	}
	return o, nil
}

// end starts PostgreSQL again once --pg-down has passed since the stop,
// and returns when the restart began; it is back when end returns.
func (o *outage) end(ctx context.Context) (time.Time, error) {
	in := o.in
	if !sleep(ctx, time.Until(o.stopped.Add(in.cfg.PGDown))) {
		in.cl.pg.Restart(context.Background()) //nolint:errcheck // the run is ending; closing reports it
		return time.Time{}, ctx.Err()
	}
	began := time.Now()
	if err := in.cl.pg.Restart(ctx); err != nil {
		return began, err
	}
	in.cl.pgDown.Store(false)
	return began, nil
}

// awaitReplay waits, once the database is back from an outage, for every
// sidecar to be healthy and every spool to be replayed: the next fault
// starts from a pipeline that has recovered.
func (in *injector) awaitReplay(ctx context.Context) error {
	if err := in.cl.healthyAll(ctx, recoveryTimeout); err != nil {
		return err
	}
	deadline := time.Now().Add(recoveryTimeout)
	for in.cl.spoolRecords(ctx) > 0 {
		if time.Now().After(deadline) {
			return errors.New("the spools were not replayed in time")
		}
		if !sleep(ctx, 200*time.Millisecond) {
			return ctx.Err()
		}
	}
	return nil
}

// failoverPostgres stops the primary as a crash would, promotes its
// synchronous standby, and waits for the sidecars (on a multi-host URL) to
// follow it and replay their spools; then it rewinds the old primary with
// pg_rewind and makes it the new primary's synchronous standby, ready for
// the next failover.
func (in *injector) failoverPostgres(ctx context.Context, r *FaultRecord) error {
	cl := in.cl
	r.Target = "PostgreSQL primary"
	if cl.standby == nil {
		return errors.New("no standby: the run was started without failovers")
	}
	stopped := time.Now()
	cl.pgDown.Store(true)
	if err := cl.pg.Stop("immediate"); err != nil {
		return err
	}
	if err := cl.standby.Promote(ctx); err != nil {
		return err
	}
	promoted := time.Since(stopped)
	cl.pg, cl.standby = cl.standby, cl.pg
	cl.pgDown.Store(false)
	if err := cl.healthyAll(ctx, recoveryTimeout); err != nil {
		return err
	}
	healthy := time.Since(stopped)
	deadline := time.Now().Add(recoveryTimeout)
	for cl.spoolRecords(ctx) > 0 {
		if time.Now().After(deadline) {
			return errors.New("the spools were not replayed into the new primary in time")
		}
		if !sleep(ctx, 200*time.Millisecond) {
			return ctx.Err()
		}
	}
	r.Detail = fmt.Sprintf("pg_ctl stop -m immediate, standby promoted %.1f s after; every sidecar healthy %.1f s and spools empty %.1f s after the stop",
		promoted.Seconds(), healthy.Seconds(), time.Since(stopped).Seconds())
	in.recovered(r) // the pushes' figures end here: the rewind is no outage
	began := time.Now()
	if err := cl.standby.Rejoin(ctx, cl.pg); err != nil {
		return err
	}
	if err := cl.pg.RequireSynchronousStandby(ctx); err != nil {
		return err
	}
	r.Detail += fmt.Sprintf("; old primary rewound and streaming as the synchronous standby %.1f s later", time.Since(began).Seconds())
	return nil
}
