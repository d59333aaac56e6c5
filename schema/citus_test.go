package schema_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/queenside/queenside/protocol"
	"github.com/queenside/queenside/schema"
	"github.com/queenside/queenside/sidecar/citustest"
	"github.com/queenside/queenside/sidecar/store"
)

// where gives the place in a function a server error comes from.
func where(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return "\n" + pgErr.Where
	}
	return ""
}

func TestDistributeRefusesPlainPostgreSQL(t *testing.T) {
	ctx := context.Background()
	conn := connect(t, emptyDatabase(t))
	if err := schema.Migrate(ctx, conn); err != nil {
		t.Fatal(err)
	}
	if err := schema.Distribute(ctx, conn, 0); !errors.Is(err, schema.ErrNoCitus) {
		t.Fatalf("Distribute on plain PostgreSQL: %v, want ErrNoCitus", err)
	}
}

// On a coordinator with two workers, the migrated schema distributes
// itself as SCALING.md lays it out, a second run changes nothing, and
// pushes over partitions on every shard get gapless offsets and exact
// deduplication.
func TestDistributeOnCitus(t *testing.T) {
	cluster := citustest.Start(t, 2)
	ctx := context.Background()
	conn := cluster.Connect(t)
	if err := schema.Migrate(ctx, conn); err != nil {
		t.Fatal(err)
	}
	// Messages stored before: they move to the shards, and the
	// coordinator keeps no copy of them.
	before, err := store.Open(ctx, cluster.URL(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for p := range 3 {
		if _, err := before.Push(ctx, []store.Message{{Queue: "before", Partition: fmt.Sprintf("p%d", p), Payload: []byte{0xc0},
			TransactionID: "b", MessageID: uuid.New()}}); err != nil {
			t.Fatal(err)
		}
	}
	before.Close()
	for range 2 {
		if err := schema.Distribute(ctx, conn, 4); err != nil {
			t.Fatal(err)
		}
	}
	var moved, kept int64
	if err := conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM queenside.segments), pg_relation_size('queenside.segments')`).
		Scan(&moved, &kept); err != nil {
		t.Fatal(err)
	}
	if moved != 3 || kept != 0 {
		t.Errorf("after distributing: %d segments on the shards, %d bytes left on the coordinator; want 3 and none", moved, kept)
	}
	var generic []string
	if err := conn.QueryRow(ctx, `SELECT coalesce(array_agg(p.proname::text), '{}') FROM pg_proc p
		WHERE p.pronamespace = 'queenside'::regnamespace AND 'plan_cache_mode=force_generic_plan' = ANY (p.proconfig)`).Scan(&generic); err != nil {
		t.Fatal(err)
	}
	if len(generic) > 0 {
		t.Errorf("functions still forcing generic plans on Citus: %v", generic)
	}
	rows, err := conn.Query(ctx, `
		SELECT c.relname, coalesce(p.partmethod::text || p.repmodel::text, ''),
		       coalesce(p.colocationid, 0) = (SELECT colocationid FROM pg_dist_partition
		                                                                     WHERE logicalrelid = 'queenside.partitions'::regclass)
		  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		  LEFT JOIN pg_dist_partition p ON p.logicalrelid = c.oid
		 WHERE n.nspname = 'queenside' AND c.relkind = 'r' ORDER BY c.relname`)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for rows.Next() {
		var table, method string
		var colocated bool
		if err := rows.Scan(&table, &method, &colocated); err != nil {
			t.Fatal(err)
		}
		switch {
		case method == "hs" && colocated:
			got[table] = "distributed"
		case method == "nt":
			got[table] = "reference"
		case method == "":
			got[table] = "local"
		default:
			got[table] = "method " + method
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"queues": "reference", "groups": "reference", "partition_names": "reference", "queue_grants": "reference",
		"partitions": "distributed", "segments": "distributed", "dedup": "distributed", "dedup_marks": "distributed",
		"cursors": "distributed", "dead_letters": "distributed", "orphan_hashes": "distributed",
		"maintenance": "local", "schema_migrations": "local", "early_groups": "local", "spool_progress": "local",
	}
	for table, w := range want {
		if got[table] != w {
			t.Errorf("%s is %q on Citus, want %s", table, got[table], w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("tables on Citus: %v, want %v", got, want)
	}

	st, err := store.Open(ctx, cluster.URL(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	const partitions, rounds = 16, 3
	var msgs []store.Message
	for r := range rounds {
		for p := range partitions {
			msgs = append(msgs, store.Message{Queue: "c", Partition: fmt.Sprintf("p%d", p), Payload: []byte{0xa1, 'x'},
				TransactionID: fmt.Sprintf("t%d-%d", p, r), MessageID: uuid.New()})
		}
	}
	out, err := st.Push(ctx, msgs)
	if err != nil {
		t.Fatal(err, where(err))
	}
	for i, o := range out {
		if o.Duplicate || o.Offset != int64(i/partitions) {
			t.Fatalf("push %d (%s): %+v, want offset %d, new", i, msgs[i].Partition, o, i/partitions)
		}
	}
	again, err := st.Push(ctx, msgs[:partitions])
	if err != nil {
		t.Fatal(err, where(err))
	}
	for i, o := range again {
		if !o.Duplicate || o.Offset != 0 || o.MessageID != msgs[i].MessageID {
			t.Fatalf("push of %s again: %+v, want the original at offset 0", msgs[i].Partition, o)
		}
	}
	// A pop of a named partition leases its messages in order, and an ack
	// moves the group past them: the next pop starts after.
	for want := int64(0); want < rounds; want++ {
		r, err := st.Pop(ctx, store.PopRequest{Queue: "c", Partition: "p5", Group: "g", Batch: 1, Partitions: 1}, 1<<20)
		if err != nil {
			t.Fatal(err, where(err))
		}
		if len(r.Messages) != 1 || r.Messages[0].Offset != want {
			t.Fatalf("pop %d of p5: %+v, want the message at offset %d", want, r.Messages, want)
		}
		ack, err := st.Ack(ctx, []protocol.AckItem{{LeaseID: r.Messages[0].LeaseID, Offset: &r.Messages[0].Offset}})
		if err != nil || !ack.Results[0].Success {
			t.Fatalf("ack of offset %d: %+v %v", want, ack, where(err))
		}
	}
	// A seek of every partition (each on its shard, one transaction) takes
	// the group back to the beginning: p5 starts at offset 0 again.
	seek, err := st.Seek(ctx, protocol.SeekArgs{Queue: "c", Group: "g", To: protocol.SeekBeginning})
	if err != nil {
		t.Fatal(err, where(err))
	}
	if len(seek.Cursors) != partitions {
		t.Fatalf("seek moved %d cursors, want %d: %+v", len(seek.Cursors), partitions, seek)
	}
	if r, err := st.Pop(ctx, store.PopRequest{Queue: "c", Partition: "p5", Group: "g", Batch: 1, Partitions: 1}, 1<<20); err != nil ||
		len(r.Messages) != 1 || r.Messages[0].Offset != 0 {
		t.Fatalf("pop of p5 after the seek: %+v %v, want offset 0", r.Messages, where(err))
	}
	var shards int
	if err := conn.QueryRow(ctx, `SELECT count(DISTINCT get_shard_id_for_distribution_column('queenside.partitions', id))
		FROM queenside.partition_names`).Scan(&shards); err != nil {
		t.Fatal(err)
	}
	if shards != 4 {
		t.Errorf("the %d partitions are on %d shards, want all 4", partitions, shards)
	}
}

// Citus does not carry a column's statistics target to the shards
// (migration 17): a schema distributed after the migration copies it, and
// the migration sets the shards of a schema distributed before it.
func TestStatisticsTargetsReachTheShards(t *testing.T) {
	cluster := citustest.Start(t, 2)
	ctx := context.Background()
	if err := cluster.Migrate(ctx, citustest.Database, 4); err != nil {
		t.Fatal(err)
	}
	conn := cluster.Connect(t)
	// The targets on each shard of dedup and orphan_hashes: of their
	// columns and of dedup_key's expression.
	targets := func() []string {
		t.Helper()
		var got []string
		for _, table := range []string{"dedup", "orphan_hashes"} {
			rows, err := conn.Query(ctx, `SELECT result FROM run_command_on_placements($1, $$
				WITH shard AS (SELECT '%s'::regclass AS oid)
				SELECT string_agg(DISTINCT a.attstattarget::text, ',') FROM pg_attribute a
				 WHERE a.attnum > 0 AND NOT a.attisdropped
				   AND a.attrelid IN (SELECT oid FROM shard UNION ALL SELECT i.indexrelid FROM pg_index i, shard
				                       WHERE i.indrelid = shard.oid AND i.indexprs IS NOT NULL)$$)`, "queenside."+table)
			if err != nil {
				t.Fatal(err)
			}
			for rows.Next() {
				var r string
				if err := rows.Scan(&r); err != nil {
					t.Fatal(err)
				}
				got = append(got, table+":"+r)
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
		}
		return got
	}
	check := func(when string) {
		t.Helper()
		got := targets()
		if len(got) != 8 {
			t.Fatalf("%s: %d shard placements, want 8: %v", when, len(got), got)
		}
		for _, g := range got {
			if g != "dedup:1" && g != "orphan_hashes:1" {
				t.Errorf("%s: statistics targets on the shards %v, want 1 on each", when, got)
				return
			}
		}
	}
	check("distributed after the migration")

	// As a schema distributed before it: the targets back to the default
	// everywhere, and the migration not applied yet.
	for _, q := range []string{
		`SET citus.enable_ddl_propagation = off`,
		`ALTER TABLE queenside.dedup ALTER COLUMN hash SET STATISTICS -1`,
		`ALTER INDEX queenside.dedup_key ALTER COLUMN 1 SET STATISTICS -1`,
		`ALTER TABLE queenside.orphan_hashes ALTER COLUMN hashes SET STATISTICS -1`,
		`SELECT run_command_on_placements('queenside.dedup', 'ALTER TABLE %s ALTER COLUMN hash SET STATISTICS -1')`,
		`SELECT run_command_on_placements('queenside.dedup', $$DO 'DECLARE k regclass; BEGIN
			SELECT indexrelid INTO STRICT k FROM pg_index WHERE indrelid = ''%s''::regclass AND indexprs IS NOT NULL;
			EXECUTE ''ALTER INDEX '' || k || '' ALTER COLUMN 1 SET STATISTICS -1''; END'$$)`,
		`SELECT run_command_on_placements('queenside.orphan_hashes', 'ALTER TABLE %s ALTER COLUMN hashes SET STATISTICS -1')`,
		`RESET citus.enable_ddl_propagation`,
		`DELETE FROM queenside.schema_migrations WHERE version = 17`,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	for _, g := range targets() {
		if g == "dedup:1" || g == "orphan_hashes:1" {
			t.Fatalf("the targets were not reset on every shard: %s", g)
		}
	}
	if err := schema.Migrate(ctx, conn); err != nil {
		t.Fatal(err)
	}
	check("migrated when distributed")
}
