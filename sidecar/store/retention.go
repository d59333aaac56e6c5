package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// The janitor's database side: its advisory lock, and the retention
// functions of schema/migrations/0003_retention.sql, one bounded batch per
// call and per transaction.

// retentionLockKey is the advisory lock that lets one janitor at a time
// work on a database ("qs-ret" in ASCII). Distinct from migrations' key.
const retentionLockKey int64 = 0x71732d726574

// Settings of the janitor's connection while it holds the lock. A batch is
// bounded, so a statement running longer is stuck and better cancelled;
// a dedup row locked by a push re-using an old transaction id is waited
// for briefly, then left to the next round.
const (
	retentionStatementTimeout = 30 * time.Second
	retentionLockTimeout      = 2 * time.Second
)

// RetentionSession is a connection holding the janitors' advisory lock.
type RetentionSession struct {
	conn *pgx.Conn
	// limit bounds a batch's call here as the statement timeout bounds it
	// on the server, plus the database timeout for the answer to come
	// back: a server that stops answering does not hold the round.
	limit time.Duration
}

// bound bounds one call of the session.
func (r *RetentionSession) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, r.limit)
}

// Budget bounds one batch: about so many segments or messages (at least
// one segment of a partition with any due).
type Budget struct {
	Segments int
	Messages int
}

// ExpireBatch is what one call of expire_segments deleted. Next is the
// partition to go on from; nil when every partition was seen.
type ExpireBatch struct {
	Next     *int64
	Segments int64
	Messages int64
	Orphaned int64 // rows keeping the hashes of deleted segments until they are due: one a partition
}

// DedupBatch is what one call of purge_dedup did: the segments and
// messages it read and the dedup rows it deleted.
type DedupBatch struct {
	Next     *int64
	Segments int64
	Messages int64
	Hashes   int64
}

// OrphanBatch is what one call of purge_orphan_hashes did.
type OrphanBatch struct {
	Segments int64
	Hashes   int64
	More     bool
}

// LockRetention takes the janitors' advisory lock, without waiting, on a
// session connection of its own (a lock of the session: never through a
// transaction pooler). ok is false, with no session, when another janitor
// holds it.
func (s *Store) LockRetention(ctx context.Context) (_ *RetentionSession, ok bool, err error) {
	ctx, cancel := s.Bound(ctx)
	defer cancel()
	conn, err := s.connectSession(ctx)
	if err != nil {
		return nil, false, fmt.Errorf("retention: %w", err)
	}
	var locked bool
	if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", retentionLockKey).Scan(&locked); err != nil {
		closeQuietly(conn)
		return nil, false, fmt.Errorf("retention: take the lock: %w", err)
	}
	if !locked {
		closeQuietly(conn)
		return nil, false, nil
	}
	r := &RetentionSession{conn: conn, limit: retentionStatementTimeout + s.timeout}
	_, err = conn.Exec(ctx, fmt.Sprintf("SET statement_timeout = %d; SET lock_timeout = %d",
		retentionStatementTimeout.Milliseconds(), retentionLockTimeout.Milliseconds()))
	if err != nil {
		r.Close()
		return nil, false, fmt.Errorf("retention: set timeouts: %w", err)
	}
	return r, true, nil
}

// Close gives the lock back and ends the session. The unlock comes first:
// a closed session's backend lets go of its locks only as it exits, a
// moment after the close, and the next round (this sidecar's or another's)
// must find the lock free once Close has returned.
func (r *RetentionSession) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	r.conn.Exec(ctx, "SELECT pg_advisory_unlock($1)", retentionLockKey) //nolint:errcheck // the session's end frees it anyway
	closeQuietly(r.conn)
}

func closeQuietly(conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	conn.Close(ctx) //nolint:errcheck // the server ends the session either way
	// A query cut short by its context left pgx sending a cancel request
	// on a connection of its own; it is let finish, so that a process
	// exiting next does not drop it half sent (which PgBouncer 1.18
	// answers by exiting).
	select {
	case <-conn.PgConn().CleanupDone():
	case <-ctx.Done():
	}
}

// ExpireSegments deletes the segments the retention rules allow, from
// partition from on, within b.
func (r *RetentionSession) ExpireSegments(ctx context.Context, from int64, b Budget) (ExpireBatch, error) {
	ctx, cancel := r.bound(ctx)
	defer cancel()
	var out ExpireBatch
	err := r.conn.QueryRow(ctx, "SELECT next_from, segments, messages, orphaned FROM queenside.expire_segments($1, $2, $3)",
		from, b.Segments, b.Messages).Scan(&out.Next, &out.Segments, &out.Messages, &out.Orphaned)
	if err != nil {
		return out, fmt.Errorf("expire segments: %w", err)
	}
	return out, nil
}

// PurgeDedup deletes the due dedup rows of retained messages, from
// partition from on, within b.
func (r *RetentionSession) PurgeDedup(ctx context.Context, from int64, b Budget) (DedupBatch, error) {
	ctx, cancel := r.bound(ctx)
	defer cancel()
	var out DedupBatch
	err := r.conn.QueryRow(ctx, "SELECT next_from, segments, messages, hashes FROM queenside.purge_dedup($1, $2, $3)",
		from, b.Segments, b.Messages).Scan(&out.Next, &out.Segments, &out.Messages, &out.Hashes)
	if err != nil {
		return out, fmt.Errorf("purge dedup: %w", err)
	}
	return out, nil
}

// PurgeOrphanHashes deletes the due dedup rows of deleted messages, within b.
func (r *RetentionSession) PurgeOrphanHashes(ctx context.Context, b Budget) (OrphanBatch, error) {
	ctx, cancel := r.bound(ctx)
	defer cancel()
	var out OrphanBatch
	err := r.conn.QueryRow(ctx, "SELECT segments, hashes, more FROM queenside.purge_orphan_hashes($1, $2)",
		b.Segments, b.Messages).Scan(&out.Segments, &out.Hashes, &out.More)
	if err != nil {
		return out, fmt.Errorf("purge orphan hashes: %w", err)
	}
	return out, nil
}
