package citusrules

import (
	"os"
	"path/filepath"
	"testing"
)

// Each case is a statement that breaks one rule and its form that keeps it.
var cases = []struct {
	rule         Rule
	broken, kept string
}{
	{WritePruned,
		`UPDATE queenside.partitions p SET next_offset = p.next_offset + c.n FROM unnest(p_ids, p_counts) c (id, n) WHERE p.id = c.id`,
		`UPDATE queenside.partitions p SET next_offset = p.next_offset + 1 WHERE p.id = ANY (p_ids)`},
	{WritePruned,
		// The restriction kept for Citus alone beside the look-up by key:
		// queenside.distributed() folds to true on Citus, and the
		// restriction prunes as it does alone.
		`UPDATE queenside.partitions p SET next_offset = p.next_offset + c.n FROM unnest(p_ids, p_counts) c (id, n) WHERE p.id = c.id`,
		`UPDATE queenside.partitions p SET next_offset = p.next_offset + c.n FROM unnest(p_ids, p_counts) c (id, n)
		  WHERE p.id = c.id AND (NOT queenside.distributed() OR p.id = ANY (p_ids))`},
	{WritePruned,
		// A join to another relation's partition id prunes nothing (an
		// = ANY is not carried over to the relation joined); a record's
		// field (a PL/pgSQL variable) does.
		`UPDATE queenside.cursors cu SET head_at = v_head FROM queenside.partitions p
		  WHERE cu.partition_id = p.id AND p.id = ANY (p_pids)`,
		`UPDATE queenside.cursors cu SET head_at = v_head WHERE cu.partition_id = r.pid`},
	{LockOneShard,
		`SELECT cu.partition_id FROM queenside.cursors cu JOIN queenside.partitions p ON p.id = cu.partition_id
		  WHERE cu.group_id = p_group ORDER BY cu.head_at LIMIT 10 FOR UPDATE OF cu SKIP LOCKED`,
		`SELECT cu.partition_id FROM queenside.cursors cu JOIN queenside.partitions p ON p.id = cu.partition_id
		  WHERE cu.group_id = p_group AND cu.partition_id = ANY (p_pids) AND p.id = ANY (p_pids)
		  ORDER BY cu.head_at LIMIT 10 FOR UPDATE OF cu SKIP LOCKED`},
	{NoVolatileInWrite,
		`UPDATE queenside.cursors cu SET head_at = queenside.cursor_head(p_partition, v_cursor) WHERE cu.partition_id = p_partition`,
		`UPDATE queenside.cursors cu SET head_at = v_head WHERE cu.partition_id = p_partition`},
	{NoStableOfColumn,
		`UPDATE queenside.cursors c SET lease_expires_at = now() + make_interval(secs => q.lease_seconds)
		   FROM queenside.queues q WHERE c.partition_id = p_partition`,
		// The interval read by a subquery: no column of the statement's.
		`UPDATE queenside.cursors c
		    SET lease_expires_at = greatest(c.lease_expires_at,
		                                    now() + make_interval(secs => (SELECT q.lease_seconds FROM queenside.queues q WHERE q.id = 1)))
		  WHERE c.partition_id = p_partition`},
	{NoMutableInCase,
		`UPDATE queenside.cursors cu SET lease_expires_at = CASE WHEN cu.committed > v_cursor THEN NULL ELSE now() END WHERE cu.partition_id = p_partition`,
		`UPDATE queenside.cursors cu SET lease_expires_at = CASE WHEN cu.committed > v_cursor THEN NULL ELSE v_now END WHERE cu.partition_id = p_partition`},
	{NoMutableInCase,
		`UPDATE queenside.cursors cu SET head_at = v_head WHERE cu.partition_id = p_partition RETURNING cu.lease_expires_at - now()`,
		`UPDATE queenside.cursors cu SET head_at = v_head WHERE cu.partition_id = p_partition RETURNING cu.lease_expires_at`},
	{NoNestedQuery,
		`SELECT p.id, queenside.first_offset_at(p.id, g.start_at) FROM queenside.partitions p, queenside.groups g WHERE p.id = p_partition`,
		`SELECT p.id, (SELECT s.base_offset FROM queenside.segments s WHERE s.partition_id = p_partition ORDER BY s.last_offset LIMIT 1)
		   FROM queenside.partitions p WHERE p.id = p_partition`},
	{NoModifyingCTE,
		`WITH added AS (INSERT INTO queenside.segments (partition_id, last_offset, base_offset, committed_at)
		                VALUES (p_partition, 5, 5, v_now) RETURNING partition_id)
		 SELECT count(*) FROM added`,
		`INSERT INTO queenside.segments (partition_id, last_offset, base_offset, committed_at) VALUES (p_partition, 5, 5, v_now)`},
	{NoModifyingCTE,
		`WITH moved AS (UPDATE queenside.partitions p SET next_offset = p.next_offset + c.n
		                  FROM unnest(p_ids, p_counts) c (id, n) WHERE p.id = c.id RETURNING p.id)
		 SELECT array_agg(id) FROM moved`,
		// An UPDATE in a WITH is one task when it is on one shard.
		`WITH moved AS (UPDATE queenside.partitions p SET next_offset = p.next_offset + 1 WHERE p.id = ANY (p_ids) RETURNING p.id)
		 SELECT array_agg(id) FROM moved`},
	{NoNodeEffects,
		`SELECT pg_notify('queenside', q.name) FROM queenside.partitions p JOIN queenside.queues q ON q.id = p.queue_id WHERE p.id = $1`,
		`SELECT pg_notify('queenside', q.name) FROM queenside.queues q WHERE q.id = $1`},
}

func TestEachRuleFindsItsShapeAndPassesTheFix(t *testing.T) {
	for _, c := range cases {
		if !hasRule(CheckStatements("case", c.broken), c.rule) {
			t.Errorf("%s: not found in\n    %s", c.rule, c.broken)
		}
		if vs := CheckStatements("case", c.kept); len(vs) > 0 {
			t.Errorf("%s: the kept form is refused: %v", c.rule, vs)
		}
	}
}

// functionCases are functions that break a rule, each called by call; the
// kept function keeps every rule and is called by keptCall.
var functionCases = []struct {
	rule      Rule
	def, call string
}{
	{NoForcedGenericPlan, `CREATE OR REPLACE FUNCTION queenside.f_generic(p_id bigint) RETURNS bigint LANGUAGE plpgsql
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$ BEGIN
  RETURN (SELECT count(*) FROM queenside.cursors cu JOIN queenside.partitions p ON p.id = cu.partition_id
           WHERE cu.partition_id = p_id AND p.id = p_id);
END $function$`, `SELECT queenside.f_generic(1)`},
	{NoSQLFunction, `CREATE OR REPLACE FUNCTION queenside.f_sql(p_id bigint) RETURNS bigint LANGUAGE sql
AS $function$ SELECT count(*) FROM queenside.cursors cu JOIN queenside.partitions p ON p.id = cu.partition_id
               WHERE cu.partition_id = p_id AND p.id = p_id $function$`, `SELECT queenside.f_sql(1)`},
	{NoQueryIntoElement, `CREATE OR REPLACE FUNCTION queenside.f_element(p_id bigint) RETURNS bigint LANGUAGE plpgsql
AS $function$ DECLARE a bigint[] := '{0}'; BEGIN
  a[1] := (SELECT p.next_offset FROM queenside.partitions p WHERE p.id = p_id);
  RETURN a[1];
END $function$`, `SELECT queenside.f_element(1)`},
	{NoNodeEffects, `CREATE OR REPLACE FUNCTION queenside.f_wake(p_id bigint) RETURNS void LANGUAGE plpgsql
AS $function$ BEGIN
  UPDATE queenside.partitions p SET next_offset = 0 WHERE p.id = p_id;
  PERFORM pg_notify('queenside', 'q');
END $function$`, `SELECT queenside.f_wake(1)`},
}

const keptFunction = `CREATE OR REPLACE FUNCTION queenside.f_kept(p_id bigint) RETURNS bigint LANGUAGE plpgsql
 SET enable_seqscan TO 'off'
AS $function$
DECLARE v_head timestamptz; v_id bigint; v_next bigint; a bigint[] := '{0}';
BEGIN
  -- an assignment may call what queries distributed tables: it is no statement on them
  v_head := queenside.cursor_head(p_id, 0);
  -- a plain variable may take a query's value, and an element the variable's
  v_next := (SELECT p.next_offset FROM queenside.partitions p WHERE p.id = p_id);
  a[1] := v_next;
  FOR v_id IN SELECT p.id FROM queenside.partitions p WHERE p.id = p_id LOOP
    v_head := queenside.cursor_head(v_id, 0);
  END LOOP;
  UPDATE queenside.cursors cu SET head_at = v_head WHERE cu.partition_id = p_id;
  RETURN (SELECT count(*) FROM queenside.cursors cu JOIN queenside.partitions p ON p.id = cu.partition_id
           WHERE cu.partition_id = p_id AND p.id = p_id);
END $function$`

const keptCall = `SELECT queenside.f_kept(1)`

func TestFunctionRules(t *testing.T) {
	for _, c := range functionCases {
		if !hasRule(CheckFunction("f", c.def), c.rule) {
			t.Errorf("%s: not found in\n%s", c.rule, c.def)
		}
	}
	if vs := CheckFunction("f", keptFunction); len(vs) > 0 {
		t.Errorf("a function keeping the rules is refused: %v", vs)
	}
}

func TestQuotesAndCommentsAreNotStatements(t *testing.T) {
	sql := `SELECT 1 FROM queenside.queues WHERE name = 'a; UPDATE queenside.cursors SET head_at = clock_timestamp()';
	-- UPDATE queenside.cursors SET head_at = clock_timestamp();
	/* UPDATE queenside.cursors SET head_at = clock_timestamp(); */
	SELECT $x$ UPDATE queenside.cursors SET head_at = clock_timestamp(); $x$`
	if vs := CheckStatements("case", sql); len(vs) > 0 {
		t.Errorf("quoted or commented SQL taken for statements: %v", vs)
	}
}

func TestGoStringsAreChecked(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "x.go")
	src := "package x\n\nconst q = `UPDATE queenside.cursors c SET head_at = clock_timestamp() WHERE c.partition_id = $1`\n"
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	vs, err := CheckGoFiles([]string{path})
	if err != nil {
		t.Fatal(err)
	}
	if !hasRule(vs, NoVolatileInWrite) || vs[0].Place != "x.go" {
		t.Errorf("a Go string breaking R3: %v", vs)
	}
}

func hasRule(vs []Violation, r Rule) bool {
	for _, v := range vs {
		if v.Rule == r {
			return true
		}
	}
	return false
}
