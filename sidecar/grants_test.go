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

// appSidecar is a private PostgreSQL with a login role of the test's own,
// and a sidecar logged in as it.
type appSidecar struct {
	pg     *privatePostgres
	role   string
	appURL string
	sc     *sidecarProcess
}

// startAppSidecar starts the sidecar as the role before the schema exists.
func startAppSidecar(t *testing.T, ctx context.Context) *appSidecar {
	t.Helper()
	pgtest.SkipOnCitus(t, "the private cluster is migrated by its owner before the test starts")
	a := &appSidecar{pg: startPrivatePostgres(t), role: fmt.Sprintf("qs_app_%x", time.Now().UnixNano())}
	if _, err := a.pg.pool(t).Exec(ctx, "CREATE ROLE "+pgx.Identifier{a.role}.Sanitize()+" LOGIN"); err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(a.pg.url)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(a.role)
	a.appURL = u.String()
	a.sc = launchSidecar(t, a.appURL, t.TempDir())
	return a
}

// migrate migrates the schema as its owner and runs grants (SQL, %[1]s
// the role). The role is given no privilege on the schema's tables.
func (a *appSidecar) migrate(t *testing.T, ctx context.Context, grants ...string) {
	t.Helper()
	conn := a.owner(t, ctx)
	if err := schema.Migrate(ctx, conn); err != nil {
		t.Fatal(err)
	}
	a.exec(t, ctx, grants...)
	waitFor(t, 20*time.Second, "the sidecar to be ready once the owner migrated", func() bool {
		return a.sc.health(t).Status == protocol.HealthOK
	})
}

func (a *appSidecar) owner(t *testing.T, ctx context.Context) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(ctx, a.pg.url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// exec runs statements as the owner, %[1]s in each standing for the role.
func (a *appSidecar) exec(t *testing.T, ctx context.Context, sqls ...string) {
	t.Helper()
	conn := a.owner(t, ctx)
	for _, sql := range sqls {
		if strings.Contains(sql, "%[1]s") {
			sql = fmt.Sprintf(sql, a.role)
		}
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
}

func wantForbidden(t *testing.T, what string, err error, message string) {
	t.Helper()
	var pe *protocol.Error
	if !errors.As(err, &pe) || pe.Code != protocol.CodeForbidden || pe.Retryable || !strings.Contains(pe.Message, message) {
		t.Fatalf("%s: %v, want forbidden: %s", what, err, message)
	}
}

// A sidecar logged in as a role that does not own the schema does not
// migrate it: it says so once and serves, and is ready as soon as the
// owner has migrated. It pushes only to the queues its role was granted
// produce on: a push of several queues stores the items of the granted
// ones and refuses the others, each forbidden, naming the grant that
// would allow it, and creates nothing for them; a grant or a revoke
// takes effect at the next call, and the SQL API refuses alike.
func TestARoleThatIsNotTheOwnerPushesWhereItWasGranted(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a := startAppSidecar(t, ctx)
	role, sc := a.role, a.sc
	waitFor(t, 10*time.Second, "the sidecar to say it waits for the owner", func() bool {
		return strings.Contains(sc.logText(), "waiting for the schema's owner to migrate it") &&
			strings.Contains(sc.logText(), "may not create it")
	})
	if h := sc.health(t); h.Status != protocol.HealthUnavailable {
		t.Fatalf("health before the owner migrated: %+v", h)
	}
	a.migrate(t, ctx, "SELECT queenside.grant('%[1]s', 'orders.*', ARRAY['produce'])")
	if n := strings.Count(sc.logText(), "waiting for the schema's owner"); n != 1 {
		t.Fatalf("the wait was said %d times, want once", n)
	}
	admin := a.pg.pool(t)

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

	a.exec(t, ctx, "SELECT queenside.grant('%[1]s', 'billing', ARRAY['produce'])")
	mustPush(t, c, item(t, "billing", "p", "b1", 2))
	a.exec(t, ctx, "SELECT queenside.revoke('%[1]s', 'orders.*')")
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

	app, err := pgx.Connect(ctx, a.appURL)
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

// The role consumes only where it was granted consume, and only as the
// groups its grant names: a pop, a new group, an ack, a renew and a
// release are each refused forbidden otherwise, and a revoke holds from
// the next call, for the leases already taken too. The SQL API's
// ack_message is held alike.
func TestARoleThatIsNotTheOwnerConsumesWhereItWasGranted(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a := startAppSidecar(t, ctx)
	a.migrate(t, ctx, "SELECT queenside.grant('%[1]s', 'orders', ARRAY['produce'])")
	c := dialClient(t, a.sc.socket)
	for i := range 4 {
		mustPush(t, c, item(t, "orders", "p", fmt.Sprintf("o%d", i), i))
	}
	_, err := c.Pop(ctx, protocol.PopArgs{Queue: "orders", Group: "workers-1"})
	wantForbidden(t, "a pop without consume", err, a.role+" may not consume orders (group workers-1)")
	var groups int
	if err := a.pg.pool(t).QueryRow(ctx, "SELECT count(*) FROM queenside.groups").Scan(&groups); err != nil || groups != 0 {
		t.Fatalf("the refused pop made %d groups (%v)", groups, err)
	}

	a.exec(t, ctx, "SELECT queenside.grant('%[1]s', 'orders', ARRAY['consume'], 'workers*')")
	_, err = c.Pop(ctx, protocol.PopArgs{Queue: "orders", Group: "auditors"})
	wantForbidden(t, "a pop as a group the grant does not name", err, "may not consume orders (group auditors)")
	pop, err := c.Pop(ctx, protocol.PopArgs{Queue: "orders", Group: "workers-1", Batch: 4})
	if err != nil || len(pop.Messages) != 4 {
		t.Fatalf("a pop where granted: %+v, %v", pop, err)
	}
	lease := pop.Messages[0].LeaseID
	off := pop.Messages[0].Offset
	if _, err := c.Renew(ctx, 30, lease); err != nil {
		t.Fatalf("renew where granted: %v", err)
	}
	if res, err := c.Ack(ctx, protocol.AckItem{LeaseID: lease, Offset: &off}); err != nil || !res.Results[0].Success {
		t.Fatalf("ack where granted: %+v, %v", res, err)
	}

	a.exec(t, ctx, "SELECT queenside.revoke('%[1]s', 'orders', ARRAY['consume'])")
	off1 := pop.Messages[1].Offset
	_, err = c.Ack(ctx, protocol.AckItem{LeaseID: lease, Offset: &off1})
	wantForbidden(t, "an ack after the revoke", err, "may not consume orders (group workers-1)")
	_, err = c.Renew(ctx, 30, lease)
	wantForbidden(t, "a renew after the revoke", err, "may not consume orders")
	_, err = c.Release(ctx, lease)
	wantForbidden(t, "a release after the revoke", err, "may not consume orders")

	app, err := pgx.Connect(ctx, a.appURL)
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close(context.Background())
	_, err = app.Exec(ctx, "SELECT * FROM queenside.ack_message($1, $2)", lease, off1)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "42501" || !strings.Contains(pgErr.Message, "may not consume orders") {
		t.Fatalf("the SQL API's ack_message after the revoke: %v", err)
	}
	var committed int64
	if err := a.pg.pool(t).QueryRow(ctx, "SELECT c.committed FROM queenside.cursors c JOIN queenside.groups g ON g.id = c.group_id WHERE g.name = 'workers-1'").Scan(&committed); err != nil || committed != off+1 {
		t.Fatalf("the cursor stands at %d (%v), want %d: a refused ack moved it", committed, err, off+1)
	}
}
