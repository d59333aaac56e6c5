package schema

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Where each table goes on Citus (SCALING.md, "Where each table goes"):
// the tables every node reads whole, the ones spread over shards by
// partition id (co-located with partitions), and, left as they are, the
// coordinator's own (maintenance, schema_migrations, early_groups,
// spool_progress).
var (
	citusReference = []string{"queues", "groups", "partition_names", "queue_grants"}
	// CitusDistributed are the tables spread by partition id, partitions
	// (by its id) first; the Citus rules (schema/citusrules) are about
	// statements on them.
	CitusDistributed = []string{"partitions", "segments", "dedup", "dedup_marks", "cursors", "dead_letters", "orphan_hashes"}
)

// DefaultShardCount is the number of shards a distributed queenside takes
// unless told otherwise: a few per worker keeps the calls a push or a pop
// splits into few, and Citus can split shards later.
const DefaultShardCount = 8

// Querier runs one query: a connection, a pool or a transaction.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// IsDistributed tells whether the schema has been distributed over Citus
// (Distribute), as queenside.distributed() answers in the database: the
// statements that restrict their relations for Citus alone ask it too.
// The schema is migrated (to version 19 at least) before it is asked. The
// query is not prepared: a plan would keep the answer it folded.
func IsDistributed(ctx context.Context, conn Querier) (bool, error) {
	var distributed bool
	err := conn.QueryRow(ctx, "SELECT "+Name+".distributed()", pgx.QueryExecModeSimpleProtocol).Scan(&distributed)
	return distributed, err
}

// ErrNoCitus means Distribute was asked of a database without Citus.
var ErrNoCitus = errors.New("schema: the citus extension is not installed in this database")

// Distribute lays the migrated schema out over a Citus cluster from its
// coordinator: the reference tables first, which the distributed ones
// refer to, then partitions by id over shardCount shards and the rest
// co-located with it. Each step is its own transaction and one already
// done is skipped, so a run cut short is finished by running it again.
// Rows already there move to the shards with their table (the
// coordinator keeps no copy of them). The functions
// lose plan_cache_mode = force_generic_plan, which Citus cannot run
// (SCALING.md, section 4, R8); their other planner settings stay.
func Distribute(ctx context.Context, conn *pgx.Conn, shardCount int) error {
	if shardCount <= 0 {
		shardCount = DefaultShardCount
	}
	var citus bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')").Scan(&citus); err != nil {
		return fmt.Errorf("distribute: %w", err)
	}
	if !citus {
		return ErrNoCitus
	}
	// A table is done when it is what it is to be: Citus itself makes a
	// table with a foreign key to a reference table a local table in its
	// metadata (method n, replication s), which is not done yet.
	done := func(table string) (bool, error) {
		var n int
		err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_dist_partition WHERE logicalrelid = $1::regclass
			AND (partmethod = 'h' OR partmethod = 'n' AND repmodel = 't')`, Name+"."+table).Scan(&n)
		return n > 0, err
	}
	step := func(table, sql string, args ...any) error {
		if ok, err := done(table); err != nil || ok {
			return err
		}
		if _, err := conn.Exec(ctx, sql, args...); err != nil {
			return fmt.Errorf("distribute %s: %w%s", table, err, detail(err))
		}
		return nil
	}
	for _, t := range citusReference {
		if err := step(t, "SELECT create_reference_table($1::regclass)", Name+"."+t); err != nil {
			return err
		}
	}
	colocate := Name + "." + CitusDistributed[0]
	if err := step(CitusDistributed[0], "SELECT create_distributed_table($1::regclass, 'id', shard_count := $2)",
		colocate, shardCount); err != nil {
		return err
	}
	for _, t := range CitusDistributed[1:] {
		if err := step(t, "SELECT create_distributed_table($1::regclass, 'partition_id', colocate_with := $2)",
			Name+"."+t, colocate); err != nil {
			return err
		}
	}
	// Citus copies a table's rows to its shards and leaves them in the
	// coordinator's own relation too, where nothing reads them again.
	for _, t := range append(slices.Clone(CitusDistributed), citusReference...) {
		if _, err := conn.Exec(ctx, "SELECT truncate_local_data_after_distributing_table($1::regclass)", Name+"."+t); err != nil {
			return fmt.Errorf("distribute %s: drop the coordinator's copy of its rows: %w", t, err)
		}
	}
	rows, err := conn.Query(ctx, `
		SELECT p.oid::regprocedure::text FROM pg_proc p
		 WHERE p.pronamespace = $1::regnamespace AND 'plan_cache_mode=force_generic_plan' = ANY (p.proconfig)`, Name)
	if err != nil {
		return fmt.Errorf("distribute: functions: %w", err)
	}
	generic, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("distribute: functions: %w", err)
	}
	for _, f := range generic {
		if _, err := conn.Exec(ctx, "ALTER FUNCTION "+f+" RESET plan_cache_mode"); err != nil {
			return fmt.Errorf("distribute: %s: %w", f, err)
		}
	}
	return distributeFunctions(ctx, conn)
}

// RouteArgument names the first argument of a function a call of which
// Citus sends whole to the worker of one shard: a partition id of that
// shard, by which the call is routed (create_distributed_function's
// distribution argument, co-located with partitions).
const RouteArgument = "p_route"

// distributeFunctions makes every function of the schema one Citus keeps
// on every node, so that a call run on a worker finds the functions it
// calls there, and routes by RouteArgument the functions that take it.
// Each is skipped once done.
func distributeFunctions(ctx context.Context, conn *pgx.Conn) error {
	rows, err := conn.Query(ctx, `
		SELECT p.oid::regprocedure::text, coalesce(p.proargnames[1] = $2, false),
		       o.objid IS NOT NULL AND (o.distribution_argument_index IS NOT NULL) = coalesce(p.proargnames[1] = $2, false)
		  FROM pg_proc p
		  LEFT JOIN pg_catalog.pg_dist_object o ON o.classid = 'pg_proc'::regclass AND o.objid = p.oid
		 WHERE p.pronamespace = $1::regnamespace
		 ORDER BY 1`, Name, RouteArgument)
	if err != nil {
		return fmt.Errorf("distribute: functions: %w", err)
	}
	type function struct {
		signature    string
		routed, done bool
	}
	fs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (function, error) {
		var f function
		return f, r.Scan(&f.signature, &f.routed, &f.done)
	})
	if err != nil {
		return fmt.Errorf("distribute: functions: %w", err)
	}
	for _, f := range fs {
		if f.done {
			continue
		}
		sql, args := "SELECT create_distributed_function($1::regprocedure)", []any{f.signature}
		if f.routed {
			sql = "SELECT create_distributed_function($1::regprocedure, $2, colocate_with := $3)"
			args = append(args, RouteArgument, Name+"."+CitusDistributed[0])
		}
		if _, err := conn.Exec(ctx, sql, args...); err != nil {
			return fmt.Errorf("distribute %s: %w%s", f.signature, err, detail(err))
		}
	}
	return nil
}

// detail gives a server error's detail and hint, where Citus says why.
func detail(err error) string {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Detail+pgErr.Hint == "" {
		return ""
	}
	return fmt.Sprintf(" (%s %s)", pgErr.Detail, pgErr.Hint)
}
