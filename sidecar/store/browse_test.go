package store

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/queenside/queenside/sidecar/pgtest"
)

// The message browser's reads use the keys: a page reads the segments of
// its offsets through segments_pkey and no others, a transaction id search
// beyond the dedup window reads only the segments of the messages it
// searches, and one inside it probes dedup_key and segments_hash.
func TestBrowseReadsUseTheKeys(t *testing.T) {
	pgtest.SkipOnCitus(t, "a plan of one PostgreSQL")
	s := openStore(t)
	ctx := context.Background()
	// 200 segments of 100 messages in p, and a neighbour partition.
	for i := range 200 {
		msgs := messages("p", fmt.Sprintf("s%d", i), 100)
		msgs = append(msgs, messages("other", fmt.Sprintf("s%d", i), 10)...)
		if _, err := s.Push(ctx, msgs); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.pool.Exec(ctx, "ANALYZE queenside.segments"); err != nil {
		t.Fatal(err)
	}
	b, err := s.PartitionBounds(ctx, "q", "p")
	if err != nil {
		t.Fatal(err)
	}
	if b.First != 0 || b.Head != 20_000 {
		t.Fatalf("bounds: %+v", b)
	}
	explain := func(sql string, args ...any) []map[string]any {
		t.Helper()
		var plan []struct {
			Plan map[string]any `json:"Plan"`
		}
		if err := s.pool.QueryRow(ctx, "EXPLAIN (ANALYZE, FORMAT JSON) "+sql, args...).Scan(&plan); err != nil {
			t.Fatal(err)
		}
		return scansOf(plan[0].Plan, nil)
	}
	// A page across two segments: 10,050..10,149.
	scans := explain(pageSQL, b.ID, int64(10_050), 100, 64<<10)
	rows := 0.0
	for _, sc := range scans {
		if sc["Relation Name"] == "segments" {
			if indexOf(sc) != "segments_pkey" {
				raw, _ := json.Marshal(sc)
				t.Fatalf("a page's scan of segments: %s", raw)
			}
			rows += sc["Actual Rows"].(float64)
		}
	}
	if rows != 2 {
		t.Fatalf("a page of 100 over two segments read %v segments", rows)
	}
	msgs, err := s.Messages(ctx, b.ID, 10_050, 100, 64<<10)
	if err != nil || len(msgs) != 100 || msgs[0].Offset != 10_050 || msgs[99].Offset != 10_149 {
		t.Fatalf("the page: %d messages, %v", len(msgs), err)
	}

	// The newest 1,000 searched for an id that is not there: 10 segments.
	rows = 0
	for _, sc := range explain(scanSQL, b.ID, "absent", b.Head-1000) {
		if sc["Relation Name"] == "segments" {
			if indexOf(sc) != "segments_pkey" {
				t.Fatalf("the search's scan: %v", sc)
			}
			rows += sc["Actual Rows"].(float64)
		}
	}
	if rows != 10 {
		t.Fatalf("a search of the newest 1,000 read %v segments", rows)
	}

	for _, sc := range explain(dedupSQL, b.ID, TransactionHash("s7-3")) {
		if sc["Relation Name"] == "dedup" && (indexOf(sc) != "dedup_key" || sc["Actual Rows"].(float64) != 1) {
			t.Fatalf("the dedup probe: %v", sc)
		}
		if sc["Relation Name"] == "segments" && indexOf(sc) != "segments_hash" {
			t.Fatalf("the probe of the segments of one message: %v", sc)
		}
	}
	off, found, byDedup, err := s.FindTransaction(ctx, b, "s7-3", 1000)
	if err != nil || !found || !byDedup || off != 703 {
		t.Fatalf("s7-3: %d %v %v %v", off, found, byDedup, err)
	}
}

// indexOf names the index a scan reads: its own, or its bitmap's.
func indexOf(scan map[string]any) string {
	if name, ok := scan["Index Name"].(string); ok {
		return name
	}
	kids, _ := scan["Plans"].([]any)
	if len(kids) == 1 {
		if k, ok := kids[0].(map[string]any); ok {
			name, _ := k["Index Name"].(string)
			return name
		}
	}
	return ""
}

// scansOf lists the plan's scan nodes, depth first.
func scansOf(n map[string]any, out []map[string]any) []map[string]any {
	if _, ok := n["Relation Name"]; ok {
		out = append(out, n)
	}
	kids, _ := n["Plans"].([]any)
	for _, k := range kids {
		if m, ok := k.(map[string]any); ok {
			out = scansOf(m, out)
		}
	}
	return out
}
