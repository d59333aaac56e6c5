// Package janitor deletes, in the background, what queues no longer have
// to keep: whole segments of messages past their retention, and the
// transaction id hashes past their queue's deduplication horizon. The
// rules and the SQL are in schema/migrations/0003_retention.sql.
//
// Every sidecar runs a janitor; one at a time works, under a PostgreSQL
// advisory lock, and the others skip the round. A round is a series of
// short transactions, each bounded in segments and messages, with a pause
// between them; none locks a partition row, so pushes never wait for it.
package janitor

import (
	"context"
	"errors"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/queenside/queenside/sidecar/store"
)

// DefaultInterval is the time between two rounds.
const DefaultInterval = 5 * time.Second

// Defaults of Options: a batch deletes about a thousand segments or ten
// thousand messages, about a tenth of a second of PostgreSQL's time, then
// the janitor pauses so that what waits for the database gets its turn.
const (
	defaultSegments = 1000
	defaultMessages = 10000
	defaultPause    = 10 * time.Millisecond
)

// Options configure a Janitor; zero values take the defaults.
type Options struct {
	Interval time.Duration // between rounds
	Budget   store.Budget  // of one batch
	Pause    time.Duration // between batches
	Logger   hclog.Logger
}

// Janitor runs retention rounds against a store.
type Janitor struct {
	st   *store.Store
	opts Options
	log  hclog.Logger
}

// New returns a janitor for st.
func New(st *store.Store, opts Options) *Janitor {
	if opts.Interval <= 0 {
		opts.Interval = DefaultInterval
	}
	if opts.Budget.Segments <= 0 {
		opts.Budget.Segments = defaultSegments
	}
	if opts.Budget.Messages <= 0 {
		opts.Budget.Messages = defaultMessages
	}
	if opts.Pause <= 0 {
		opts.Pause = defaultPause
	}
	log := opts.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	return &Janitor{st: st, opts: opts, log: log}
}

// Run does a round every interval until ctx ends. A failed round is
// logged and the next one tries again: what it left is still due then.
func (j *Janitor) Run(ctx context.Context) {
	t := time.NewTicker(j.opts.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		r, err := j.Round(ctx)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			j.logFailure(err)
		case r.Skipped:
			j.log.Trace("another janitor holds the lock; skipping the round")
		default:
			j.logRound(r)
		}
	}
}

// Round is what one round did.
type Round struct {
	// Skipped is true when another janitor held the lock: nothing was done.
	Skipped bool
	// Segments and Messages were deleted under the retention rules;
	// Orphaned rows keep the hashes of some of those segments, to outlive
	// them: one a partition and batch.
	Segments, Messages, Orphaned int64
	// DedupHashes are dedup rows deleted of messages still retained,
	// OrphanHashes of messages deleted earlier.
	DedupHashes, OrphanHashes int64
	Batches                   int
	Took                      time.Duration
}

func (r Round) deletedAnything() bool {
	return r.Segments > 0 || r.DedupHashes > 0 || r.OrphanHashes > 0
}

// Round takes the lock, unless another janitor holds it, and deletes
// everything due now, batch by batch. Hashes go first, so that the segments
// deleted after them need not keep theirs.
func (j *Janitor) Round(ctx context.Context) (Round, error) {
	start := time.Now()
	var r Round
	sess, ok, err := j.st.LockRetention(ctx)
	if err != nil || !ok {
		r.Skipped = err == nil
		return r, err
	}
	defer sess.Close()
	err = j.batches(ctx, &r, func() (bool, error) {
		b, err := sess.PurgeOrphanHashes(ctx, j.opts.Budget)
		r.OrphanHashes += b.Hashes
		return b.More, err
	})
	if err == nil {
		err = j.sweep(ctx, &r, func(from int64) (*int64, error) {
			b, err := sess.PurgeDedup(ctx, from, j.opts.Budget)
			r.DedupHashes += b.Hashes
			return b.Next, err
		})
	}
	if err == nil {
		err = j.sweep(ctx, &r, func(from int64) (*int64, error) {
			b, err := sess.ExpireSegments(ctx, from, j.opts.Budget)
			r.Segments += b.Segments
			r.Messages += b.Messages
			r.Orphaned += b.Orphaned
			return b.Next, err
		})
	}
	r.Took = time.Since(start)
	return r, err
}

// sweep runs batch over the partitions in id order, each call going on
// from where the last one stopped, until one has seen them all.
func (j *Janitor) sweep(ctx context.Context, r *Round, batch func(from int64) (*int64, error)) error {
	var from int64
	return j.batches(ctx, r, func() (bool, error) {
		next, err := batch(from)
		if next != nil {
			from = *next
		}
		return next != nil, err
	})
}

// batches calls batch until it says nothing more is due, pausing between
// calls.
func (j *Janitor) batches(ctx context.Context, r *Round, batch func() (more bool, err error)) error {
	for {
		more, err := batch()
		r.Batches++
		if err != nil || !more {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(j.opts.Pause):
		}
	}
}

func (j *Janitor) logRound(r Round) {
	fields := []any{"segments", r.Segments, "messages", r.Messages, "orphaned", r.Orphaned,
		"dedup_hashes", r.DedupHashes, "orphan_hashes", r.OrphanHashes, "batches", r.Batches, "took", r.Took}
	j.log.Debug("retention round", fields...)
	if r.deletedAnything() {
		j.log.Info("deleted what retention allows", fields...)
	}
}

// logFailure reports a failed round. An unreachable database is already
// reported by everything else in the sidecar, and a row locked by a push
// is only a reason to come back next round: neither is worth a warning.
func (j *Janitor) logFailure(err error) {
	if store.IsUnavailable(err) || isLockTimeout(err) {
		j.log.Debug("retention round stopped; the next one goes on", "error", err)
		return
	}
	j.log.Warn("retention round failed", "error", err)
}

func isLockTimeout(err error) bool {
	var coded interface{ SQLState() string }
	return errors.As(err, &coded) && coded.SQLState() == "55P03"
}
