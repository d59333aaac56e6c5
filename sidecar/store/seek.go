package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/queenside/queenside/protocol"
)

// queueExists returns ErrQueueNotFound for a queue never created, so that
// operations that would otherwise create it refuse instead.
func (s *Store) queueExists(ctx context.Context, queue string) error {
	var id int64
	err := s.pool.QueryRow(ctx, "SELECT id FROM queenside.queues WHERE name = $1", queue).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%w: %s", ErrQueueNotFound, queue)
	}
	return err
}

// Seek moves a group's cursors (creating the group on first use, like a
// pop). A named partition that does not exist is not found.
func (s *Store) Seek(ctx context.Context, a protocol.SeekArgs) (protocol.SeekResult, error) {
	res, err := s.seek(ctx, a)
	if isNoData(err) { // the cached group was deleted
		s.groups.reset()
		res, err = s.seek(ctx, a)
	}
	return res, err
}

func (s *Store) seek(ctx context.Context, a protocol.SeekArgs) (protocol.SeekResult, error) {
	res := protocol.SeekResult{Cursors: []protocol.CursorPosition{}}
	if err := s.queueExists(ctx, a.Queue); err != nil {
		return res, err
	}
	ids, err := s.groupID(ctx, groupKey{a.Queue, a.Group}, protocol.SubscribeAll, nil)
	if err != nil {
		return res, err
	}
	var partition *int64
	if a.Partition != nil {
		var id int64
		err := s.pool.QueryRow(ctx, "SELECT id FROM queenside.partition_names WHERE queue_id = $1 AND name = $2",
			ids.queue, *a.Partition).Scan(&id)
		if errors.Is(err, pgx.ErrNoRows) {
			return res, fmt.Errorf("%w: partition %q of %s", ErrPartitionNotFound, *a.Partition, a.Queue)
		}
		if err != nil {
			return res, fmt.Errorf("seek: %w", err)
		}
		partition = &id
	}
	var at *time.Time
	if a.To == protocol.SeekTime {
		at = &a.At
	}
	rows, err := s.pool.Query(ctx, "SELECT partition_name, cursor_offset FROM queenside.seek($1, $2, $3, $4)",
		ids.group, partition, a.To, at)
	if err != nil {
		return res, fmt.Errorf("seek: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var c protocol.CursorPosition
		if err := rows.Scan(&c.Partition, &c.Cursor); err != nil {
			return res, fmt.Errorf("seek: %w", err)
		}
		res.Cursors = append(res.Cursors, c)
	}
	if err := rows.Err(); err != nil {
		return res, fmt.Errorf("seek: %w", err)
	}
	return res, nil
}
