package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/queenside/queenside/schema"
)

// NewDatabase returns the URL of a fresh database cloned from the migrated
// template. It is dropped when the test ends, along with any connections
// still open to it.
func NewDatabase(t testing.TB) string {
	t.Helper()
	if !h.ready {
		t.Fatal("pgtest: NewDatabase needs pgtest.Main(m) in the package's TestMain")
	}
	tmpl, err := template()
	if err != nil {
		t.Fatalf("pgtest: template database: %v", err)
	}
	name := "queenside_test_" + randomHex(8)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := onEveryServer(ctx, "CREATE DATABASE "+ident(name)+" TEMPLATE "+ident(tmpl)); err != nil {
		t.Fatalf("pgtest: creating database: %v", err)
	}
	t.Cleanup(func() {
		if err := dropDatabase(name); err != nil {
			t.Errorf("pgtest: dropping %s: %v", name, err)
		}
	})
	return databaseURL(name)
}

// Pool opens a pool on url that is closed when the test ends.
func Pool(t testing.TB, url string) *pgxpool.Pool {
	t.Helper()
	p, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatalf("pgtest: pool: %v", err)
	}
	t.Cleanup(p.Close)
	return p
}

// dropDatabase drops name, forcing out connections tests left open (a
// leaked pool must not fail the next test's cleanup, nor leak the database).
// Servers before PostgreSQL 13 lack WITH (FORCE); there the backends are
// terminated by hand first.
func dropDatabase(name string) error {
	// Test contexts are already cancelled when cleanups run.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if h.cluster != nil {
		return dropOnEveryNode(ctx, name)
	}
	_, err := h.admin.Exec(ctx, "DROP DATABASE IF EXISTS "+ident(name)+" WITH (FORCE)")
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42601" { // syntax_error: no FORCE
		if _, err := h.admin.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1", name); err != nil {
			return err
		}
		_, err = h.admin.Exec(ctx, "DROP DATABASE IF EXISTS "+ident(name))
	}
	return err
}

// databaseURL is the URL of database name on the server in use.
func databaseURL(name string) string {
	if h.server != nil {
		return h.server.URL(name)
	}
	return withDatabase(h.given, name)
}

// withDatabase rewrites a connection string, URL or keyword/value, to name
// another database on the same server with the same credentials.
func withDatabase(conn, name string) string {
	if strings.HasPrefix(conn, "postgres://") || strings.HasPrefix(conn, "postgresql://") {
		u, err := url.Parse(conn)
		if err == nil {
			u.Path = "/" + name
			u.RawPath = ""
			q := u.Query()
			if q.Has("dbname") { // would override the path
				q.Del("dbname")
				u.RawQuery = q.Encode()
			}
			return u.String()
		}
	}
	// Keyword/value: pgx lets a later key override an earlier one.
	return conn + " dbname=" + name
}

// redact hides a password in a connection string shown in messages.
func redact(conn string) string {
	if u, err := url.Parse(conn); err == nil && u.User != nil {
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
		}
		return u.String()
	}
	return conn
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func ident(s string) string { return pgx.Identifier{s}.Sanitize() }

// templateLockKey serialises template creation among test binaries sharing
// one server ("qs-tmpl" in ASCII). Distinct from schema's migration lock.
const templateLockKey int64 = 0x71732d746d706c

// template returns the name of the migrated template database, creating it
// the first time a binary needs it.
func template() (string, error) {
	h.tmplOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		h.tmpl = "queenside_tmpl_" + schema.Fingerprint()[:12]
		h.tmplErr = ensureTemplate(ctx, h.tmpl)
	})
	return h.tmpl, h.tmplErr
}

// ensureTemplate creates the template unless a finished one exists. The
// name is a digest of the migrations, so an existing template is exactly
// the schema wanted and a changed schema gets a new one. Creation happens
// under an advisory lock on the admin database because several test
// binaries may share a server and race to create it; "finished" means
// marked as a template, which happens last, so a database left half-made by
// a crashed run is dropped and made again.
func ensureTemplate(ctx context.Context, name string) error {
	conn, err := pgx.Connect(ctx, h.adminURL)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background()) // also releases the lock

	ready := func() (exists, done bool, err error) {
		err = conn.QueryRow(ctx, "SELECT true, datistemplate FROM pg_database WHERE datname = $1", name).Scan(&exists, &done)
		if errors.Is(err, pgx.ErrNoRows) {
			return false, false, nil
		}
		return exists, done, err
	}
	if _, done, err := ready(); err != nil || done {
		return err
	}
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", templateLockKey); err != nil {
		return err
	}
	exists, done, err := ready()
	if err != nil || done {
		return err
	}
	if exists {
		if _, err := conn.Exec(ctx, "DROP DATABASE "+ident(name)+" WITH (FORCE)"); err != nil {
			return fmt.Errorf("dropping unfinished template: %w", err)
		}
	}
	if h.cluster != nil {
		// On every node, with the extension and the workers added.
		if err := h.cluster.CreateDatabase(ctx, name); err != nil {
			return err
		}
	} else if _, err := conn.Exec(ctx, "CREATE DATABASE "+ident(name)+" TEMPLATE template0"); err != nil {
		// template0 rather than the default template1, which a shared
		// server may have customised.
		return err
	}
	if h.cluster != nil {
		if err := h.cluster.Migrate(ctx, name, 0); err != nil {
			return fmt.Errorf("migrating template: %w", err)
		}
	} else if err := migrate(ctx, databaseURL(name)); err != nil {
		return err
	}
	// No connections: CREATE DATABASE ... TEMPLATE fails while anyone is
	// connected to the template (on Citus, the nodes' connections to each
	// other and its maintenance daemon too).
	if err := onEveryServer(ctx, "ALTER DATABASE "+ident(name)+" WITH IS_TEMPLATE true ALLOW_CONNECTIONS false"); err != nil {
		return err
	}
	if h.cluster != nil {
		return onEveryServer(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = "+literal(name))
	}
	return nil
}

func migrate(ctx context.Context, url string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if err := schema.Migrate(ctx, conn); err != nil {
		return fmt.Errorf("migrating template: %w", err)
	}
	return nil
}

// onEveryServer runs sql in the maintenance database of the server in use
// or, on Citus, of every node: a database there is one per node, its
// shards on the workers.
func onEveryServer(ctx context.Context, sql string) error {
	if h.cluster == nil {
		_, err := h.admin.Exec(ctx, sql)
		return err
	}
	for _, s := range h.cluster.Nodes() {
		conn, err := pgx.Connect(ctx, s.URL("postgres"))
		if err != nil {
			return err
		}
		_, err = conn.Exec(ctx, sql)
		conn.Close(context.Background())
		if err != nil {
			return fmt.Errorf("%s: %w", s.DataDir(), err)
		}
	}
	return nil
}

// dropOnEveryNode drops name on every node of the cluster. A node's
// sessions in it (Citus's daemon, the coordinator's connections closing)
// are ended first, and the drop is tried again while one is still there.
func dropOnEveryNode(ctx context.Context, name string) error {
	var err error
	for try := 0; try < 10; try++ {
		if err = onEveryServer(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = "+literal(name)); err != nil {
			return err
		}
		err = onEveryServer(ctx, "DROP DATABASE IF EXISTS "+ident(name)+" WITH (FORCE)")
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "55006" { // object_in_use
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
	return err
}

func literal(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
