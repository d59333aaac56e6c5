package verify

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/queenside/queenside/sidecar/pgserver"
)

// lockRows are partition rows of queue 1 for the lock probe, and what they
// are in words, for the report.
type lockRows struct {
	what string
	// groups are locked by one statement each: every row at once, or on
	// Citus, where a statement that locks rows must stay on one shard, a
	// group per shard (shards[i] is groups[i]'s).
	groups [][]int64
	shards []int64
	// worker, when set, is the Citus worker the probe locks the rows on,
	// in its shards' tables and on a connection of its own to it: through
	// the coordinator, each attempt the statement timeout ends costs a new
	// connection to the worker (Citus closes one whose statement was
	// cancelled), and a worker slowed by the replays after a stall was
	// then probed more slowly than its locks were freed.
	worker *pgserver.Server
}

// table is the table group i's rows are locked in.
func (r lockRows) table(i int) string {
	if r.worker != nil {
		return fmt.Sprintf("queenside.partitions_%d", r.shards[i])
	}
	return "queenside.partitions"
}

func (r lockRows) count() int {
	n := 0
	for _, g := range r.groups {
		n += len(g)
	}
	return n
}

// producerRows are the partitions of queue 1 that sidecar i's producer
// pushes to (the loader gives partition p to producer p mod sidecars).
func (in *injector) producerRows(ctx context.Context, i int) (lockRows, error) {
	n := len(in.cl.sidecars)
	rows, err := in.partitionRows(ctx, func(p int) bool { return p%n == i })
	rows.what = fmt.Sprintf("the %d partitions of queue 1 that %s's producer pushes to", rows.count(), in.cl.sidecars[i])
	return rows, err
}

// allRows are every partition of queue 1: a stalled PostgreSQL stalls
// every producer.
func (in *injector) allRows(ctx context.Context) (lockRows, error) {
	rows, err := in.partitionRows(ctx, func(int) bool { return true })
	rows.what = fmt.Sprintf("all %d partitions of queue 1", rows.count())
	return rows, err
}

// workerRows are the partitions of queue 1 whose shards are on Citus
// worker w, where a frozen worker holds their locks.
func (in *injector) workerRows(ctx context.Context, w *pgserver.Server) (lockRows, error) {
	all, err := in.allRows(ctx)
	if err != nil {
		return all, err
	}
	var onWorker []int64
	err = in.admin(ctx, func(conn *pgx.Conn) error {
		rows, _ := conn.Query(ctx, "SELECT shardid FROM pg_dist_shard_placement WHERE nodename = $1 AND nodeport = $2", w.SocketDir(), w.Port())
		var cerr error
		onWorker, cerr = pgx.CollectRows(rows, pgx.RowTo[int64])
		return cerr
	})
	out := lockRows{worker: w}
	for i, g := range all.groups {
		if slices.Contains(onWorker, all.shards[i]) {
			out.groups, out.shards = append(out.groups, g), append(out.shards, all.shards[i])
		}
	}
	out.what = fmt.Sprintf("the %d partitions of queue 1 on the worker's shards", out.count())
	if err == nil && out.count() == 0 {
		err = fmt.Errorf("no partition of queue 1 on %s's shards", w.SocketDir())
	}
	return out, err
}

// partitionRows reads the ids of queue 1's partitions whose index keep
// takes, grouped as lockRows says.
func (in *injector) partitionRows(ctx context.Context, keep func(p int) bool) (lockRows, error) {
	var out lockRows
	names := map[string]bool{}
	for p := range in.cfg.Partitions {
		if keep(p) {
			names[partitionName(p)] = true
		}
	}
	err := in.admin(ctx, func(conn *pgx.Conn) error {
		rows, _ := conn.Query(ctx, `SELECT p.name, p.id FROM queenside.partitions p JOIN queenside.queues q ON q.id = p.queue_id
			WHERE q.name = $1 ORDER BY p.id`, in.loader.queue)
		var ids []int64
		var name string
		var id int64
		if _, err := pgx.ForEachRow(rows, []any{&name, &id}, func() error {
			if names[name] {
				ids = append(ids, id)
			}
			return nil
		}); err != nil {
			return err
		}
		if len(ids) == 0 {
			return fmt.Errorf("queue %s has none of the partitions to probe yet", in.loader.queue)
		}
		if in.cl.citus == nil {
			out.groups = [][]int64{ids}
			return nil
		}
		return out.splitByShard(ctx, conn, ids)
	})
	return out, err
}

// splitByShard groups ids by the shard of queenside.partitions each is in.
func (r *lockRows) splitByShard(ctx context.Context, conn *pgx.Conn, ids []int64) error {
	rows, _ := conn.Query(ctx, `SELECT i, get_shard_id_for_distribution_column('queenside.partitions', i)
		FROM unnest($1::bigint[]) AS i ORDER BY 2, 1`, ids)
	var id, shard int64
	_, err := pgx.ForEachRow(rows, []any{&id, &shard}, func() error {
		if n := len(r.shards); n == 0 || r.shards[n-1] != shard {
			r.shards, r.groups = append(r.shards, shard), append(r.groups, nil)
		}
		r.groups[len(r.groups)-1] = append(r.groups[len(r.groups)-1], id)
		return nil
	})
	return err
}

// admin runs f on a connection of the verifier's own, over the Unix
// socket.
func (in *injector) admin(ctx context.Context, f func(*pgx.Conn) error) error {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(cctx, in.cl.dbURL)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	return f(conn)
}
