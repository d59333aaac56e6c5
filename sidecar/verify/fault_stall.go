package verify

import (
	"context"
	"fmt"
	"time"

	"github.com/queenside/queenside/sidecar/pgserver"
)

// stallPostgres freezes PostgreSQL, the primary when there is a standby
// (or the Citus coordinator), for --pg-down: every process stopped with
// SIGSTOP, as a host hung by its storage or its hypervisor. Nothing is
// refused and no connection closes; nothing is answered either, so every
// call of a sidecar runs into its --database-timeout: pushes are spooled,
// the rest answer unavailable. Then it thaws it and waits, as after a
// restart, for every sidecar to be healthy and every spool replayed.
func (in *injector) stallPostgres(ctx context.Context, r *FaultRecord) error {
	r.Target = "PostgreSQL"
	switch {
	case in.cl.citus != nil:
		r.Target = "Citus coordinator"
	case in.cl.standby != nil:
		r.Target = "PostgreSQL primary"
	}
	// Read before the freeze, which would hold the query up.
	rows, err := in.allRows(ctx)
	if err != nil {
		return err
	}
	return in.stall(ctx, r, in.cl.pg, rows)
}

// stall freezes s for --pg-down and thaws it, whatever happens meanwhile
// (a frozen server would hang the run's end, which stops it); then it
// waits for the sidecars to recover and for rows to be free of locks, and
// records both from the thaw.
func (in *injector) stall(ctx context.Context, r *FaultRecord, s *pgserver.Server, rows lockRows) error {
	// While the sidecars' database is frozen, a sidecar that has to be
	// started again cannot become healthy, only serve.
	sidecarsDB := s == in.cl.pg
	in.cl.pgDown.Store(sidecarsDB)
	defer in.cl.pgDown.Store(false)
	frozen := time.Now()
	if err := s.Freeze(); err != nil {
		s.Thaw() //nolint:errcheck // the processes stopped before the error go on
		return err
	}
	thawed := false
	defer func() {
		if !thawed {
			s.Thaw() //nolint:errcheck // the run is ending; stopping the server reports it
		}
	}()
	if !sleep(ctx, in.cfg.PGDown) {
		return ctx.Err()
	}
	if err := s.Thaw(); err != nil {
		return err
	}
	thawed = true
	in.cl.pgDown.Store(false)
	at := time.Now()
	r.Detail = fmt.Sprintf("SIGSTOP of every process, frozen %.1f s, then SIGCONT", at.Sub(frozen).Seconds())
	locks := in.probeLocks(ctx, rows, at)
	err := in.awaitReplay(ctx)
	if err == nil {
		r.SpoolsDrained = seconds(time.Since(at))
	}
	in.recovered(r)
	return in.lockFigures(r, rows, locks, err)
}

// lockFigures waits for the lock probe and records it; err, the fault's
// own error, comes first.
func (in *injector) lockFigures(r *FaultRecord, rows lockRows, locks *lockProbe, err error) error {
	took, lerr := locks.wait()
	if lerr == nil {
		r.LocksFree, r.LockProbe = seconds(took), rows.what
	}
	if err != nil {
		return err
	}
	return lerr
}
