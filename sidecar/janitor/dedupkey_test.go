package janitor

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/queenside/queenside/protocol"
	"github.com/queenside/queenside/sidecar/pgtest"
)

// The purges delete a hash by its partition and hash together, one look-up
// of dedup_key each, never reading dedup whole: with one transaction id in
// every partition, a look-up by the hash alone would read every partition's
// row of it. The plans of the functions' statements are read from
// auto_explain, which reports them to the session as notices.
func TestPurgesLookHashesUpByKey(t *testing.T) {
	pgtest.SkipOnCitus(t, "plans of one PostgreSQL, read from auto_explain")
	f := newFixture(t, options(func(o *protocol.QueueOptions) {
		o.CompletedRetentionSeconds = 1
		o.DedupWindowSeconds = 1
	}))
	f.pop("g", "", 1, true)
	for p := range 40 { // segments of two messages, whose hashes are dedup rows
		f.push(fmt.Sprintf("p%d", p), "same", 2)
	}
	// Half the partitions consumed: their segments go and their hashes are
	// kept as orphans; the others' hashes are purged with their segments
	// still there.
	for p := range 20 {
		f.pop("g", fmt.Sprintf("p%d", p), 10, true)
	}
	f.backdate(10 * time.Second)
	if r := f.round(); r.Segments != 20 {
		t.Fatalf("round: %+v, want the 20 consumed segments deleted", r)
	}
	f.backdate(2 * time.Hour)

	conn, plans := f.noticeConn()
	for _, sql := range []string{"LOAD 'auto_explain'", "SET auto_explain.log_min_duration = 0",
		"SET auto_explain.log_nested_statements = on", "SET auto_explain.log_level = notice"} {
		if _, err := conn.Exec(f.ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	var orphans, retained int64
	if err := conn.QueryRow(f.ctx, "SELECT hashes FROM queenside.purge_orphan_hashes(1000, 100000)").Scan(&orphans); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(f.ctx, "SELECT hashes FROM queenside.purge_dedup(0, 1000, 100000)").Scan(&retained); err != nil {
		t.Fatal(err)
	}
	if orphans != 40 || retained != 40 || f.dedupRows() != 0 {
		t.Fatalf("purged %d orphaned and %d retained hashes, %d left; want 40, 40 and none", orphans, retained, f.dedupRows())
	}
	deletes := 0
	for _, p := range *plans {
		if !strings.Contains(p, "Delete on dedup") {
			continue
		}
		deletes++
		if strings.Contains(p, "Seq Scan on dedup") || !strings.Contains(p, "Index Scan using dedup_key on dedup") {
			t.Errorf("a purge deletes hashes without looking them up by key:\n%s", p)
		}
	}
	if deletes < 2 {
		t.Fatalf("%d plans deleting from dedup, want some of each purge", deletes)
	}
}
