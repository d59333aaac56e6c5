package bench

import (
	"math"
	"testing"
)

func TestWritesPerMessage(t *testing.T) {
	before := &writeSample{wal: "0/FFFFFF00", commits: 10, tables: map[string]TableWrites{
		"cursors": {Updated: 100, HotUpdated: 40},
		"dedup":   {Inserted: 7},
	}}
	after := &writeSample{wal: "1/00000F00", commits: 60, tables: map[string]TableWrites{
		"cursors":  {Updated: 500, HotUpdated: 240},
		"dedup":    {Inserted: 207},
		"segments": {Inserted: 200},
		"queues":   {Inserted: 0},
	}}
	w, err := since(before, after, 200)
	if err != nil {
		t.Fatal(err)
	}
	if w.WALBytes != 0x1000 || w.Commits != 50 || len(w.Tables) != 3 {
		t.Fatalf("totals: %+v", w)
	}
	p := w.PerMessage
	near := func(got, want float64) bool { return math.Abs(got-want) < 1e-9 }
	if !near(p.Inserted, 2) || !near(p.Updated, 2) || !near(p.NonHot, 1) || !near(p.Tuples, 4) ||
		!near(p.WALBytes, 20.48) || !near(p.Commits, 0.25) || p.NonHotTables != "cursors 1.00" {
		t.Fatalf("per message: %+v", p)
	}
	if _, err := parseLSN("nonsense"); err == nil {
		t.Fatal("a malformed WAL position was read")
	}
}
