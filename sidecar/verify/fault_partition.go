package verify

import (
	"context"
	"fmt"
	"time"
)

// partitionSidecar cuts a random sidecar off PostgreSQL for --pg-down: its
// link drops every packet, both ways, without a word, as a partition in a
// cluster does. Its calls run into its --database-timeout (pushes are
// spooled, the rest answer unavailable) and PostgreSQL keeps the sessions
// of the vanished client, and their locks, until its own guards end them;
// the other sidecars and the verifier go on. Then the link carries traffic
// again and the injector waits for every sidecar to be healthy and every
// spool replayed. The lock probe runs from the cut: it measures how soon
// the cut-off sidecar's locks are freed.
func (in *injector) partitionSidecar(ctx context.Context, r *FaultRecord) error {
	i := in.rng.IntN(len(in.cl.sidecars))
	link := in.cl.net.links[i]
	r.Target = in.cl.sidecars[i].String()
	rows, err := in.producerRows(ctx, i)
	if err != nil {
		return err
	}
	cut := time.Now()
	if err := link.Cut(); err != nil {
		link.Heal() //nolint:errcheck // the cut's error says more
		return err
	}
	healed := false
	defer func() {
		if !healed {
			link.Heal() //nolint:errcheck // the run is ending
		}
	}()
	locks := in.probeLocks(ctx, rows, cut)
	if !sleep(ctx, in.cfg.PGDown) {
		locks.wait() //nolint:errcheck // ended with ctx
		return ctx.Err()
	}
	if err := link.Heal(); err != nil {
		return err
	}
	healed = true
	at := time.Now()
	r.Detail = fmt.Sprintf("every packet between it and PostgreSQL dropped, both ways, for %.1f s, then let through again", at.Sub(cut).Seconds())
	err = in.awaitReplay(ctx)
	if err == nil {
		r.SpoolsDrained = seconds(time.Since(at))
	}
	in.recovered(r)
	return in.lockFigures(r, rows, locks, err)
}
