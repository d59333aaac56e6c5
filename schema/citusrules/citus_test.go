package citusrules

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/queenside/queenside/sidecar/citustest"
)

// citusTables are small tables shaped as queenside's, laid out as they are
// to be on Citus: partitions, cursors and segments distributed by
// partition id and co-located, queues and groups reference tables.
const citusTables = `
CREATE SCHEMA queenside;
CREATE TABLE queenside.queues (id bigint PRIMARY KEY, name text NOT NULL, lease_seconds int NOT NULL);
CREATE TABLE queenside.groups (id bigint PRIMARY KEY, queue_id bigint NOT NULL, start_at timestamptz);
CREATE TABLE queenside.partitions (id bigint PRIMARY KEY, queue_id bigint NOT NULL, next_offset bigint NOT NULL);
CREATE TABLE queenside.cursors (partition_id bigint, group_id bigint, committed bigint, head_at timestamptz,
                                lease_expires_at timestamptz, PRIMARY KEY (partition_id, group_id));
CREATE TABLE queenside.segments (partition_id bigint, last_offset bigint, base_offset bigint, committed_at timestamptz,
                                 PRIMARY KEY (partition_id, last_offset));
SELECT create_reference_table('queenside.queues');
SELECT create_reference_table('queenside.groups');
SELECT create_distributed_table('queenside.partitions', 'id', shard_count := 4);
SELECT create_distributed_table('queenside.cursors', 'partition_id', colocate_with := 'queenside.partitions');
SELECT create_distributed_table('queenside.segments', 'partition_id', colocate_with := 'queenside.partitions');
INSERT INTO queenside.queues VALUES (1, 'q', 60);
INSERT INTO queenside.groups VALUES (1, 1, NULL);
INSERT INTO queenside.partitions SELECT i, 1, 1 FROM generate_series(1, 8) i;
INSERT INTO queenside.cursors SELECT i, 1, 0, now(), NULL FROM generate_series(1, 8) i;
INSERT INTO queenside.segments SELECT i, 0, 0, now() FROM generate_series(1, 8) i;
CREATE FUNCTION queenside.cursor_head(p_partition bigint, p_offset bigint) RETURNS timestamptz
  LANGUAGE plpgsql VOLATILE AS $$
BEGIN
  RETURN (SELECT s.committed_at FROM queenside.segments s
           WHERE s.partition_id = p_partition AND s.last_offset >= p_offset ORDER BY s.last_offset LIMIT 1);
END $$;
CREATE FUNCTION queenside.first_offset_at(p_partition bigint, p_at timestamptz) RETURNS bigint
  LANGUAGE plpgsql STABLE AS $$
BEGIN
  RETURN (SELECT s.base_offset FROM queenside.segments s
           WHERE s.partition_id = p_partition ORDER BY s.last_offset LIMIT 1);
END $$;
`

// literals stand for the variables the cases' statements use. The arrays
// hold one id, so that a statement restricted by them is on one shard.
var literals = map[string]string{
	"p_ids":       "ARRAY[1]::bigint[]",
	"p_pids":      "ARRAY[1]::bigint[]",
	"p_counts":    "ARRAY[1]::int[]",
	"p_group":     "1::bigint",
	"p_partition": "1::bigint",
	"v_cursor":    "0::bigint",
	"v_done":      "false",
	"v_head":      "'2026-01-01 00:00:00+00'::timestamptz",
	"v_now":       "'2026-01-01 00:00:00+00'::timestamptz",
	"r.pid":       "1::bigint",
}

var variable = regexp.MustCompile(`\b[pv]_[a-z]+\b|\br\.pid\b`)

func withLiterals(t *testing.T, stmt string) string {
	return variable.ReplaceAllStringFunc(stmt, func(v string) string {
		l, ok := literals[v]
		if !ok {
			t.Fatalf("no literal for %s", v)
		}
		return l
	})
}

// onCitus is what Citus does with a statement that breaks each rule: the
// error it gives, or, for the rules it does not refuse, what its plan
// shows: "tasks", more than one task; "subplan", a distributed subplan run
// before the query.
var onCitus = map[Rule]string{
	WritePruned:         "tasks",
	LockOneShard:        "could not run distributed query with FOR UPDATE/SHARE commands",
	NoVolatileInWrite:   "functions used in UPDATE queries on distributed tables must not be VOLATILE",
	NoStableOfColumn:    "STABLE functions used in UPDATE queries cannot be called with column references",
	NoMutableInCase:     "non-IMMUTABLE functions are not allowed in", // in CASE or COALESCE statements, in the RETURNING clause
	NoNestedQuery:       "cannot execute a distributed query from a query on a shard",
	NoModifyingCTE:      "subplan",
	NoNodeEffects:       "", // not an error: checked on a cluster by the wake-up tests
	NoQueryIntoElement:  `syntax error at or near ":="`,
	NoSQLFunction:       "parameters in SQL functions, which is not supported in Citus",
	NoForcedGenericPlan: "could not create distributed plan",
}

var taskCount = regexp.MustCompile(`Task Count: (\d+)`)

// plan gives a statement's task counts, outermost first, and whether its
// distributed plan has subplans.
func plan(t *testing.T, conn *pgx.Conn, stmt string) (counts string, subplans bool) {
	t.Helper()
	tx, err := conn.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background()) //nolint:errcheck
	rows, err := tx.Query(context.Background(), "EXPLAIN "+stmt)
	if err != nil {
		t.Fatalf("EXPLAIN %s: %v", stmt, err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("EXPLAIN %s: %v", stmt, err)
	}
	var cs []string
	for _, l := range lines {
		if m := taskCount.FindStringSubmatch(l); m != nil {
			cs = append(cs, m[1])
		}
		subplans = subplans || strings.Contains(l, "Distributed Subplan")
	}
	return strings.Join(cs, ","), subplans
}

// run runs stmt in a transaction rolled back after. A server's error
// comes back with its detail and hint, where Citus says the most.
func run(conn *pgx.Conn, stmt string) error {
	tx, err := conn.Begin(context.Background())
	if err != nil {
		return err
	}
	defer tx.Rollback(context.Background()) //nolint:errcheck
	_, err = tx.Exec(context.Background(), stmt)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return fmt.Errorf("%w (detail: %s; hint: %s)", err, pgErr.Detail, pgErr.Hint)
	}
	return err
}

// TestTheRulesAreCitus runs each case's broken and kept statement on a
// Citus cluster: the broken one is refused with the error the rule names
// (or planned on more than one shard), the kept one runs on one.
func TestTheRulesAreCitus(t *testing.T) {
	cluster := citustest.Start(t, 2)
	ctx := context.Background()
	conn := cluster.Connect(t)
	if _, err := conn.Exec(ctx, citusTables); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, schemaFunction(t, "distributed")); err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		want := onCitus[c.rule]
		if want == "" {
			continue
		}
		broken, kept := withLiterals(t, c.broken), withLiterals(t, c.kept)
		switch want {
		case "tasks", "subplan":
			n, sub := plan(t, conn, broken)
			if want == "tasks" && (n == "1" || n == "") || want == "subplan" && !sub {
				t.Errorf("%s: the broken form is planned as tasks %q, subplans %v:\n    %s", c.rule, n, sub, broken)
			}
			if n, sub := plan(t, conn, kept); n != "1" || sub {
				t.Errorf("%s: the kept form is planned as tasks %q, subplans %v; want one task:\n    %s", c.rule, n, sub, kept)
			}
		default:
			if err := run(conn, broken); err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("%s: the broken form gave %v, want %q:\n    %s", c.rule, err, want, broken)
			}
		}
		if err := run(conn, kept); err != nil {
			t.Errorf("%s: the kept form failed: %v\n    %s", c.rule, err, kept)
		}
	}
	for _, c := range functionCases {
		want := onCitus[c.rule]
		if want == "" {
			continue
		}
		if _, err := conn.Exec(ctx, c.def); err != nil {
			t.Fatalf("%s: %v", c.rule, err)
		}
		if err := run(conn, "DO $$ BEGIN PERFORM "+strings.TrimPrefix(c.call, "SELECT ")+"; END $$"); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %s gave %v, want %q", c.rule, c.call, err, want)
		}
	}
	if _, err := conn.Exec(ctx, keptFunction); err != nil {
		t.Fatal(err)
	}
	if err := run(conn, "DO $$ BEGIN PERFORM "+strings.TrimPrefix(keptCall, "SELECT ")+"; END $$"); err != nil {
		t.Errorf("the kept function failed: %v", err)
	}
}

// schemaFunction gives the definition of a function of queenside's schema
// as schema/current.sql holds it.
func schemaFunction(t *testing.T, name string) string {
	t.Helper()
	text, err := os.ReadFile("../current.sql")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range functionDefinitions(string(text)) {
		if d.name == name {
			return strings.TrimSuffix(strings.TrimSpace(d.text), ";")
		}
	}
	t.Fatalf("current.sql has no function %s", name)
	return ""
}
