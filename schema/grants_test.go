package schema_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/queenside/queenside/schema"
	"github.com/queenside/queenside/sidecar/pgtest"
)

// roleConn creates a login role of its own for the test and connects to
// database as it.
func roleConn(t *testing.T, owner *pgx.Conn, database, role string) *pgx.Conn {
	t.Helper()
	ctx := context.Background()
	if _, err := owner.Exec(ctx, "CREATE ROLE "+pgx.Identifier{role}.Sanitize()+" LOGIN"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		owner.Exec(context.Background(), "DROP OWNED BY "+pgx.Identifier{role}.Sanitize())       //nolint:errcheck
		owner.Exec(context.Background(), "DROP ROLE IF EXISTS "+pgx.Identifier{role}.Sanitize()) //nolint:errcheck
	})
	cfg, err := pgx.ParseConfig(pgtest.AdminURL())
	if err != nil {
		t.Fatal(err)
	}
	cfg.Database, cfg.User = database, role
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func may(t *testing.T, conn *pgx.Conn, queue, right string, group any) bool {
	t.Helper()
	var ok bool
	if err := conn.QueryRow(context.Background(), "SELECT queenside.may($1, $2, $3)", queue, right, group).Scan(&ok); err != nil {
		t.Fatal(err)
	}
	return ok
}

// refusal returns err's PostgreSQL error if it is queenside's refusal:
// SQLSTATE 42501 with the schema named.
func refusal(err error) *pgconn.PgError {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42501" && pgErr.SchemaName == "queenside" {
		return pgErr
	}
	return nil
}

// Rights are granted on queues by name or prefix, consume limited to
// groups the same way; the owner may do everything and alone grants; a
// refusal names the role, the right, the queue and the grant that would
// allow it; a revoke takes effect at the next call.
func TestGrantsDecideWhatARoleMay(t *testing.T) {
	ctx := context.Background()
	db := emptyDatabase(t)
	owner := connect(t, db)
	if err := schema.Migrate(ctx, owner); err != nil {
		t.Fatal(err)
	}
	role := fmt.Sprintf("qs_app_%x", time.Now().UnixNano())
	app := roleConn(t, owner, db, role)

	if !may(t, owner, "anything", "manage", nil) {
		t.Fatal("the owner may not manage a queue")
	}
	if may(t, app, "orders", "produce", nil) {
		t.Fatal("a role with no grant may produce")
	}
	for _, g := range []string{
		fmt.Sprintf("SELECT queenside.grant('%s', 'orders', ARRAY['produce'])", role),
		fmt.Sprintf("SELECT queenside.grant('%s', 'billing.*', ARRAY['consume', 'read'], 'workers*')", role),
		fmt.Sprintf("SELECT queenside.grant('%s', 'orders', ARRAY['read'])", role), // added to produce
		fmt.Sprintf("SELECT queenside.grant('%s', 'ops.*', ARRAY['manage'])", role),
	} {
		if _, err := owner.Exec(ctx, g); err != nil {
			t.Fatalf("%s: %v", g, err)
		}
	}
	cases := []struct {
		queue, right string
		group        any
		want         bool
	}{
		{"orders", "produce", nil, true},
		{"orders", "read", nil, true},
		{"orders", "consume", nil, false},
		{"orders-eu", "produce", nil, false},
		{"billing.eu", "consume", "workers-1", true},
		{"billing.eu", "consume", nil, true},
		{"billing.eu", "consume", "auditors", false},
		{"billing.eu", "read", "auditors", true}, // groups limit consume only
		{"billing.eu", "manage", nil, false},
		{"billing", "read", nil, false},
		{"ops.jobs", "manage", nil, true},
		{"ops.jobs", "read", nil, true}, // manage includes read
		{"ops.jobs", "produce", nil, false},
		{"ops.jobs", "consume", nil, false},
	}
	for _, c := range cases {
		if got := may(t, app, c.queue, c.right, c.group); got != c.want {
			t.Errorf("may %s %s (group %v) = %v, want %v", c.right, c.queue, c.group, got, c.want)
		}
	}

	_, err := app.Exec(ctx, "SELECT queenside.refuse_unless('orders', 'consume')")
	want := fmt.Sprintf("%s may not consume orders: grant it with queenside grant --role %s --queue orders --rights consume", role, role)
	if r := refusal(err); r == nil || r.Message != want {
		t.Fatalf("refusal = %v, want 42501 from schema queenside: %q", err, want)
	}
	if _, err := app.Exec(ctx, "SELECT queenside.refuse_unless('orders', 'produce')"); err != nil {
		t.Fatalf("refuse_unless of a right granted: %v", err)
	}
	_, err = app.Exec(ctx, fmt.Sprintf("SELECT queenside.grant('%s', 'orders', ARRAY['manage'])", role))
	if r := refusal(err); r == nil || !strings.Contains(r.Message, "only the owner of schema queenside") {
		t.Fatalf("a grant by a role that is not the owner: %v", err)
	}
	if _, err := app.Exec(ctx, "SELECT * FROM queenside.queue_grants"); err == nil {
		t.Fatal("a role that is not the owner reads the grants table")
	}

	var rows int
	if err := owner.QueryRow(ctx, "SELECT count(*) FROM queenside.grants WHERE role = $1", role).Scan(&rows); err != nil || rows != 3 {
		t.Fatalf("the grants view lists %d rows (%v), want 3", rows, err)
	}
	var had bool
	if err := owner.QueryRow(ctx, "SELECT queenside.revoke($1, 'orders', ARRAY['produce'])", role).Scan(&had); err != nil || !had {
		t.Fatalf("revoke = %v, %v", had, err)
	}
	if may(t, app, "orders", "produce", nil) || !may(t, app, "orders", "read", nil) {
		t.Fatal("a revoke of produce did not take produce alone")
	}
	if err := owner.QueryRow(ctx, "SELECT queenside.revoke($1, 'orders', ARRAY['produce'])", role).Scan(&had); err != nil || had {
		t.Fatalf("a second revoke = %v, %v; want false", had, err)
	}
	if err := owner.QueryRow(ctx, "SELECT queenside.revoke($1, 'billing.*')", role).Scan(&had); err != nil || !had {
		t.Fatalf("revoke of every right = %v, %v", had, err)
	}
	if may(t, app, "billing.eu", "read", nil) {
		t.Fatal("a revoke of every right left read")
	}

	for _, bad := range []string{
		"SELECT queenside.grant('no_such_role_qs', 'orders', ARRAY['produce'])",
		fmt.Sprintf("SELECT queenside.grant('%s', 'or*ders', ARRAY['produce'])", role),
		fmt.Sprintf("SELECT queenside.grant('%s', 'orders', ARRAY['write'])", role),
		fmt.Sprintf("SELECT queenside.grant('%s', 'orders', ARRAY['produce'], 'g')", role),
		fmt.Sprintf("SELECT queenside.grant('%s', '', ARRAY['produce'])", role),
	} {
		var pgErr *pgconn.PgError
		if _, err := owner.Exec(ctx, bad); !errors.As(err, &pgErr) || pgErr.Code != "22023" {
			t.Errorf("%s: %v, want 22023", bad, err)
		}
	}
}
