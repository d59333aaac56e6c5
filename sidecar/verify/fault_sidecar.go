package verify

import (
	"context"
	"fmt"
	"syscall"
	"time"
)

// restartSidecar stops a random sidecar with sig and starts it again on the
// same socket and spool directory after --sidecar-down.
func (in *injector) restartSidecar(ctx context.Context, r *FaultRecord, sig syscall.Signal) error {
	s := in.cl.sidecars[in.rng.IntN(len(in.cl.sidecars))]
	r.Target = s.String()
	detail, err := in.bounce(ctx, s, sig, false)
	r.Detail = detail
	return err
}

// bounce stops s with sig, waits --sidecar-down and starts it again on the
// same spool. dbDown says PostgreSQL is down meanwhile, so the new
// incarnation cannot be healthy, only serving.
func (in *injector) bounce(ctx context.Context, s *sidecar, sig syscall.Signal, dbDown bool) (string, error) {
	took, status, err := s.stop(ctx, sig)
	if err != nil {
		return "", err
	}
	detail := fmt.Sprintf("%v: exited after %.1f s (%s)", sig, took.Seconds(), status)
	// A drained sidecar exits 0; one that does not has failed its shutdown.
	var stopErr error
	if sig == syscall.SIGTERM && status != "exit status 0" {
		stopErr = fmt.Errorf("SIGTERM drain ended with %s", status)
	}
	if !sleep(ctx, in.cfg.SidecarDown) {
		return detail, ctx.Err()
	}
	began := time.Now()
	if _, err := s.start(ctx, dbDown); err != nil {
		return detail, err
	}
	state := "healthy"
	if dbDown {
		state = "serving"
	}
	detail += fmt.Sprintf("; started again after %v on the same spool, %s in %.1f s", in.cfg.SidecarDown, state, time.Since(began).Seconds())
	return detail, stopErr
}

// outageKill SIGKILLs a sidecar whose spool holds records and starts it
// again on that spool; it is recorded as a fault of its own. While
// PostgreSQL is down it picks the sidecar with the most records; as
// PostgreSQL comes back it waits (up to replayWatch) for one to be caught
// replaying, so that the replay is cut short and must resume.
func (in *injector) outageKill(ctx context.Context, when string, dbDown bool) {
	r := &FaultRecord{Kind: FaultSidecarKill, StartedAt: time.Since(in.start).Seconds()}
	r.PlannedAt = r.StartedAt
	began := time.Now()
	target, seen := in.replayingSidecar(ctx, !dbDown)
	r.Target = target.String()
	r.pushes = in.loader.watch.open()
	detail, err := in.bounce(ctx, target, syscall.SIGKILL, dbDown)
	in.recovered(r)
	r.Detail = fmt.Sprintf("%s, with %d records in its spool (replaying: %v); %s", when, seen.Records, seen.Replaying, detail)
	if err != nil {
		r.Error = err.Error()
	}
	r.Took = time.Since(began).Seconds()
	in.record(r)
}

// replayWatch bounds the wait for a sidecar caught replaying.
const replayWatch = 5 * time.Second

// replayingSidecar returns a sidecar caught replaying when watch is set and
// one is seen within replayWatch, else the one with the most records.
func (in *injector) replayingSidecar(ctx context.Context, watch bool) (*sidecar, spoolCounters) {
	deadline := time.Now().Add(replayWatch)
	for {
		var most *sidecar
		var mostSeen spoolCounters
		for _, s := range in.cl.sidecars {
			c, err := scrapeSpool(ctx, s.httpAddr)
			if err != nil {
				continue
			}
			if watch && c.Replaying && c.Records > 0 {
				return s, c
			}
			if most == nil || c.Records > mostSeen.Records {
				most, mostSeen = s, c
			}
		}
		if most == nil {
			most = in.cl.sidecars[in.rng.IntN(len(in.cl.sidecars))]
		}
		if !watch || time.Now().After(deadline) || !sleep(ctx, 20*time.Millisecond) {
			return most, mostSeen
		}
	}
}
