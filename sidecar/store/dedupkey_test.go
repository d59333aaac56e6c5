package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/queenside/queenside/sidecar/pgtest"
)

// A transaction id repeated in many partitions (a sequence number per
// partition, say) does not slow the duplicate probe: push's probe of one
// partition and hash reads that partition's row and no other, in both
// places a hash is kept: the dedup rows of segments of several messages
// (dedup_key) and the segments of one message (segments_hash).
func TestDedupProbeReadsOnlyItsPartition(t *testing.T) {
	pgtest.SkipOnCitus(t, "a plan of one PostgreSQL")
	s := openStore(t)
	ctx := context.Background()
	var several, single []Message
	for p := range 300 {
		for _, txid := range []string{"same", "other"} {
			several = append(several, Message{Queue: "q", Partition: fmt.Sprintf("several%d", p), Payload: []byte{0xc0},
				TransactionID: txid, MessageID: uuid.Must(uuid.NewV7())})
		}
		single = append(single, Message{Queue: "q", Partition: fmt.Sprintf("single%d", p), Payload: []byte{0xc0},
			TransactionID: "same", MessageID: uuid.Must(uuid.NewV7())})
	}
	for _, msgs := range [][]Message{several, single} {
		if _, err := s.Push(ctx, msgs); err != nil {
			t.Fatal(err)
		}
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	// push's probe, as it is written there, with push's settings.
	for _, set := range []string{"SET enable_seqscan = off", "SET enable_bitmapscan = off"} {
		if _, err := conn.Exec(ctx, set); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct{ partition, relation, index string }{
		{"several7", "dedup", "dedup_key"},
		{"single7", "segments", "segments_hash"},
	} {
		var pid int64
		if err := conn.QueryRow(ctx, `SELECT id FROM queenside.partitions WHERE name = $1`, c.partition).Scan(&pid); err != nil {
			t.Fatal(err)
		}
		var plan []struct {
			Plan map[string]any `json:"Plan"`
		}
		err = conn.QueryRow(ctx, "EXPLAIN (ANALYZE, FORMAT JSON) "+pushProbe,
			[]int32{1}, [][16]byte{TransactionHash("same")}, []int64{pid}).Scan(&plan)
		if err != nil {
			t.Fatal(err)
		}
		scan := findNode(plan[0].Plan, c.relation)
		if scan == nil {
			raw, _ := json.Marshal(plan)
			t.Fatalf("no scan of %s in the plan: %s", c.relation, raw)
		}
		removed, _ := scan["Rows Removed by Filter"].(float64)
		if scan["Index Name"] != c.index || scan["Actual Rows"].(float64) != 1 || removed > 0 {
			raw, _ := json.Marshal(scan)
			t.Fatalf("the probe of %s's hash: %s; want %s reading the one row", c.partition, raw, c.index)
		}
	}
}

// pushProbe is push's probe for stored hashes, as it is written there, with
// its arguments numbered: $1 the slots, $2 the hashes, $3 the partitions.
const pushProbe = `
	SELECT 1 FROM unnest($1::integer[], $2::uuid[]) AS u (s, h)
	  JOIN queenside.dedup d ON uuid_hash_extended(d.hash, d.partition_id) = uuid_hash_extended(u.h, ($3::bigint[])[u.s])
	   AND d.hash = u.h AND d.partition_id = ($3::bigint[])[u.s]
	 WHERE d.partition_id = ANY ($3::bigint[])
	UNION ALL
	SELECT 1 FROM unnest($1::integer[], $2::uuid[]) AS u (s, h)
	  JOIN queenside.segments g ON g.partition_id = ($3::bigint[])[u.s] AND g.hash = u.h
	 WHERE g.partition_id = ANY ($3::bigint[])`

// The probe of a push over many partitions looks each hash up: in the plan
// a push's function keeps (generic, made once for its connection) it never
// reads the partitions' kept hashes in full, which would cost a push more
// the more its partitions keep.
func TestDedupProbeOfManyPartitionsLooksEachHashUp(t *testing.T) {
	pgtest.SkipOnCitus(t, "a plan of one PostgreSQL")
	s := openStore(t)
	ctx := context.Background()
	const partitions, kept = 100, 40
	pids := make([]int64, partitions)
	for round := range kept {
		var msgs []Message
		for p := range partitions {
			msgs = append(msgs, Message{Queue: "q", Partition: fmt.Sprintf("p%d", p), Payload: []byte{0xc0},
				TransactionID: fmt.Sprintf("t%d-%d", p, round), MessageID: uuid.Must(uuid.NewV7())})
		}
		if _, err := s.Push(ctx, msgs); err != nil {
			t.Fatal(err)
		}
	}
	// EXPLAIN EXECUTE takes no parameters: the arguments are literals.
	var slots, hashes, ids []string
	for p := range partitions {
		if err := s.pool.QueryRow(ctx, `SELECT id FROM queenside.partitions WHERE name = $1`, fmt.Sprintf("p%d", p)).Scan(&pids[p]); err != nil {
			t.Fatal(err)
		}
		slots = append(slots, fmt.Sprint(p+1))
		hashes = append(hashes, uuid.UUID(TransactionHash(fmt.Sprintf("t%d-new", p))).String())
		ids = append(ids, fmt.Sprint(pids[p]))
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	for _, sql := range []string{"ANALYZE queenside.segments", "ANALYZE queenside.dedup",
		"SET plan_cache_mode = force_generic_plan",
		"PREPARE probe(integer[], uuid[], bigint[]) AS " + pushProbe} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	var plan []struct {
		Plan map[string]any `json:"Plan"`
	}
	if err := conn.QueryRow(ctx, fmt.Sprintf("EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE probe('{%s}', '{%s}', '{%s}')",
		strings.Join(slots, ","), strings.Join(hashes, ","), strings.Join(ids, ","))).Scan(&plan); err != nil {
		t.Fatal(err)
	}
	scan := findNode(plan[0].Plan, "segments")
	if scan == nil {
		t.Fatalf("no scan of segments in the plan: %v", plan)
	}
	// New hashes: a look-up a hash finds nothing; a read of the
	// partitions' ranges returns the partitions*kept hashes they hold.
	if read := scan["Actual Rows"].(float64) * scan["Actual Loops"].(float64); read > 0 {
		raw, _ := json.Marshal(plan)
		t.Fatalf("the probe of %d new hashes read %.0f kept hashes of segments; want a look-up a hash: %s", partitions, read, raw)
	}
}

// findNode returns the plan node that scans relation, depth first.
func findNode(n map[string]any, relation string) map[string]any {
	if n["Relation Name"] == relation {
		return n
	}
	kids, _ := n["Plans"].([]any)
	for _, k := range kids {
		if m, ok := k.(map[string]any); ok {
			if f := findNode(m, relation); f != nil {
				return f
			}
		}
	}
	return nil
}
