package sidecar

import (
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5"

	"github.com/queenside/queenside/protocol"
	"github.com/queenside/queenside/sidecar/pgtest"
	"github.com/queenside/queenside/sidecar/store"
)

// migrateLock is schema's advisory lock key ("queenside" in ASCII): a test
// that holds it keeps a starting sidecar migrating for as long as it likes.
const migrateLock int64 = 0x717565656e73

// heldBackDatabase is a fresh database whose migration the returned
// connection holds back, holding the migration lock until it lets go.
func heldBackDatabase(t *testing.T, ctx context.Context) (string, *pgx.Conn) {
	t.Helper()
	dbURL := pgtest.NewDatabase(t)
	holder, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { holder.Close(context.Background()) })
	if _, err := holder.Exec(ctx, "DROP SCHEMA queenside CASCADE"); err != nil {
		t.Fatal(err)
	}
	if _, err := holder.Exec(ctx, "SELECT pg_advisory_lock($1)", migrateLock); err != nil {
		t.Fatal(err)
	}
	return dbURL, holder
}

// A request that comes while the sidecar migrates waits for the schema,
// up to its own timeoutMs or a few seconds, instead of being refused: a
// configure sent as soon as hello answers, on a fresh database, is served
// once the migrations are done; a push then is stored, not spooled; one
// whose timeoutMs ends first is answered unavailable, saying why.
func TestRequestsWaitForTheSchemaWhileTheSidecarStarts(t *testing.T) {
	ctx := testContext(t)
	dbURL, holder := heldBackDatabase(t, ctx)
	// A push waits for the schema for half of the database timeout: 20 s
	// leaves it the whole readyWait, room for the migrations on a loaded
	// machine.
	p := launchSidecar(t, dbURL, filepath.Join(shortTempDir(t), "spool"), "--database-timeout", "20s")
	raw := dialRaw(t, p.socket)
	send := func(id uint64, op string, args any, timeoutMs uint64) {
		body, err := protocol.AppendRequest(nil, id, op, args, timeoutMs)
		if err != nil {
			t.Fatal(err)
		}
		raw.sendBody(body)
	}
	opts := protocol.DefaultQueueOptions()
	opts.RetryLimit = 7
	sent := time.Now()
	send(1, protocol.OpConfigure, protocol.ConfigureArgs{Queue: "early", Options: opts}, 0)
	send(2, protocol.OpStats, protocol.QueueArgs{Queue: "early"}, 300)

	// The one with 300 ms is answered first, unavailable, and says why.
	resp := raw.read()
	if resp.ID != 2 || resp.Error == nil || resp.Error.Code != protocol.CodeUnavailable || !resp.Error.Retryable ||
		!strings.Contains(resp.Error.Message, "not ready yet") {
		t.Fatalf("stats with timeoutMs 300 while migrating: %+v %+v", resp, resp.Error)
	}
	if waited := time.Since(sent); waited < 250*time.Millisecond {
		t.Fatalf("stats was answered after %v: it did not wait for its timeoutMs", waited)
	}
	time.Sleep(700 * time.Millisecond)
	// The push comes last, just before the migrations may start: it waits
	// for all of them.
	send(3, protocol.OpPush, protocol.PushArgs{Items: []protocol.PushItem{item(t, "early", "p", "first", 1)}}, 0)
	time.Sleep(100 * time.Millisecond)
	if _, err := holder.Exec(ctx, "SELECT pg_advisory_unlock($1)", migrateLock); err != nil {
		t.Fatal(err)
	}
	got := map[uint64]protocol.Response{}
	for range 2 {
		r := raw.read()
		got[r.ID] = r
	}
	if r := got[1]; r.Error != nil {
		t.Fatalf("configure sent while migrating: %+v", r.Error)
	}
	var conf protocol.ConfigureResult
	if err := protocol.Unmarshal(got[1].Result, &conf); err != nil || conf.Options.RetryLimit != 7 {
		t.Fatalf("configure's result: %+v %v", conf, err)
	}
	var push protocol.PushReply
	if err := protocol.Unmarshal(got[3].Result, &push); err != nil || got[3].Error != nil ||
		len(push.Results) != 1 || push.Results[0].Status != protocol.StatusQueued || push.Results[0].Offset == nil {
		t.Fatalf("push sent while migrating: %+v %v %+v, want queued (stored, not spooled)", push, err, got[3].Error)
	}

	// Once ready, nothing waits.
	start := time.Now()
	send(4, protocol.OpStats, protocol.QueueArgs{Queue: "early"}, 0)
	if r := raw.read(); r.Error != nil || time.Since(start) > 2*time.Second {
		t.Fatalf("stats once ready: %+v after %v", r.Error, time.Since(start))
	}
}

// An attempt to migrate that does not finish within its bound (here the
// migration lock held past it, as a stalled database would hold the
// attempt's statement) is made again rather than ending the sidecar's
// start; meanwhile the reason is noted for the waiting requests, and the
// migration is done once the lock is free.
func TestAnAttemptToMigrateCutByItsBoundIsMadeAgain(t *testing.T) {
	ctx := testContext(t)
	dbURL, holder := heldBackDatabase(t, ctx)
	st, err := store.OpenWith(ctx, store.Options{URL: dbURL}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var mu sync.Mutex
	var noted []error
	note := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		noted = append(noted, err)
	}
	// An attempt gets 4 s, room for the whole migration on a loaded
	// machine once the lock is free; the lock is held past the first.
	done := make(chan error, 1)
	go func() { done <- migrateUntilDone(ctx, st, hclog.NewNullLogger(), note, 4*time.Second) }()
	select {
	case err := <-done:
		t.Fatalf("migrating ended while the lock was held: %v", err)
	case <-time.After(4500 * time.Millisecond):
	}
	mu.Lock()
	cut := len(noted)
	last := noted[len(noted)-1]
	mu.Unlock()
	if cut < 1 || !store.IsUnavailable(last) || !strings.Contains(last.Error(), "the bound on an attempt to migrate") {
		t.Fatalf("%d attempts noted, the last: %v; want attempts cut by their bound, taken for the database unavailable", cut, last)
	}
	if _, err := holder.Exec(ctx, "SELECT pg_advisory_unlock($1)", migrateLock); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("migrating once the lock was free: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("not migrated 15 s after the lock was free")
	}
	var version int
	if err := holder.QueryRow(ctx, "SELECT max(version) FROM queenside.schema_migrations").Scan(&version); err != nil || version == 0 {
		t.Fatalf("schema version %d (%v) after migrating", version, err)
	}
}
