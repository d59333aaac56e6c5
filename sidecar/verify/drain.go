package verify

import (
	"context"
	"fmt"
	"strings"
	"time"

	queenside "github.com/queenside/queenside/clients/go"
)

// drainPoll is how often the drain looks at the pipeline.
const drainPoll = time.Second

// pipelineState is what the drain waits for and what the final checks need.
type pipelineState struct {
	verified []int64            // per group: distinct sequence numbers delivered
	lag      []int64            // per group: messages its cursors have not passed
	heads    []map[string]int64 // per queue: partition -> head offset
	spooled  int64              // records waiting in the spools
	down     []string           // sidecars not running
}

// drained reports whether every event reached the checker (but those a
// sidecar reported lost on the way), nothing is left in any queue or
// spool, and every consumer fault has been carried out.
func (r *run) drained(s pipelineState) bool {
	if len(s.down) > 0 || s.spooled > 0 || !r.inj.ordersDone() {
		return false
	}
	lost := r.inj.reportedLost()
	for i, g := range r.groups {
		if s.verified[i]+lostBy(lost, g.queue) < r.loader.events() || s.lag[i] > 0 {
			return false
		}
	}
	return true
}

// lostBy counts the events reported lost in queue or an earlier one.
func lostBy(lost []LostEvent, queue int) int64 {
	var n int64
	for _, e := range lost {
		if e.Queue <= queue {
			n++
		}
	}
	return n
}

func (s pipelineState) String() string {
	var b strings.Builder
	for i := range s.verified {
		fmt.Fprintf(&b, "q%d: %d verified, lag %d; ", i+1, s.verified[i], s.lag[i])
	}
	fmt.Fprintf(&b, "%d records in the spools", s.spooled)
	if len(s.down) > 0 {
		fmt.Fprintf(&b, "; down: %s", strings.Join(s.down, ", "))
	}
	return b.String()
}

// drain waits, once the loader is done, until the pipeline is empty or the
// drain timeout passes, and returns the last state seen.
func (r *run) drain(ctx context.Context) (pipelineState, bool) {
	deadline := time.Now().Add(r.cfg.DrainTimeout)
	var s pipelineState
	for {
		s = r.state(ctx)
		if r.drained(s) || ctx.Err() != nil || time.Now().After(deadline) {
			return s, r.drained(s)
		}
		sleep(ctx, drainPoll)
	}
}

// state reads the pipeline: the auditors, the spools, and each queue's
// partitions through any sidecar that answers.
func (r *run) state(ctx context.Context) pipelineState {
	s := pipelineState{spooled: r.cl.spoolRecords(ctx)}
	for _, sc := range r.cl.sidecars {
		if !sc.up() {
			s.down = append(s.down, sc.String())
		}
	}
	s.verified = make([]int64, len(r.groups))
	s.lag = make([]int64, len(r.groups))
	s.heads = make([]map[string]int64, len(r.groups))
	for i, g := range r.groups {
		s.verified[i] = g.audit.verified()
		s.lag[i] = -1 // unknown until stats answer
		st, err := r.stats(ctx, g.queueName)
		if err != nil {
			continue
		}
		s.lag[i], s.heads[i] = 0, map[string]int64{}
		for _, p := range st.Partitions {
			s.heads[i][p.Partition] = p.HeadOffset
			for _, gs := range p.Groups {
				if gs.Group == g.groupName {
					s.lag[i] += gs.Lag
				}
			}
		}
	}
	return s
}

// stats asks the first sidecar that answers for a queue's partitions.
func (r *run) stats(ctx context.Context, queue string) (queenside.StatsResult, error) {
	var last error
	for _, sc := range r.cl.sidecars {
		if !sc.up() {
			continue
		}
		st, err := func() (queenside.StatsResult, error) {
			cctx, cancel := context.WithTimeout(ctx, requestTimeout)
			defer cancel()
			c, err := queenside.Dial(cctx, sc.socket)
			if err != nil {
				return queenside.StatsResult{}, err
			}
			defer c.Close()
			return c.Stats(cctx, queue)
		}()
		if err == nil {
			return st, nil
		}
		last = err
	}
	return queenside.StatsResult{}, fmt.Errorf("stats %s: no sidecar answered: %v", queue, last)
}
