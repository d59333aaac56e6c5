package bench

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/queenside/queenside/sidecar/pgtest"
)

// TestSoak runs the soak for a minute, retention on, and holds the tables
// to the soak's bound after a 15 s warm-up (steady within a few seconds at
// these settings): a janitor that stopped deleting lets the retained
// messages and the segments grow with every push, past 3x their size in
// the warm-up within seconds, and fails it. (It is the soak's own check,
// asserted again here measure by measure.)
func TestSoak(t *testing.T) {
	if pgtest.Server() == nil {
		t.Skip("the soak test shortens autovacuum's naptime, so it needs the PostgreSQL pgtest starts itself")
	}
	// At the default naptime (60 s) autovacuum may not come by at all in
	// a minute, and a table full of dead tuples says nothing of retention.
	shortenNaptime(t, "2s")
	bin := buildSidecar(t)
	cfg := DefaultConfig()
	cfg.DatabaseURL = pgtest.NewDatabase(t)
	cfg.SidecarBinary = bin
	cfg.Out = ""
	cfg.Scenarios = []string{ScenarioSoak}
	cfg.Connections = 2
	cfg.SoakDuration = 60 * time.Second
	cfg.SoakWarmup = 15 * time.Second
	cfg.SoakSample = time.Second
	cfg.SoakRate = 2000
	cfg.SoakCompletedRetention = 2
	cfg.RetentionInterval = 500 * time.Millisecond
	var out bytes.Buffer
	cfg.Output = &out
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rep, err := Run(ctx, cfg)
	t.Logf("output:\n%s", out.String())
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	r := rep.Scenarios[0]
	if r.Name != ScenarioSoak || r.Failed || r.Soak == nil {
		t.Fatalf("soak: %+v", r)
	}
	held := map[string]bool{}
	for _, c := range r.Soak.Checked {
		held[c.Table+" "+c.Measure] = true
		if c.Peak > c.Bound {
			t.Errorf("%s %s: %d after the warm-up, past %d", c.Table, c.Measure, c.Peak, c.Bound)
		}
	}
	for _, want := range []string{"queue retained messages", "segments bytes", "segments live tuples",
		"segments dead tuples", "cursors bytes", "partitions bytes"} {
		if !held[want] {
			t.Errorf("%s was not checked", want)
		}
	}
	// The consumers kept up, and what they consumed went: retention, not
	// a lack of traffic, kept the tables flat.
	last := r.Soak.Samples[len(r.Soak.Samples)-1]
	if last.Pushed < int64(cfg.SoakRate)*50 || last.Consumed < last.Pushed*9/10 || last.Retained > last.Pushed/5 {
		t.Errorf("at the end: pushed %d, consumed %d, retained %d", last.Pushed, last.Consumed, last.Retained)
	}
	// The first and last minutes' costs, to tell whether they held.
	for name, w := range map[string]*SoakWindow{"first": r.Soak.FirstMinute, "last": r.Soak.LastMinute} {
		if w == nil || w.Consumed < int64(cfg.SoakRate)*30 || w.DeliveryP99Ms <= 0 ||
			(last.PostgresCPUSeconds != nil && w.PostgresMicros <= 0) {
			t.Errorf("the %s minute: %+v", name, w)
		}
	}
}

// shortenNaptime sets autovacuum_naptime on pgtest's server for the test.
func shortenNaptime(t *testing.T, naptime string) {
	t.Helper()
	admin := pgtest.Pool(t, pgtest.AdminURL())
	ctx := context.Background()
	for _, sql := range []string{"ALTER SYSTEM SET autovacuum_naptime = '" + naptime + "'", "SELECT pg_reload_conf()"} {
		if _, err := admin.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, sql := range []string{"ALTER SYSTEM RESET autovacuum_naptime", "SELECT pg_reload_conf()"} {
			if _, err := admin.Exec(context.Background(), sql); err != nil {
				t.Error(err)
			}
		}
	})
}

// TestHeldScenario drains a small backlog twice, the second time with some
// partitions' heads leased and never acked, and checks that each drain took
// what it could and nothing else.
func TestHeldScenario(t *testing.T) {
	bin := buildSidecar(t)
	cfg := DefaultConfig()
	cfg.DatabaseURL = pgtest.NewDatabase(t)
	cfg.SidecarBinary = bin
	cfg.Out = ""
	cfg.Scenarios = []string{ScenarioHeld}
	cfg.HeldMessages, cfg.HeldPartitions, cfg.HeldBack = 3000, 30, 3
	var out bytes.Buffer
	cfg.Output = &out
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := Run(ctx, cfg)
	t.Logf("output:\n%s", out.String())
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	r := rep.Scenarios[0]
	if r.Name != ScenarioHeld || r.Failed || r.Errors != 0 || r.Held == nil {
		t.Fatalf("held: %+v", r)
	}
	// 100 messages a partition: the held drain leaves the 3 held ones whole.
	if r.Held.Free.Messages != 3000 || r.Held.Held.Messages != 2700 {
		t.Errorf("drained %d and %d messages, want 3000 and 2700", r.Held.Free.Messages, r.Held.Held.Messages)
	}
	if r.SidecarCPUSeconds != nil && r.PostgresCPUSeconds != nil &&
		(r.Held.Free.PostgresMicros <= 0 || r.Held.Held.PostgresMicros <= 0) {
		t.Errorf("PostgreSQL's CPU a message not reported: %+v", r.Held)
	}
	db := pgtest.Pool(t, cfg.DatabaseURL)
	rows, err := db.Query(ctx, `
		SELECT p.name, c.committed, c.lease_id IS NOT NULL AND c.lease_expires_at > now()
		  FROM queenside.cursors c
		  JOIN queenside.groups g ON g.id = c.group_id
		  JOIN queenside.partitions p ON p.id = c.partition_id
		 WHERE g.name = 'held-held'`)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for rows.Next() {
		var name string
		var committed int64
		var leased bool
		if err := rows.Scan(&name, &committed, &leased); err != nil {
			t.Fatal(err)
		}
		held := name == "p0" || name == "p1" || name == "p2"
		if held && (committed != 0 || !leased) || !held && committed != 100 {
			t.Errorf("partition %s: cursor at %d, leased %v", name, committed, leased)
		}
		names = append(names, name)
	}
	if rows.Err() != nil || len(names) != 30 {
		t.Errorf("%d cursors of the held group (%v), want 30", len(names), rows.Err())
	}
}
