package schema_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/queenside/queenside/schema"
	"github.com/queenside/queenside/sidecar/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// emptyDatabase creates a database with no queenside schema at all and
// returns its name.
func emptyDatabase(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	admin := pgtest.Pool(t, pgtest.AdminURL())
	name := "queenside_empty_" + time.Now().Format("150405_000000000")
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()+" TEMPLATE template0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		admin.Exec(context.Background(), "DROP DATABASE "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)") //nolint:errcheck
	})
	return name
}

func connect(t *testing.T, database string) *pgx.Conn {
	t.Helper()
	cfg, err := pgx.ParseConfig(pgtest.AdminURL())
	if err != nil {
		t.Fatal(err)
	}
	cfg.Database = database
	conn, err := pgx.ConnectConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func TestConcurrentMigrationsDoNotRace(t *testing.T) {
	db := emptyDatabase(t)
	const sidecars = 6
	conns := make([]*pgx.Conn, sidecars)
	for i := range conns {
		conns[i] = connect(t, db)
	}
	ms, err := schema.Migrations()
	if err != nil || len(ms) == 0 {
		t.Fatalf("migrations: %v", err)
	}
	var wg sync.WaitGroup
	applied := make([][]int, sidecars)
	errs := make([]error, sidecars)
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			applied[i], errs[i] = schema.MigrateVersions(context.Background(), c)
		}()
	}
	wg.Wait()
	total := 0
	for i, err := range errs {
		if err != nil {
			t.Fatalf("sidecar %d: %v", i, err)
		}
		total += len(applied[i])
	}
	if total != len(ms) {
		t.Fatalf("migrations applied %d times in all, want each of %d once", total, len(ms))
	}
	var current string
	if err := conns[0].QueryRow(context.Background(), "SELECT current_database()").Scan(&current); err != nil || current != db {
		t.Fatalf("migrated %q, want %q (%v)", current, db, err)
	}
	var recorded int
	if err := conns[0].QueryRow(context.Background(), "SELECT count(*) FROM queenside.schema_migrations").Scan(&recorded); err != nil {
		t.Fatal(err)
	}
	if recorded != len(ms) {
		t.Fatalf("%d migrations recorded, want %d", recorded, len(ms))
	}
	// A later start finds nothing to do.
	again, err := schema.MigrateVersions(context.Background(), conns[0])
	if err != nil || len(again) != 0 {
		t.Fatalf("second run applied %v (%v)", again, err)
	}
}

func TestMigrationsAreNumberedInOrder(t *testing.T) {
	ms, err := schema.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	for i, m := range ms {
		if m.Version != i+1 {
			t.Fatalf("migration %s has version %d, want %d: versions must be 1, 2, 3...", m.Name, m.Version, i+1)
		}
	}
	if len(schema.Fingerprint()) != 64 {
		t.Fatal("fingerprint is not a sha256 hex digest")
	}
}

func TestAChangedMigrationIsRefused(t *testing.T) {
	db := emptyDatabase(t)
	conn := connect(t, db)
	if err := schema.Migrate(context.Background(), conn); err != nil {
		t.Fatal(err)
	}
	// As if this database had been set up by a build whose first migration differed.
	if _, err := conn.Exec(context.Background(), "UPDATE queenside.schema_migrations SET checksum = 'other' WHERE version = 1"); err != nil {
		t.Fatal(err)
	}
	err := schema.Migrate(context.Background(), conn)
	if !errors.Is(err, schema.ErrSchemaMismatch) {
		t.Fatalf("migrating over a different schema: %v, want ErrSchemaMismatch", err)
	}
	t.Log(err)
}

// A build runs on a schema one migration ahead of it (the next release
// migrating under it), and refuses one further ahead, saying why.
func TestASchemaMoreThanOneReleaseAheadIsRefused(t *testing.T) {
	ctx := context.Background()
	conn := connect(t, emptyDatabase(t))
	if err := schema.Migrate(ctx, conn); err != nil {
		t.Fatal(err)
	}
	ms, err := schema.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	newest := ms[len(ms)-1].Version
	next := func(v int) {
		t.Helper()
		if _, err := conn.Exec(ctx, "INSERT INTO queenside.schema_migrations (version, name, checksum, oldest_compatible) VALUES ($1, 'future', 'x', $2)", v, v-1); err != nil {
			t.Fatal(err)
		}
	}
	next(newest + 1)
	if err := schema.Migrate(ctx, conn); err != nil {
		t.Fatalf("one release ahead: %v, want it to run", err)
	}
	next(newest + 2)
	err = schema.Migrate(ctx, conn)
	if !errors.Is(err, schema.ErrSchemaTooNew) || !strings.Contains(err.Error(), fmt.Sprintf("up to %d", newest)) {
		t.Fatalf("two releases ahead: %v, want ErrSchemaTooNew naming this build's version", err)
	}
	t.Log(err)
}
