package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

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
	// A page across two segments: 10,050..10,149.
	rows := 0.0
	for _, plan := range functionPlans(t, s, "SELECT * FROM queenside.message_page($1, $2, $3, $4)", b.ID, int64(10_050), 100, 64<<10) {
		for _, sc := range plan {
			if sc["Relation Name"] == "segments" {
				if indexOf(sc) != "segments_pkey" {
					raw, _ := json.Marshal(sc)
					t.Fatalf("a page's scan of segments: %s", raw)
				}
				rows += sc["Actual Rows"].(float64)
			}
		}
	}
	if rows != 2 {
		t.Fatalf("a page of 100 over two segments read %v segments", rows)
	}
	msgs, err := s.Messages(ctx, b.ID, 10_050, 100, 64<<10)
	if err != nil || len(msgs) != 100 || msgs[0].Offset != 10_050 || msgs[99].Offset != 10_149 {
		t.Fatalf("the page: %d messages, %v", len(msgs), err)
	}

	// The newest 1,000 searched for an id that is not there: the probe of
	// the hashes, then 10 segments.
	rows = 0
	for _, plan := range functionPlans(t, s, "SELECT * FROM queenside.find_transaction($1, $2, $3)", b.ID, "absent", b.Head-1000) {
		if probesHashes(plan) {
			continue
		}
		for _, sc := range plan {
			if sc["Relation Name"] == "segments" {
				if indexOf(sc) != "segments_pkey" {
					t.Fatalf("the search's scan: %v", sc)
				}
				rows += sc["Actual Rows"].(float64)
			}
		}
	}
	if rows != 10 {
		t.Fatalf("a search of the newest 1,000 read %v segments", rows)
	}

	probes := 0
	for _, plan := range functionPlans(t, s, "SELECT * FROM queenside.find_transaction($1, $2, $3)", b.ID, "s7-3", b.Head-1000) {
		if !probesHashes(plan) {
			continue
		}
		probes++
		for _, sc := range plan {
			if sc["Relation Name"] == "dedup" && (indexOf(sc) != "dedup_key" || sc["Actual Rows"].(float64) != 1) {
				t.Fatalf("the dedup probe: %v", sc)
			}
			if sc["Relation Name"] == "segments" && indexOf(sc) != "segments_hash" {
				t.Fatalf("the probe of the segments of one message: %v", sc)
			}
		}
	}
	if probes != 1 {
		t.Fatalf("the search of s7-3 probed the hashes %d times", probes)
	}
	off, found, byDedup, err := s.FindTransaction(ctx, b, "s7-3", 1000)
	if err != nil || !found || !byDedup || off != 703 {
		t.Fatalf("s7-3: %d %v %v %v", off, found, byDedup, err)
	}
}

// functionPlans runs sql on a connection of its own, auto_explain logging
// the plan of each statement run, those of the functions it calls too,
// and returns each statement's scans.
func functionPlans(t *testing.T, s *Store, sql string, args ...any) [][]map[string]any {
	t.Helper()
	ctx := context.Background()
	cfg := s.pool.Config().ConnConfig.Copy()
	var plans [][]map[string]any
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
		_, raw, ok := strings.Cut(n.Message, "plan:\n")
		if !ok {
			return
		}
		var plan struct {
			Plan map[string]any `json:"Plan"`
		}
		if err := json.Unmarshal([]byte(raw), &plan); err != nil {
			t.Errorf("a plan auto_explain logged: %v\n%s", err, raw)
			return
		}
		plans = append(plans, scansOf(plan.Plan, nil))
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, set := range []string{"LOAD 'auto_explain'", "SET auto_explain.log_min_duration = 0",
		"SET auto_explain.log_analyze = on", "SET auto_explain.log_nested_statements = on",
		"SET auto_explain.log_format = json", "SET client_min_messages = log"} {
		if _, err := conn.Exec(ctx, set); err != nil {
			t.Fatalf("%s: %v", set, err)
		}
	}
	rows, err := conn.Query(ctx, sql, args...)
	if err != nil {
		t.Fatal(err)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return plans
}

// probesHashes tells a statement's scans are the probe of the
// transaction hashes: the dedup table's.
func probesHashes(scans []map[string]any) bool {
	for _, sc := range scans {
		if sc["Relation Name"] == "dedup" {
			return true
		}
	}
	return false
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
