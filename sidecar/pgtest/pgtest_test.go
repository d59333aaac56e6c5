package pgtest_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/queenside/queenside/sidecar/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func currentDatabase(t *testing.T, url string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var name string
	if err := pgtest.Pool(t, url).QueryRow(ctx, "SELECT current_database()").Scan(&name); err != nil {
		t.Fatal(err)
	}
	return name
}

func TestTwoDatabases(t *testing.T) {
	a, b := pgtest.NewDatabase(t), pgtest.NewDatabase(t)
	if a == b {
		t.Fatalf("both databases have URL %s", a)
	}
	na, nb := currentDatabase(t, a), currentDatabase(t, b)
	if na == nb {
		t.Fatalf("both URLs reach database %s", na)
	}

	// Cloned from the migrated template: the migrations' bookkeeping is there.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var n int
	if err := pgtest.Pool(t, a).QueryRow(ctx, "SELECT count(*) FROM queenside.schema_migrations").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatal("no migrations recorded in the new database")
	}
}

func TestDroppedAtCleanup(t *testing.T) {
	var name string
	t.Run("use", func(t *testing.T) {
		url := pgtest.NewDatabase(t)
		name = currentDatabase(t, url)
		// A connection left open must not stop the drop.
		conn, err := pgx.Connect(context.Background(), url)
		if err != nil {
			t.Fatal(err)
		}
		_ = conn
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, pgtest.AdminURL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		t.Fatal(err)
	}
	if exists {
		t.Fatalf("database %s still exists after its test ended", name)
	}
}

func TestServer(t *testing.T) {
	if os.Getenv(pgtest.URLEnv) != "" {
		if pgtest.Server() != nil {
			t.Fatal("Server() is not nil with TEST_DATABASE_URL set")
		}
		return
	}
	if pgtest.Server() == nil {
		t.Fatal("Server() is nil although the harness started one")
	}
}

func TestParallel(t *testing.T) {
	for i := 0; i < 8; i++ {
		t.Run("db", func(t *testing.T) {
			t.Parallel()
			currentDatabase(t, pgtest.NewDatabase(t))
		})
	}
}
