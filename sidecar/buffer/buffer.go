// Package buffer is queenside's answer to a database outage. Push items that
// cannot reach PostgreSQL go to the disk spool, fsynced before they are
// answered buffered, and are replayed through the same push path, with the
// same transaction ids and message ids, once PostgreSQL answers again.
package buffer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/go-hclog"

	"github.com/queenside/queenside/protocol"
	"github.com/queenside/queenside/sidecar/store"
	"github.com/queenside/queenside/spool"
)

// Store is what the buffer needs of the database side.
type Store interface {
	// PushReplay stores msgs in a transaction no live push joins, and
	// records mark in it (store.Store.PushReplay).
	PushReplay(ctx context.Context, msgs []store.Message, mark store.ReplayMark) ([]store.Outcome, error)
	// ReplayedTo is the mark recorded for a segment, 0 if none.
	ReplayedTo(ctx context.Context, segment uuid.UUID) (int64, error)
	// ForgetReplayed removes a retired segment's mark.
	ForgetReplayed(ctx context.Context, segment uuid.UUID) error
	Ping(ctx context.Context) (time.Duration, error)
	// DedupWindows is every queue's deduplication window.
	DedupWindows(ctx context.Context) (map[string]time.Duration, error)
	// Bound bounds one call by the database timeout (store.Store.Bound).
	Bound(ctx context.Context) (context.Context, context.CancelFunc)
}

// CauseOf names the cause of an error for which store.IsUnavailable holds:
// protocol.SpoolCauseTimeout or protocol.SpoolCauseRefused.
func CauseOf(err error) string {
	if store.AsTimeout(err) != nil {
		return protocol.SpoolCauseTimeout
	}
	return protocol.SpoolCauseRefused
}

// Buffer routes push items to the spool while PostgreSQL is unreachable, and
// replays them when it is back.
type Buffer struct {
	sp      *spool.Spool
	st      Store
	log     hclog.Logger
	pending *pending
	windows windows
	kick    chan struct{}

	down    atomic.Bool // the last attempt to reach PostgreSQL failed
	suspect atomic.Bool // see Suspect
	// downCause is why (CauseOf), and downError the error, while down.
	downCause atomic.Pointer[downState]
	replaying atomic.Bool
	replayed  atomic.Int64 // records stored by replay (queued or duplicate)
	skipped   atomic.Int64 // records an earlier replay stored that the spool had not noted
	rejected  atomic.Int64 // records the database refused, moved to quarantine/
	damaged   atomic.Int64 // stretches of spooled records found damaged on disk, lost to the replay

	// passMu is held by a replay pass and by the counting of an adopted
	// segment, so a segment is never replayed before its records are counted.
	passMu sync.Mutex
	// diskError is the last write the spool's disk refused (full, say),
	// nil once a write succeeds again.
	diskError atomic.Pointer[string]

	warnMu     sync.Mutex
	quarantine []string // found at open or on adoption
}

// Stats describes the buffer for health and metrics.
type Stats struct {
	spool.Stats
	Replaying bool
	Replayed  int64
	// Skipped counts records an earlier replay stored that the spool had
	// not noted (a crash or a full disk between): skipped, not stored again.
	Skipped  int64
	Rejected int64
	// Damaged counts the stretches of damaged bytes found in the spool's
	// segments, each holding at least one record lost to the replay.
	Damaged    int64
	DatabaseUp bool
	// DownCause (protocol.SpoolCauseTimeout or SpoolCauseRefused) and DownError say why the
	// database is taken for out of reach; empty while it is up.
	DownCause, DownError string
	Quarantined          []string
	Warnings             []string
}

// New returns a buffer over an opened spool. It counts what the spool holds,
// so the partitions with records waiting are held from the start.
func New(sp *spool.Spool, st Store, log hclog.Logger) (*Buffer, error) {
	b := &Buffer{sp: sp, st: st, log: log, pending: newPending(), kick: make(chan struct{}, 1)}
	rec := sp.Recovery()
	b.quarantine = append(b.quarantine, rec.Quarantined...)
	b.reportDamage(rec.Damaged)
	for _, seg := range sp.Sealed() {
		if err := b.count(seg); err != nil {
			return nil, err
		}
	}
	if n := sp.Stats().Records; n > 0 {
		log.Warn("the spool holds pushes to replay", "records", n, "oldest", sp.Stats().Oldest)
	}
	return b, nil
}

// count adds a sealed segment's records to the pending counts.
func (b *Buffer) count(seg spool.Segment) error {
	var keys []partitionKey
	err := b.sp.Read(seg, func(r spool.Record) error {
		if m, err := decodeRecord(r.Data); err == nil {
			keys = append(keys, partitionKey{m.Queue, m.Partition})
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("count spooled records of %s: %w", seg.Path, err)
	}
	b.pending.add(keys, 1)
	return nil
}

// ShouldSpool reports whether an item for this partition must go to the
// spool: PostgreSQL is known to be unreachable, or the partition has
// records waiting there that it must not overtake.
func (b *Buffer) ShouldSpool(queue, partition string) bool {
	return b.down.Load() || b.pending.holds(queue, partition)
}

// downState is the outage in course.
type downState struct {
	cause string
	err   string
}

// MarkDown records that PostgreSQL could not be reached (err says how), so
// that the next pushes go straight to the spool instead of waiting on a
// dead connection, and wakes the replayer to watch for its return.
func (b *Buffer) MarkDown(err error) {
	b.downCause.Store(&downState{cause: CauseOf(err), err: err.Error()})
	if !b.down.Swap(true) {
		b.log.Warn("database unreachable: pushes go to the spool until it answers", "cause", CauseOf(err), "error", err)
	}
	b.wake()
}

// DownCause is why the database is taken for out of reach (CauseTimeout
// or CauseRefused), "" while it is up.
func (b *Buffer) DownCause() string {
	if d := b.downCause.Load(); d != nil && b.down.Load() {
		return d.cause
	}
	return ""
}

// Suspect asks the replayer to check at once whether PostgreSQL answers: a
// push that takes long, or a call that timed out, may mean the database is
// frozen, or only that it waited on a lock. The replayer's ping tells,
// within probeTimeout: only if it fails do all pushes go straight to the
// spool (MarkDown), so that a database that answers others (a Citus
// coordinator whose one worker hangs) is not taken for down.
func (b *Buffer) Suspect() {
	b.suspect.Store(true)
	b.wake()
}

// Deduplicates reports whether queue deduplicates, as its window was last
// read: a queue not read yet is taken to have the default window, which a
// push gives the queue it creates.
func (b *Buffer) Deduplicates(queue string) bool {
	w, known := b.windows.of(queue)
	return !known || w > 0
}

// Add spools messages, all or none, and returns once they are fsynced.
func (b *Buffer) Add(msgs []store.Message) error {
	now := time.Now()
	recs := make([][]byte, len(msgs))
	keys := make([]partitionKey, len(msgs))
	for i, m := range msgs {
		data, err := encodeRecord(m, now)
		if err != nil {
			return fmt.Errorf("encode spooled record: %w", err)
		}
		recs[i], keys[i] = data, partitionKey{m.Queue, m.Partition}
	}
	// Counted before they can be replayed, uncounted if not written.
	b.pending.add(keys, 1)
	if err := b.sp.Append(recs); err != nil {
		b.pending.add(keys, -1)
		if !errors.Is(err, spool.ErrFull) { // the byte limit, not the disk
			b.diskRefused(err)
		}
		return err
	}
	b.diskAccepted()
	b.wake()
	return nil
}

// Wake asks the replayer to look at the spool now rather than at its next
// tick: say, when maintenance that spooled pushes ends.
func (b *Buffer) Wake() { b.wake() }

func (b *Buffer) wake() {
	select {
	case b.kick <- struct{}{}:
	default:
	}
}

// Stats is cheap: no disk or database access.
func (b *Buffer) Stats() Stats {
	b.warnMu.Lock()
	defer b.warnMu.Unlock()
	s := Stats{
		Stats:       b.sp.Stats(),
		Replaying:   b.replaying.Load(),
		Replayed:    b.replayed.Load(),
		Skipped:     b.skipped.Load(),
		Rejected:    b.rejected.Load(),
		Damaged:     b.damaged.Load(),
		DatabaseUp:  !b.down.Load(),
		Quarantined: append([]string(nil), b.quarantine...),
	}
	if d := b.downCause.Load(); d != nil && !s.DatabaseUp {
		s.DownCause, s.DownError = d.cause, d.err
	}
	if len(b.quarantine) > 0 {
		s.Warnings = append(s.Warnings, fmt.Sprintf("%d spool file(s) did not verify and were moved to quarantine/: %v",
			len(b.quarantine), b.quarantine))
	}
	if n := b.damaged.Load(); n > 0 {
		s.Warnings = append(s.Warnings, fmt.Sprintf("%d stretch(es) of spooled records were damaged on disk and could not be replayed: the log names what was lost; the originals are in quarantine/", n))
	}
	if n := b.rejected.Load(); n > 0 {
		s.Warnings = append(s.Warnings, fmt.Sprintf("%d spooled record(s) were refused by the database and kept in quarantine/", n))
	}
	if e := b.diskError.Load(); e != nil {
		s.Warnings = append(s.Warnings, fmt.Sprintf("the spool's disk refuses writes (%s): pushes that must be spooled fail until it has room, "+
			"and the replay goes on with its progress recorded in the database; PostgreSQL is not the cause", *e))
	}
	if stale := b.windows.exceeded(s.Oldest, b.pending.queues()); stale != "" {
		s.Warnings = append(s.Warnings, stale)
	}
	return s
}

// reportDamage logs each stretch of damaged records at ERROR, naming its
// queue, partition and transaction id when only the record's header was
// damaged and its data still reads, and counts it.
func (b *Buffer) reportDamage(damaged []spool.Damage) {
	for _, d := range damaged {
		b.damaged.Add(1)
		args := []any{"quarantined", d.Quarantined, "offset", d.Offset, "bytes", d.Bytes}
		if m, err := decodeRecord(d.Data); err == nil {
			args = append(args, "queue", m.Queue, "partition", m.Partition, "transaction_id", m.TransactionID)
		} else {
			args = append(args, "record", "unreadable")
		}
		b.log.Error("a spooled record was damaged on disk and is lost to the replay", args...)
	}
}

// diskRefused notes that the spool's disk refused a write, logged once
// until a write succeeds again (diskAccepted).
func (b *Buffer) diskRefused(err error) {
	msg := err.Error()
	if b.diskError.Swap(&msg) == nil {
		b.log.Error("the spool's disk refuses writes; the replay records its progress in the database meanwhile", "error", err)
	}
}

func (b *Buffer) diskAccepted() {
	if b.diskError.Swap(nil) != nil {
		b.log.Info("the spool's disk takes writes again")
	}
}

func (b *Buffer) noteQuarantined(paths ...string) {
	b.warnMu.Lock()
	defer b.warnMu.Unlock()
	b.quarantine = append(b.quarantine, paths...)
}
