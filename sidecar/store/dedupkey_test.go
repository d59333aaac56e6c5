package store

import (
	"context"
	"encoding/json"
	"fmt"
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
		err = conn.QueryRow(ctx, `EXPLAIN (ANALYZE, FORMAT JSON)
			SELECT 1 FROM unnest($1::integer[], $2::uuid[]) AS u (s, h)
			  JOIN queenside.dedup d ON uuid_hash_extended(d.hash, d.partition_id) = uuid_hash_extended(u.h, ($3::bigint[])[u.s])
			   AND d.hash = u.h AND d.partition_id = ($3::bigint[])[u.s]
			 WHERE d.partition_id = ANY ($3::bigint[])
			UNION ALL
			SELECT 1 FROM unnest($1::integer[], $2::uuid[]) AS u (s, h)
			  JOIN queenside.segments g ON g.partition_id = ($3::bigint[])[u.s] AND g.hash = u.h
			 WHERE g.partition_id = ANY ($3::bigint[])`,
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
