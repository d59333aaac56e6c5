package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
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

// QueueCounters reads every queue's counters and every group's lag in one
// statement: one pass over partitions and one over cursors, aggregated by
// queue and by group apart (as queueTotalsFrom, for Citus) and joined to
// the names after. It reads no segment but for a cursor not positioned
// yet, so its cost follows partitions and cursors, never messages.
func (s *Store) QueueCounters(ctx context.Context) (out []QueueCounters, err error) {
	err = s.inTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		// The planner prices the segment probe of cursorPosition for every
		// cursor, though positioned cursors never run it: with 100,000
		// cursors that price calls in JIT, which takes 0.2 to 1 s to
		// compile what runs in 60 ms.
		if _, err := tx.Exec(ctx, "SET LOCAL jit = off"); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, queueCountersSQL)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var queue string
			var group *string
			var pushed, consumed, lag int64
			if err := rows.Scan(&queue, &pushed, &group, &consumed, &lag); err != nil {
				return err
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
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("queue counters: %w", err)
	}
	return out, nil
}

const queueCountersSQL = `
	SELECT q.name, coalesce(pt.pushed, 0), g.name, coalesce(ct.consumed, 0), coalesce(ct.lag, 0)
	  FROM queenside.queues q
	  LEFT JOIN (SELECT p.queue_id, sum(p.next_offset)::bigint AS pushed
	               FROM queenside.partitions p GROUP BY p.queue_id) pt ON pt.queue_id = q.id
	  LEFT JOIN queenside.groups g ON g.queue_id = q.id
	  LEFT JOIN (SELECT c.group_id, sum(coalesce(c.committed, 0))::bigint AS consumed,
	                    sum(greatest(p.next_offset - ` + cursorPosition + `, 0))::bigint AS lag
	               FROM queenside.cursors c
	               JOIN queenside.partitions p ON p.id = c.partition_id
	               JOIN queenside.groups g ON g.id = c.group_id
	              GROUP BY c.group_id) ct ON ct.group_id = g.id
	 ORDER BY q.name, g.name`
