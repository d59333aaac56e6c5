package store

import (
	"context"
	"fmt"

	"github.com/google/uuid"
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

// A mark only moves forward (queenside.mark_replayed).
const markReplaySQL = `SELECT queenside.mark_replayed($1, $2)`

// ReplayedTo is how far the segment is replayed, as the database recorded
// it: 0 when nothing of it is recorded.
func (s *Store) ReplayedTo(ctx context.Context, segment uuid.UUID) (int64, error) {
	var end int64
	err := s.pool.QueryRow(ctx, `SELECT queenside.replayed_to($1)`, segment).Scan(&end)
	if err != nil {
		return 0, TimedOut(ctx, fmt.Errorf("read the spool's replay progress: %w", err))
	}
	return end, nil
}

// ForgetReplayed removes the mark of a retired segment, and any mark not
// updated for 30 days (queenside.forget_replayed).
func (s *Store) ForgetReplayed(ctx context.Context, segment uuid.UUID) error {
	_, err := s.pool.Exec(ctx, `SELECT queenside.forget_replayed($1)`, segment)
	if err != nil {
		return TimedOut(ctx, fmt.Errorf("forget the spool's replay progress: %w", err))
	}
	return nil
}
