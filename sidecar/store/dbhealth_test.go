package store

import (
	"context"
	"fmt"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/queenside/queenside/sidecar/pgserver"
	"github.com/queenside/queenside/sidecar/pgtest"
)

// asRole is dbURL with the user changed to role.
func asRole(t *testing.T, dbURL, role string) string {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil || u.Scheme == "" {
		return dbURL + " user=" + role // keyword/value: a later key wins
	}
	u.User = url.User(role)
	return u.String()
}

// A role without pg_monitor reads the health without failing, and is told
// what it cannot see; with pg_monitor it sees other roles' transactions.
func TestDatabaseHealthWithAndWithoutPgMonitor(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dbURL := pgtest.NewDatabase(t)
	admin := pgtest.Pool(t, dbURL)
	role := fmt.Sprintf("qs_monitor_%x", time.Now().UnixNano())
	if _, err := admin.Exec(ctx, "CREATE ROLE "+pgx.Identifier{role}.Sanitize()+" LOGIN"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Exec(context.Background(), "DROP ROLE IF EXISTS "+pgx.Identifier{role}.Sanitize()) }) //nolint:errcheck
	// The superuser's transaction, open with an xid.
	tx, err := admin.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background()) //nolint:errcheck
	var xid int64
	var pid int32
	if err := tx.QueryRow(ctx, "SELECT txid_current(), pg_backend_pid()").Scan(&xid, &pid); err != nil {
		t.Fatal(err)
	}

	read := func() DatabaseHealth {
		t.Helper()
		s, err := Open(ctx, asRole(t, dbURL, role), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		h, err := s.DatabaseHealth(ctx)
		if err != nil {
			t.Fatalf("as %s: %v", role, err)
		}
		return h
	}
	h := read()
	if h.OldestTransaction != nil || h.Connections.Hidden < 1 || !hasNote(h.Notes, "grant it pg_monitor") ||
		len(h.Tables) == 0 || h.Tables[0].TotalBytes <= 0 {
		t.Fatalf("without pg_monitor: %+v", h)
	}
	if _, err := admin.Exec(ctx, "GRANT pg_monitor TO "+pgx.Identifier{role}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	h = read()
	if h.OldestTransaction == nil || h.OldestTransaction.PID != pid || !h.OldestTransaction.HoldsHorizon ||
		h.Connections.Hidden != 0 || hasNote(h.Notes, "pg_monitor") {
		t.Fatalf("with pg_monitor: %+v", h)
	}
}

// hasNote reports whether a note says text (on Citus another note says
// that the figures are the coordinator's).
func hasNote(notes []string, text string) bool {
	return slices.ContainsFunc(notes, func(n string) bool { return strings.Contains(n, text) })
}

// On a primary, its standby and an unused slot are listed; on the
// standby, its own replay.
func TestDatabaseHealthOnAPrimaryAndItsStandby(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	primary, err := pgserver.Start(ctx, pgserver.Options{Dir: filepath.Join(dir, "primary"), Fast: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { primary.Stop("immediate") }) //nolint:errcheck // best effort
	standby, err := pgserver.StartStandby(ctx, primary, pgserver.Options{Dir: filepath.Join(dir, "replica"), Fast: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { standby.Stop("immediate") }) //nolint:errcheck // best effort
	open := func(url string) *Store {
		s, err := Open(ctx, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		return s
	}
	onPrimary, onStandby := open(primary.URL("postgres")), open(standby.URL("postgres"))
	for _, sql := range []string{
		"SELECT pg_create_physical_replication_slot('left_behind', true)",
		"CREATE TABLE written AS SELECT 1 AS n",
	} {
		if _, err := onPrimary.pool.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	// until the standby streams, has replayed the table and has told the
	// primary so (replay_lsn is NULL until its first status reply)
	for {
		var replayed bool
		if err := onStandby.pool.QueryRow(ctx, "SELECT to_regclass('written') IS NOT NULL").Scan(&replayed); err != nil {
			t.Fatal(err)
		}
		p, err := onPrimary.DatabaseHealth(ctx)
		if err != nil {
			t.Fatal(err)
		}
		s, err := onStandby.DatabaseHealth(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Standbys) == 1 && p.Standbys[0].State == "streaming" && p.Standbys[0].ReplayLagBytes != nil &&
			replayed && s.Replay != nil && s.Replay.LastReplayAt != nil && s.Replay.CaughtUp {
			if p.InRecovery || p.Replay != nil || p.Standbys[0].Application != "replica" {
				t.Fatalf("on the primary: %+v", p)
			}
			if len(p.ReplicationSlots) != 1 || p.ReplicationSlots[0].Slot != "left_behind" || p.ReplicationSlots[0].Active ||
				p.ReplicationSlots[0].RetainedWALBytes == nil || p.ReplicationSlots[0].XidAge != nil {
				t.Fatalf("slots: %+v", p.ReplicationSlots)
			}
			if !s.InRecovery || len(s.Standbys) != 0 || *s.Replay.BytesBehind != 0 || len(s.Problems) != 0 {
				t.Fatalf("on the standby: %+v, replay %+v", s, *s.Replay)
			}
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("the standby did not stream and replay in time: primary %+v; standby %+v", p.Standbys, s.Replay)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// An older transaction without an xid or a snapshot gives way, as the
// oldest, to a younger one that holds back the horizon.
func TestDatabaseHealthPrefersTheTransactionHoldingTheHorizon(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dbURL := pgtest.NewDatabase(t)
	pool := pgtest.Pool(t, dbURL)
	begin := func(sql string) int32 {
		t.Helper()
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tx.Rollback(context.Background()) }) //nolint:errcheck
		// Exec without arguments is a simple query: no portal keeps its
		// snapshot after it.
		if _, err := tx.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
		return int32(tx.Conn().PgConn().PID())
	}
	idle := begin("SELECT 1") // read committed: no snapshot kept
	time.Sleep(50 * time.Millisecond)
	holding := begin("SELECT txid_current()")
	s, err := Open(ctx, dbURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	h, err := s.DatabaseHealth(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if o := h.OldestTransaction; o == nil || o.PID != holding || !o.HoldsHorizon {
		t.Fatalf("oldest: %+v, want pid %d (not %d)", o, holding, idle)
	}
	// Without the younger one, the older is the oldest, holding nothing.
	// (The cast: Citus adds an overload of pg_terminate_backend.)
	if _, err := pool.Exec(ctx, "SELECT pg_terminate_backend($1::int)", holding); err != nil {
		t.Fatal(err)
	}
	for {
		if h, err = s.DatabaseHealth(ctx); err != nil {
			t.Fatal(err)
		}
		if o := h.OldestTransaction; o != nil && o.PID == idle {
			if o.HoldsHorizon || o.XidAge != nil || o.State != "idle in transaction" {
				t.Fatalf("the older one: %+v", o)
			}
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("oldest after the younger ended: %+v", h.OldestTransaction)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
