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
		if err := s.queueExists(ctx, queue); err != nil {
			return res, err
		}
	}
	// The cursors are summed by group apart and joined to the groups: on
	// Citus a table read whole on every node (groups) may not be joined
	// outward to one spread over shards (cursors).
	rows, err := s.pool.Query(ctx, `
		SELECT q.name, g.name, coalesce(l.lag, 0)::bigint, coalesce(l.leased, 0)::integer, l.oldest
		  FROM queenside.groups g
		  JOIN queenside.queues q ON q.id = g.queue_id
		  LEFT JOIN (SELECT c.group_id, sum(greatest(p.next_offset - `+cursorPosition+`, 0)) AS lag,
		                    count(*) FILTER (WHERE c.lease_id IS NOT NULL AND c.lease_expires_at > now()) AS leased,
		                    min(c.head_at) FILTER (WHERE c.committed < p.next_offset) AS oldest
		               FROM queenside.cursors c
		               JOIN queenside.partitions p ON p.id = c.partition_id
		               JOIN queenside.groups g ON g.id = c.group_id
		               JOIN queenside.queues q ON q.id = g.queue_id
		              WHERE $1 = '' OR q.name = $1
		              GROUP BY c.group_id) l ON l.group_id = g.id
		 WHERE $1 = '' OR q.name = $1
		 ORDER BY q.name, g.name`, queue)
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
	return res, rows.Err()
}

// DeleteGroup removes a group and its cursors; its dead letters stay. A
// later pop or seek of the same name makes a new group, positioned by its
// subscription: in any sidecar, the SQL that uses a cached group id fails
// with no_data_found once the group is gone, and the id is looked up again.
func (s *Store) DeleteGroup(ctx context.Context, queue, group string) (bool, error) {
	var deleted bool
	err := s.pool.QueryRow(ctx, `
		WITH gone AS (
			DELETE FROM queenside.groups g USING queenside.queues q
			 WHERE g.queue_id = q.id AND q.name = $1 AND g.name = $2
			RETURNING g.id)
		SELECT count(*) > 0 FROM gone`, queue, group).Scan(&deleted)
	if err != nil {
		return false, fmt.Errorf("delete group %s/%q: %w", queue, group, err)
	}
	s.groups.reset()
	return deleted, nil
}
