package bench

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/queenside/queenside/schema"
	"github.com/queenside/queenside/sidecar/pgtest"
)

// TestFloorWritesWhatItCounts runs the floor's workers on their tables and
// reads the tables back: every counted message advanced its partition, got
// its dedup row at its own offset and sits in a storage row, and every
// lease was acked. A floor that skipped a write would measure too little.
func TestFloorWritesWhatItCounts(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	url := pgtest.NewDatabase(t)
	admin, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	if err := schema.Migrate(ctx, admin); err != nil {
		t.Fatal(err)
	}
	const floor = "bench_floor_test"
	if err := createFloor(ctx, admin, floor, 50); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.FloorPartitions, cfg.FloorTransactionMessages, cfg.FloorLeaseMessages, cfg.FloorLeasePartitions = 50, 120, 3, 7
	pay, err := newPayloads(cfg.PayloadBytes)
	if err != nil {
		t.Fatal(err)
	}
	b := &bench{cfg: cfg, pay: pay}
	ts := tallies(3)
	end := time.Now().Add(500 * time.Millisecond)
	var wg sync.WaitGroup
	for _, tl := range ts {
		c, err := floorConn(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(context.Background())
		wg.Go(func() { b.floorWorker(ctx, c, floor, tl, end) })
	}
	wg.Wait()
	total := newTally().merge(ts...)
	if total.errors != 0 || total.messages == 0 || total.messages%120 != 0 {
		t.Fatalf("%d messages, %d errors: %v", total.messages, total.errors, total.samples)
	}
	pushes := total.messages / 120

	var advanced, dedupRows, dedupOffsets, stored, storageRows, acked int64
	var leased bool
	err = admin.QueryRow(ctx, `SELECT
	    (SELECT sum(next_offset) FROM bench_floor_test.partitions),
	    (SELECT count(*) FROM bench_floor_test.dedup),
	    (SELECT count(DISTINCT (partition_id, msg_offset)) FROM bench_floor_test.dedup d
	      WHERE msg_offset < (SELECT next_offset FROM bench_floor_test.partitions p WHERE p.id = d.partition_id)),
	    (SELECT sum(cardinality(message_ids)) FROM bench_floor_test.storage),
	    (SELECT count(*) FROM bench_floor_test.storage),
	    (SELECT sum(committed) FROM bench_floor_test.cursors),
	    (SELECT bool_or(lease_id IS NOT NULL) FROM bench_floor_test.cursors)`).
		Scan(&advanced, &dedupRows, &dedupOffsets, &stored, &storageRows, &acked, &leased)
	if err != nil {
		t.Fatal(err)
	}
	// 120 messages a push make 40 leases of 3, in statements of 7 cursors.
	if advanced != total.messages || dedupRows != total.messages || dedupOffsets != total.messages ||
		stored != total.messages || storageRows != pushes || acked != pushes*40*3 || leased {
		t.Errorf("%d messages in %d pushes: partitions advanced %d, dedup rows %d at %d distinct offsets, "+
			"stored %d in %d rows, cursors acked %d, a lease left %v",
			total.messages, pushes, advanced, dedupRows, dedupOffsets, stored, storageRows, acked, leased)
	}
	if err := dropScratch(admin, floor); err != nil {
		t.Fatal(err)
	}
}

func TestFloorPushArgs(t *testing.T) {
	args := floorPushArgs(500, 40, []byte("x"), "t")
	ids, counts, pids, ks := args[0].([]int64), args[1].([]int32), args[2].([]int64), args[3].([]int32)
	if len(pids) != 500 || len(ks) != 500 || len(ids) != len(counts) || len(ids) > 40 {
		t.Fatalf("%d partitions, %d counts, %d messages", len(ids), len(counts), len(pids))
	}
	var sum int32
	for i, id := range ids {
		if id < 1 || id > 40 || (i > 0 && id <= ids[i-1]) {
			t.Fatalf("partitions %v: want distinct, in order, within 1..40", ids)
		}
		sum += counts[i]
	}
	if sum != 500 {
		t.Fatalf("counts sum to %d, want 500", sum)
	}
	// Each partition's messages are a run numbered from 0.
	at := 0
	for i, id := range ids {
		for k := range counts[i] {
			if pids[at] != id || ks[at] != k {
				t.Fatalf("message %d: partition %d place %d, want %d and %d", at, pids[at], ks[at], id, k)
			}
			at++
		}
	}
}

// floorSchemasLeft counts the floor's schemas still in the database.
func floorSchemasLeft(t *testing.T, url string) int {
	t.Helper()
	ctx := context.Background()
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	var n int
	if err := c.QueryRow(ctx, "SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'bench_floor_%'").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
