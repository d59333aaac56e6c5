package store

import (
	"context"
	"fmt"
)

// QueueCounters is one queue's counters and its groups' lag, as the
// dashboard's history samples them every few seconds: Pushed and Consumed
// as in QueueSummary, Lag as in GroupSummary.
type QueueCounters struct {
	Queue    string
	Pushed   int64
	Consumed int64
	Groups   []GroupLag
}

// GroupLag is one group's lag over every partition of its queue.
type GroupLag struct {
	Group string
	Lag   int64
}

// QueueCounters reads the counters of every queue the role may read and
// every group's lag in one statement (queenside.queue_counters): one pass
// over partitions and one over cursors, aggregated by queue and by group
// apart (as queue_summaries, for Citus) and joined to the names after. It
// reads no segment but for a cursor not positioned yet, so its cost
// follows partitions and cursors, never messages.
func (s *Store) QueueCounters(ctx context.Context) (out []QueueCounters, err error) {
	rows, err := s.pool.Query(ctx, "SELECT o_queue, o_pushed, o_group, o_consumed, o_lag FROM queenside.queue_counters()")
	if err != nil {
		return nil, fmt.Errorf("queue counters: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var queue string
		var group *string
		var pushed, consumed, lag int64
		if err := rows.Scan(&queue, &pushed, &group, &consumed, &lag); err != nil {
			return nil, fmt.Errorf("queue counters: %w", err)
		}
		if len(out) == 0 || out[len(out)-1].Queue != queue {
			out = append(out, QueueCounters{Queue: queue, Pushed: pushed})
		}
		q := &out[len(out)-1]
		if group != nil {
			q.Consumed += consumed
			q.Groups = append(q.Groups, GroupLag{Group: *group, Lag: lag})
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("queue counters: %w", err)
	}
	return out, nil
}
