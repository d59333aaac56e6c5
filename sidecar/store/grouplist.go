package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/queenside/queenside/protocol"
)

// ErrPartitionNotFound is returned for a partition that was never created.
var ErrPartitionNotFound = errors.New("store: partition not found")

// Groups lists the groups of one queue ("" for every queue) with their lag:
// the messages their cursors have not passed (a cursor not positioned yet
// counts from where its subscription starts), the commit time of the oldest
// of them, and the partitions they hold a live lease on.
func (s *Store) Groups(ctx context.Context, queue string) (protocol.GroupsResult, error) {
	res := protocol.GroupsResult{Groups: []protocol.GroupInfo{}}
	if queue != "" {
		if err := s.RequireQueue(ctx, queue, "read"); err != nil {
			return res, err
		}
	}
	// queenside.list_groups checks read on the queue, or lists the queues
	// the role may read for "".
	rows, err := s.pool.Query(ctx, `SELECT * FROM queenside.list_groups($1)`, queue)
	if err != nil {
		return res, fmt.Errorf("groups: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var g protocol.GroupInfo
		if err := rows.Scan(&g.Queue, &g.Group, &g.Lag, &g.LeasedPartitions, &g.OldestUnackedAt); err != nil {
			return res, fmt.Errorf("groups: %w", err)
		}
		res.Groups = append(res.Groups, g)
	}
	if err := rows.Err(); err != nil {
		return res, fmt.Errorf("groups: %w", err)
	}
	return res, nil
}

// DeleteGroup removes a group and its cursors; its dead letters stay. A
// later pop or seek of the same name makes a new group, positioned by its
// subscription: in any sidecar, the SQL that uses a cached group id fails
// with no_data_found once the group is gone, and the id is looked up again.
func (s *Store) DeleteGroup(ctx context.Context, queue, group string) (bool, error) {
	var deleted bool
	err := s.pool.QueryRow(ctx, `SELECT queenside.delete_group($1, $2)`, queue, group).Scan(&deleted) // manage
	if err != nil {
		return false, fmt.Errorf("delete group %s/%q: %w", queue, group, err)
	}
	s.groups.reset()
	return deleted, nil
}
