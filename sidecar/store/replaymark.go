package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// ReplayMark is how far a spool segment is replayed: every record of the
// segment ending at or before End is in the database. PushReplay records
// it in the transaction that stores the batch, so it is true exactly when
// the batch is stored, whatever fails after the commit (the spool's own
// note of it on a full disk, the process). Segment is the segment's spool
// identity, which goes with its file to another sidecar.
type ReplayMark struct {
	Segment uuid.UUID
	End     int64
}

// A mark only moves forward: a replay that read an older one and stored
// nothing new must not take it back.
const markReplaySQL = `INSERT INTO queenside.spool_progress (segment, replayed_to) VALUES ($1, $2)
ON CONFLICT (segment) DO UPDATE
SET replayed_to = greatest(spool_progress.replayed_to, excluded.replayed_to), updated_at = now()`

// ReplayedTo is how far the segment is replayed, as the database recorded
// it: 0 when nothing of it is recorded.
func (s *Store) ReplayedTo(ctx context.Context, segment uuid.UUID) (int64, error) {
	var end int64
	err := s.pool.QueryRow(ctx, `SELECT replayed_to FROM queenside.spool_progress WHERE segment = $1`, segment).Scan(&end)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, TimedOut(ctx, fmt.Errorf("read the spool's replay progress: %w", err))
	}
	return end, nil
}

// staleReplayMarks is how long a mark no sidecar updated is kept: a
// segment left half replayed that long belonged to a pod whose volume is
// gone, or its sidecar would have gone on with it.
const staleReplayMarks = "30 days"

// ForgetReplayed removes the mark of a retired segment, and any mark not
// updated for staleReplayMarks.
func (s *Store) ForgetReplayed(ctx context.Context, segment uuid.UUID) error {
	_, err := s.pool.Exec(ctx, `DELETE FROM queenside.spool_progress
		WHERE segment = $1 OR updated_at < now() - interval '`+staleReplayMarks+`'`, segment)
	if err != nil {
		return TimedOut(ctx, fmt.Errorf("forget the spool's replay progress: %w", err))
	}
	return nil
}
