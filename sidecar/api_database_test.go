package sidecar

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/queenside/queenside/sidecar/pgtest"
)

// findByKey is the element of list (a JSON array of objects) whose key is value.
func findByKey(list any, key string, value any) map[string]any {
	items, _ := list.([]any)
	for _, e := range items {
		if m, ok := e.(map[string]any); ok && m[key] == value {
			return m
		}
	}
	return nil
}

// The transaction's sentence needs it a minute old: the browser test
// (database.test.js) waits for it, and TestDatabaseHealthRules gives every
// rule its inputs; here the transaction is found as the oldest at once.
func TestDashboardAPIDatabaseHealth(t *testing.T) {
	pgtest.SkipOnCitus(t, "a distributed table's rows and dead tuples are the workers'; the page reads the coordinator's statistics, as API.md says")
	ts := startSidecar(t, "", Options{})
	srv := httptest.NewServer(ts.srv.HTTPHandler())
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// A transaction with an xid, left open on a connection of its own.
	cfg, err := pgx.ParseConfig(ts.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["application_name"] = "held-open"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var xid int64
	var pid int32
	if err := tx.QueryRow(ctx, "SELECT txid_current(), pg_backend_pid()").Scan(&xid, &pid); err != nil {
		t.Fatal(err)
	}

	// 15,000 dead tuples of 20,000 in orphan_hashes, which autovacuum is
	// told to leave alone; the statistics are flushed right away where
	// the server can (PostgreSQL 15 on), else within seconds.
	c, err := ts.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, sql := range []string{
		"ALTER TABLE queenside.orphan_hashes SET (autovacuum_enabled = off)",
		`INSERT INTO queenside.orphan_hashes (purge_after, partition_id, last_offset, committed_at, hashes)
		 SELECT now() + interval '1 day', g, g, now(), '{}' FROM generate_series(1, 20000) g`,
		"DELETE FROM queenside.orphan_hashes WHERE last_offset <= 15000",
	} {
		if _, err := c.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	c.Exec(ctx, "SELECT pg_stat_force_next_flush()") //nolint:errcheck // absent before PostgreSQL 15
	c.Release()

	// The table's dead tuples show once the statistics are flushed.
	var out map[string]any
	for {
		code, got := apiCall(t, srv, "GET", "/api/database", "", nil)
		if code != 200 {
			t.Fatalf("/api/database: %d %v", code, got)
		}
		out = got
		if findByKey(out["problems"], "kind", "table") != nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("no table problem in time: %v", out)
		}
		time.Sleep(2 * time.Second)
	}

	oldest, _ := out["oldestTransaction"].(map[string]any)
	if num(oldest["pid"]) != int64(pid) || oldest["application"] != "held-open" || oldest["state"] != "idle in transaction" ||
		oldest["holdsHorizon"] != true || num(oldest["xidAge"]) < 1 {
		t.Fatalf("oldestTransaction: %v", oldest)
	}

	orphans := findByKey(out["tables"], "table", "orphan_hashes")
	if num(orphans["deadTuples"]) != 15000 || num(orphans["liveTuples"]) != 5000 || orphans["deadPercent"] != 75.0 {
		t.Fatalf("orphan_hashes: %v", orphans)
	}
	if p := findByKey(out["problems"], "name", "orphan_hashes"); p == nil || p["severity"] != "critical" ||
		p["text"] != "orphan_hashes has 15 k dead tuples (75 %), never autovacuumed." {
		t.Fatalf("the table's problem: %v", out["problems"])
	}
	// Every table of the schema, each size the sum of its parts.
	segments := findByKey(out["tables"], "table", "segments")
	if segments == nil || findByKey(segments["indexes"], "index", "segments_pkey") == nil {
		t.Fatalf("segments: %v", segments)
	}
	for _, e := range out["tables"].([]any) {
		tb := e.(map[string]any)
		if num(tb["totalBytes"]) <= 0 || num(tb["totalBytes"]) != num(tb["heapBytes"])+num(tb["toastBytes"])+num(tb["indexBytes"]) {
			t.Errorf("sizes of %v", tb)
		}
	}

	conns := out["connections"].(map[string]any)
	held := findByKey(conns["byApplication"], "application", "held-open")
	sidecar := findByKey(conns["byApplication"], "application", "queenside")
	idleInTx := findByKey(conns["byState"], "state", "idle in transaction")
	if num(conns["max"]) <= 0 || num(conns["total"]) < 2 || num(conns["hidden"]) != 0 ||
		held == nil || num(held["idleInTransaction"]) != 1 || held["queenside"] != false ||
		sidecar == nil || sidecar["queenside"] != true || num(sidecar["total"]) < 1 || idleInTx == nil || num(idleInTx["count"]) < 1 {
		t.Fatalf("connections: %v", conns)
	}
	if out["inRecovery"] != false || out["serverVersion"] == "" || len(out["notes"].([]any)) != 0 ||
		len(out["standbys"].([]any)) != 0 || out["replay"] != nil {
		t.Fatalf("server: %v", out)
	}

	// Once the transaction ends, it is no longer the oldest.
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	code, out := apiCall(t, srv, "GET", "/api/database", "", nil)
	if oldest, _ := out["oldestTransaction"].(map[string]any); code != 200 || (oldest != nil && num(oldest["pid"]) == int64(pid)) {
		t.Fatalf("after the rollback: %d %v", code, out)
	}
	if code, out := apiCall(t, srv, "POST", "/api/database", "", nil); code != 404 || errCode(out) != "not_found" {
		t.Fatalf("POST /api/database: %d %v", code, out)
	}
}

// Another session's statement, literals and all, is shown to admin tokens
// only: without one the oldest transaction is there, its query left out.
func TestDashboardHidesOtherSessionsSQL(t *testing.T) {
	ts := startSidecar(t, "", Options{Tokens: AdminTokens(testAdminToken)})
	srv := httptest.NewServer(ts.srv.HTTPHandler())
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, ts.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background()) //nolint:errcheck // ends the test's transaction
	const secret = "leaked-Passw0rd-42"
	var pid int32
	if err := tx.QueryRow(ctx, "SELECT pg_backend_pid() FROM (SELECT txid_current(), '"+secret+"') AS s").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	// The test's transaction is the oldest once those the sidecar began
	// before it (at start, under load) have ended.
	oldest := func(token string) map[string]any {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			code, out := apiCall(t, srv, "GET", "/api/database", token, nil)
			o, _ := out["oldestTransaction"].(map[string]any)
			if code == 200 && num(o["pid"]) == int64(pid) {
				return o
			}
			if time.Now().After(deadline) {
				t.Fatalf("/api/database: %d, oldest %v, want pid %d", code, o, pid)
			}
		}
	}
	if o := oldest(""); o["query"] != "" || o["queryHidden"] != true || strings.Contains(fmt.Sprint(o), secret) {
		t.Fatalf("without a token: %v", o)
	}
	if o := oldest(testAdminToken); !strings.Contains(o["query"].(string), secret) || o["queryHidden"] != nil {
		t.Fatalf("with the admin token: %v", o)
	}
}
