package history

import (
	"context"
	"time"
)

// Run records a sample every interval until ctx ends, the first at once.
// read is given a context that ends when the next sample is due, so that a
// database that hangs costs gaps rather than a pile of reads.
func (h *History) Run(ctx context.Context, read func(ctx context.Context) Sample) {
	tick := time.NewTicker(h.interval)
	defer tick.Stop()
	for {
		at := time.Now()
		rctx, cancel := context.WithTimeout(ctx, h.interval)
		s := read(rctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		s.At = at
		h.Record(s)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
