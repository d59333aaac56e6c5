package sidecar

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/queenside/queenside/protocol"
	"github.com/queenside/queenside/schema"
	"github.com/queenside/queenside/sidecar/pgtest"
)

// A sidecar logged in as a role that does not own the schema does not
// migrate it: it says so once and serves, and is ready as soon as the
// owner has migrated. It pushes only to the queues its role was granted
// produce on: a push of several queues stores the items of the granted
// ones and refuses the others, each forbidden, naming the grant that
// would allow it, and creates nothing for them; a grant or a revoke
// takes effect at the next call, and the SQL API refuses alike.
func TestARoleThatIsNotTheOwnerPushesWhereItWasGranted(t *testing.T) {
	pgtest.SkipOnCitus(t, "the private cluster is migrated by its owner before the test starts")
	pg := startPrivatePostgres(t)
	admin := pg.pool(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	role := fmt.Sprintf("qs_orders_%x", time.Now().UnixNano())
	if _, err := admin.Exec(ctx, "CREATE ROLE "+pgx.Identifier{role}.Sanitize()+" LOGIN"); err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(pg.url)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role)
	appURL := u.String()

	sc := launchSidecar(t, appURL, t.TempDir())
	waitFor(t, 10*time.Second, "the sidecar to say it waits for the owner", func() bool {
		return strings.Contains(sc.logText(), "waiting for the schema's owner to migrate it") &&
			strings.Contains(sc.logText(), "may not create it")
	})
	if h := sc.health(t); h.Status != protocol.HealthUnavailable {
		t.Fatalf("health before the owner migrated: %+v", h)
	}

	conn, err := pgx.Connect(ctx, pg.url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if err := schema.Migrate(ctx, conn); err != nil {
		t.Fatal(err)
	}
	for _, sql := range []string{
		// What the calls that no grant decides yet need.
		"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA queenside TO " + pgx.Identifier{role}.Sanitize(),
		"GRANT USAGE ON ALL SEQUENCES IN SCHEMA queenside TO " + pgx.Identifier{role}.Sanitize(),
		fmt.Sprintf("SELECT queenside.grant('%s', 'orders.*', ARRAY['produce'])", role),
	} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	waitFor(t, 20*time.Second, "the sidecar to be ready once the owner migrated", func() bool {
		return sc.health(t).Status == protocol.HealthOK
	})
	if n := strings.Count(sc.logText(), "waiting for the schema's owner"); n != 1 {
		t.Fatalf("the wait was said %d times, want once", n)
	}

	c := dialClient(t, sc.socket)
	res, err := c.Push(ctx, item(t, "orders.eu", "p", "o1", 1), item(t, "billing", "p", "b1", 2), item(t, "orders.us", "p", "o2", 3))
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("%s may not produce billing: grant it with queenside grant --role %s --queue billing --rights produce", role, role)
	if res[0].Status != protocol.StatusQueued || res[2].Status != protocol.StatusQueued ||
		res[1].Status != protocol.StatusFailed || res[1].Error == nil || res[1].Error.Code != protocol.CodeForbidden ||
		res[1].Error.Retryable || res[1].Error.Message != want {
		t.Fatalf("a push to a granted and a refused queue: %+v", res)
	}
	var queues int
	if err := admin.QueryRow(ctx, "SELECT count(*) FROM queenside.queues WHERE name = 'billing'").Scan(&queues); err != nil || queues != 0 {
		t.Fatalf("the refused push left %d queue rows named billing (%v)", queues, err)
	}

	if _, err := conn.Exec(ctx, fmt.Sprintf("SELECT queenside.grant('%s', 'billing', ARRAY['produce'])", role)); err != nil {
		t.Fatal(err)
	}
	mustPush(t, c, item(t, "billing", "p", "b1", 2))
	if _, err := conn.Exec(ctx, fmt.Sprintf("SELECT queenside.revoke('%s', 'orders.*')", role)); err != nil {
		t.Fatal(err)
	}
	res, err = c.Push(ctx, item(t, "orders.eu", "p", "o3", 4))
	if err != nil || res[0].Error == nil || res[0].Error.Code != protocol.CodeForbidden {
		t.Fatalf("a push after the revoke: %+v, %v", res, err)
	}

	// Counted by role and right; logged once per right and queue however
	// often it comes.
	if _, err := c.Push(ctx, item(t, "orders.eu", "p", "o4", 5)); err != nil {
		t.Fatal(err)
	}
	sc.wantMetrics(t, fmt.Sprintf(`queenside_refusals_total{right="produce",role="%s"} 3`, role))
	if n := strings.Count(sc.logText(), "refused for want of a grant"); n != 2 {
		t.Fatalf("the refusals were logged %d times, want once for billing and once for orders.eu", n)
	}

	app, err := pgx.Connect(ctx, appURL)
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close(context.Background())
	_, err = app.Exec(ctx, "SELECT * FROM queenside.send('orders.eu', '\\x01'::bytea)")
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "42501" || !strings.Contains(pgErr.Message, "may not produce orders.eu") {
		t.Fatalf("the SQL API's send to a queue not granted: %v", err)
	}
	if msgs := storedMessages(t, admin, "orders.eu", "p"); len(msgs) != 1 || msgs[0].TransactionID != "o1" {
		t.Fatalf("orders.eu holds %+v, want o1 alone", msgs)
	}
}
