package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/queenside/queenside/protocol"
)

// RequireQueue returns ErrQueueNotFound for a queue never created, so that
// operations that would otherwise create it refuse instead. The role must
// hold right on the queue first (queenside.queue_exists): a queue it may
// not use is refused whether it exists or not.
func (s *Store) RequireQueue(ctx context.Context, queue, right string) error {
	var exists bool
	err := s.pool.QueryRow(ctx, "SELECT queenside.queue_exists($1, $2)", queue, right).Scan(&exists)
	if err != nil {
		return fmt.Errorf("%s: %w", queue, err)
	}
	if !exists {
		return fmt.Errorf("%w: %s", ErrQueueNotFound, queue)
	}
	return nil
}

// notFound is ErrQueueNotFound or ErrPartitionNotFound for queenside's
// error saying the queue or partition does not exist (undefined_object with
// the schema named, the queue in its table field and a partition in its
// column field), or nil for any other error.
func notFound(err error) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "42704" || pgErr.SchemaName != "queenside" {
		return nil
	}
	if pgErr.ColumnName != "" {
		return fmt.Errorf("%w: partition %q of %s", ErrPartitionNotFound, pgErr.ColumnName, pgErr.TableName)
	}
	return fmt.Errorf("%w: %s", ErrQueueNotFound, pgErr.TableName)
}

// Seek moves a group's cursors (creating the group on first use, like a
// pop). A named partition that does not exist is not found.
func (s *Store) Seek(ctx context.Context, a protocol.SeekArgs) (protocol.SeekResult, error) {
	res, err := s.seek(ctx, a)
	if isNoData(err) { // the group was deleted while it was sought
		s.groups.reset()
		res, err = s.seek(ctx, a)
	}
	return res, err
}

// seek is one call of queenside.seek_group, which checks manage on the
// queue or consume as the group, finds the queue, the partition and the
// group (making it), and moves the cursors.
func (s *Store) seek(ctx context.Context, a protocol.SeekArgs) (protocol.SeekResult, error) {
	res := protocol.SeekResult{Cursors: []protocol.CursorPosition{}}
	var at *time.Time
	if a.To == protocol.SeekTime {
		at = &a.At
	}
	rows, err := s.pool.Query(ctx, "SELECT o_partition, o_cursor FROM queenside.seek_group($1, $2, $3, $4, $5)",
		a.Queue, a.Group, a.Partition, a.To, at)
	if err == nil {
		res.Cursors, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (protocol.CursorPosition, error) {
			var c protocol.CursorPosition
			err := row.Scan(&c.Partition, &c.Cursor)
			return c, err
		})
	}
	if nf := notFound(err); nf != nil {
		return protocol.SeekResult{Cursors: []protocol.CursorPosition{}}, nf
	}
	if err != nil {
		return protocol.SeekResult{Cursors: []protocol.CursorPosition{}}, fmt.Errorf("seek: %w", err)
	}
	return res, nil
}
