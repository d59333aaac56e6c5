package sidecar

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	queenside "github.com/queenside/queenside/clients/go"
	"github.com/queenside/queenside/protocol"
	"github.com/queenside/queenside/schema"
)

// appRole is an application's login role, its sidecar (whose dashboard
// takes the admin token sc.token), and its own connection to PostgreSQL
// (as the application's SQL API would use it).
type appRole struct {
	name string
	sc   *sidecarProcess
	c    *queenside.Client
	sql  *pgx.Conn
}

// rightsFixture is a private PostgreSQL migrated by its owner, with two
// application roles of sidecars of their own.
type rightsFixture struct {
	pg    *privatePostgres
	owner *pgxpool.Pool
	a, b  appRole
}

func startRightsFixture(t *testing.T, ctx context.Context) *rightsFixture {
	t.Helper()
	// On Citus the cluster comes migrated and distributed; the roles
	// made on the coordinator are made on every worker, where the calls
	// routed to a shard run, as the same role.
	f := &rightsFixture{pg: startPrivatePostgres(t)}
	f.owner = f.pg.pool(t)
	conn, err := f.owner.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	err = schema.Migrate(ctx, conn.Conn())
	conn.Release()
	if err != nil {
		t.Fatal(err)
	}
	stamp := time.Now().UnixNano()
	for i, r := range []*appRole{&f.a, &f.b} {
		r.name = fmt.Sprintf("qs_%c_%x", 'a'+i, stamp)
		f.ownerExec(t, ctx, "CREATE ROLE "+pgx.Identifier{r.name}.Sanitize()+" LOGIN")
		u, err := url.Parse(f.pg.url)
		if err != nil {
			t.Fatal(err)
		}
		u.User = url.User(r.name)
		dir := t.TempDir()
		token := fmt.Sprintf("%032x", stamp+int64(i))
		tokens := filepath.Join(dir, "admin-tokens")
		if err := os.WriteFile(tokens, []byte("admin:"+token+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		r.sc = launchSidecar(t, u.String(), filepath.Join(dir, "spool"), "--admin-token-file", tokens)
		r.sc.token = token
		waitFor(t, 20*time.Second, r.name+"'s sidecar to be ready", func() bool {
			return r.sc.health(t).Status == protocol.HealthOK
		})
		r.c = dialClient(t, r.sc.socket)
		if r.sql, err = pgx.Connect(ctx, u.String()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.sql.Close(context.Background()) })
	}
	return f
}

func (f *rightsFixture) ownerExec(t *testing.T, ctx context.Context, sql string, args ...any) {
	t.Helper()
	if _, err := f.owner.Exec(ctx, sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// fingerprint digests every row of every queenside table: what a refused
// call must leave as it found it.
func (f *rightsFixture) fingerprint(t *testing.T, ctx context.Context) map[string]string {
	t.Helper()
	rows, err := f.owner.Query(ctx, `SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = 'queenside' AND c.relkind IN ('r', 'p') ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, table := range tables {
		var sum string
		err := f.owner.QueryRow(ctx, fmt.Sprintf(
			"SELECT md5(coalesce(string_agg(t::text, '|' ORDER BY t::text), '')) FROM queenside.%s t",
			pgx.Identifier{table}.Sanitize())).Scan(&sum)
		if err != nil {
			t.Fatal(err)
		}
		out[table] = sum
	}
	return out
}

// refused tells whether err is the refusal of right on queue, by a
// sidecar (forbidden, naming them) or by PostgreSQL to the SQL API
// (42501 from schema queenside).
func refused(err error, right, queue string) bool {
	var pe *protocol.Error
	if errors.As(err, &pe) {
		return pe.Code == protocol.CodeForbidden && !pe.Retryable &&
			strings.Contains(pe.Message, " may not "+right+" "+queue)
	}
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42501" && pgErr.SchemaName == "queenside" &&
		strings.Contains(pgErr.Message, " may not "+right+" "+queue)
}

// itemErr is the error of a call answered item by item, as the call's
// when it has one.
func itemErr(err error, e *protocol.Error) error {
	if err != nil || e == nil {
		return err
	}
	return e
}

// A matrix of every operation of the socket, every function of the SQL
// API and every route of the dashboard's API, against each right granted
// and not granted, with two application roles and their two sidecars:
// role b holds every right on queue orders throughout, role a holds
// every right on other queues (other.*), and is given on orders, in turn,
// exactly the right each call needs. Not granted, a call is refused
// naming the right and the queue, and every queenside table is as it
// was; granted, it succeeds. A listing leaves orders out until the role
// may read it.
func TestTheRightsMatrix(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	f := startRightsFixture(t, ctx)
	a, b := &f.a, &f.b
	f.ownerExec(t, ctx, "SELECT queenside.grant($1, 'orders', ARRAY['produce', 'consume', 'read', 'manage'])", b.name)
	f.ownerExec(t, ctx, "SELECT queenside.grant($1, 'other.*', ARRAY['produce', 'consume', 'read', 'manage'])", a.name)

	// Role b makes what the calls touch: messages, a group with a lease,
	// another group, and dead letters.
	configure(t, b.c, "orders", func(o *protocol.QueueOptions) { o.RetryLimit = 0 })
	for i := range 12 {
		mustPush(t, b.c, item(t, "orders", "p", fmt.Sprintf("o%d", i), i))
	}
	popB := func(group string, n int) queenside.PopResult {
		t.Helper()
		p, err := b.c.Pop(ctx, protocol.PopArgs{Queue: "orders", Group: group, Batch: n})
		if err != nil || len(p.Messages) == 0 {
			t.Fatalf("b's pop as %s: %+v, %v", group, p, err)
		}
		return p
	}
	for range 6 { // a failed ack ends its lease: one message a pop
		m := popB("dead", 1).Messages[0]
		off := m.Offset
		if res, err := b.c.Ack(ctx, protocol.AckItem{LeaseID: m.LeaseID, Offset: &off, Status: protocol.AckFailed, Error: "boom"}); err != nil || !res.Results[0].Success {
			t.Fatalf("b's failed ack: %+v, %v", res, err)
		}
	}
	popB("spare", 1)
	leased := popB("g", 1).Messages[0]

	deadIDs := func() []int64 {
		rows, err := f.owner.Query(ctx, "SELECT id FROM queenside.dead_letters WHERE queue_name = 'orders' AND replayed_at IS NULL ORDER BY id")
		if err != nil {
			t.Fatal(err)
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil || len(ids) == 0 {
			t.Fatalf("dead letters of orders: %v, %v", ids, err)
		}
		return ids
	}
	// A lease of a's own, once it may consume, on a group of its own each
	// time: a group's lease holds the partition.
	groupsOfA := 0
	popA := func() protocol.Message {
		t.Helper()
		groupsOfA++
		group := fmt.Sprintf("a%d", groupsOfA)
		p, err := a.c.Pop(ctx, protocol.PopArgs{Queue: "orders", Group: group, Batch: 1})
		if err != nil || len(p.Messages) != 1 {
			t.Fatalf("a's pop as %s: %+v, %v", group, p, err)
		}
		return p.Messages[0]
	}
	listsOrders := func(names []string, err error) (bool, error) { return slices.Contains(names, "orders"), err }

	type call struct {
		what  string
		right string
		// refused runs the call as a without the right; granted, with it.
		refused, granted func() error
		// listing: not granted, the call succeeds and leaves orders out.
		listing func() (bool, error)
		// refusedAs is the right the refusal names, when not right: a
		// seek of a group is the group's consumer's or a manager's.
		refusedAs string
		// also are rights held throughout, the call's aside.
		also []string
	}
	sqlSend := func(sql string) func() error {
		return func() error { _, err := a.sql.Exec(ctx, sql); return err }
	}
	calls := []call{
		{what: "push", right: "produce", refused: func() error {
			res, err := a.c.Push(ctx, item(t, "orders", "p", "a1", 1))
			if err != nil {
				return err
			}
			return itemErr(nil, res[0].Error)
		}},
		{what: "transaction (its push)", right: "produce", refused: func() error {
			res, err := a.c.Transaction(ctx, nil, []protocol.PushItem{item(t, "orders", "p", "a2", 2)})
			if err != nil {
				return err
			}
			return itemErr(nil, res.Pushes[0].Error)
		}},
		{what: "SQL send", right: "produce", refused: sqlSend(`SELECT * FROM queenside.send('orders', '\x01'::bytea, 'p')`)},
		{what: "SQL send_batch", right: "produce", refused: sqlSend(`SELECT * FROM queenside.send_batch('orders', ARRAY['\x01'::bytea])`)},
		{what: "SQL send_json", right: "produce", refused: sqlSend(`SELECT * FROM queenside.send_json('orders', '{"a": 1}')`)},
		{what: "SQL send_json_batch", right: "produce", refused: sqlSend(`SELECT * FROM queenside.send_json_batch('orders', ARRAY['{"a": 1}'::jsonb])`)},
		{what: "pop", right: "consume", refused: func() error {
			_, err := a.c.Pop(ctx, protocol.PopArgs{Queue: "orders", Group: "g"})
			return err
		}, granted: func() error { popA(); return nil }},
		{what: "pop of one partition", right: "consume", refused: func() error {
			_, err := a.c.Pop(ctx, protocol.PopArgs{Queue: "orders", Partition: "p", Group: "g"})
			return err
		}, granted: func() error {
			_, err := a.c.Pop(ctx, protocol.PopArgs{Queue: "orders", Partition: "p", Group: "gp"})
			return err
		}},
		{what: "ack", right: "consume", refused: func() error {
			off := leased.Offset
			_, err := a.c.Ack(ctx, protocol.AckItem{LeaseID: leased.LeaseID, Offset: &off})
			return err
		}, granted: func() error {
			m := popA()
			res, err := a.c.Ack(ctx, protocol.AckItem{LeaseID: m.LeaseID, Offset: &m.Offset})
			if err == nil && !res.Results[0].Success {
				err = fmt.Errorf("ack: %+v", res.Results[0])
			}
			return err
		}},
		{what: "transaction (its ack)", right: "consume", refused: func() error {
			off := leased.Offset
			res, err := a.c.Transaction(ctx, []protocol.AckItem{{LeaseID: leased.LeaseID, Offset: &off}}, nil)
			if err != nil {
				return err
			}
			if !res.Acks[0].Success {
				return fmt.Errorf("ack in a transaction: %+v", res.Acks[0])
			}
			return nil
		}},
		{what: "SQL ack_message", right: "consume", refused: func() error {
			_, err := a.sql.Exec(ctx, "SELECT * FROM queenside.ack_message($1, $2)", leased.LeaseID, leased.Offset)
			return err
		}, granted: func() error {
			m := popA()
			var ok bool
			err := a.sql.QueryRow(ctx, "SELECT success FROM queenside.ack_message($1, $2)", m.LeaseID, m.Offset).Scan(&ok)
			if err == nil && !ok {
				err = errors.New("ack_message did not succeed")
			}
			return err
		}},
		{what: "renew", right: "consume", refused: func() error {
			_, err := a.c.Renew(ctx, 30, leased.LeaseID)
			return err
		}, granted: func() error {
			res, err := a.c.Renew(ctx, 30, popA().LeaseID)
			if err == nil && !res[0].Success {
				err = fmt.Errorf("renew: %+v", res[0])
			}
			return err
		}},
		{what: "release", right: "consume", refused: func() error {
			_, err := a.c.Release(ctx, leased.LeaseID)
			return err
		}, granted: func() error {
			res, err := a.c.Release(ctx, popA().LeaseID)
			if err == nil && !res[0].Success {
				err = fmt.Errorf("release: %+v", res[0])
			}
			return err
		}},
		{what: "seek of a group it consumes", right: "consume", refused: func() error {
			_, err := a.c.Seek(ctx, "orders", "g", "", queenside.SeekBeginning)
			return err
		}},
		{what: "stats", right: "read", refused: func() error { _, err := a.c.Stats(ctx, "orders"); return err }},
		{what: "groups", right: "read", refused: func() error { _, err := a.c.Groups(ctx, "orders"); return err }},
		{what: "dlq", right: "read", refused: func() error {
			_, err := a.c.DLQ(ctx, protocol.DLQArgs{Queue: "orders"})
			return err
		}},
		{what: "dlqSummary", right: "read", refused: func() error { _, err := a.c.DLQSummary(ctx, "orders", 10); return err }},
		{what: "queues", right: "read", listing: func() (bool, error) {
			qs, err := a.c.Queues(ctx)
			names := []string{}
			for _, q := range qs {
				names = append(names, q.Queue)
			}
			return listsOrders(names, err)
		}},
		{what: "groups of every queue", right: "read", listing: func() (bool, error) {
			gs, err := a.c.Groups(ctx, "")
			names := []string{}
			for _, g := range gs {
				names = append(names, g.Queue)
			}
			return listsOrders(names, err)
		}},
		{what: "dlqSummary of every queue", right: "read", listing: func() (bool, error) {
			sum, err := a.c.DLQSummary(ctx, "", 100)
			names := []string{}
			for _, e := range sum {
				names = append(names, e.Queue)
			}
			return listsOrders(names, err)
		}},
		{what: "configure", right: "manage", refused: func() error {
			_, err := a.c.Configure(ctx, "orders", protocol.QueueOptions{LeaseSeconds: 30, RetryLimit: 0})
			return err
		}},
		{what: "seek of any group", right: "manage", refusedAs: "consume", refused: func() error {
			_, err := a.c.Seek(ctx, "orders", "spare", "", queenside.SeekEnd)
			return err
		}},
		{what: "deleteGroup", right: "manage", refused: func() error {
			_, err := a.c.DeleteGroup(ctx, "orders", "spare")
			return err
		}},
		// Dead letters named by id: a role that may not even read their
		// queue is told they are not there (below); one that may read it,
		// that it may not manage it.
		{what: "dlqDelete by ids", right: "manage", also: []string{"read"}, refused: func() error {
			_, err := a.c.DLQDelete(ctx, protocol.DLQSelection{IDs: deadIDs()[:1]})
			return err
		}},
		{what: "dlqDelete by filter", right: "manage", refused: func() error {
			_, err := a.c.DLQDelete(ctx, protocol.DLQSelection{DLQFilter: protocol.DLQFilter{Queue: "orders"}, Limit: 1})
			return err
		}},
		{what: "dlqReplay by ids", right: "manage", also: []string{"read", "produce"}, refused: func() error {
			res, err := a.c.DLQReplay(ctx, deadIDs()[0])
			if err != nil {
				return err
			}
			return itemErr(nil, res[0].Error)
		}},
		{what: "dlqReplay by filter", right: "manage", also: []string{"produce"}, refused: func() error {
			res, err := a.c.DLQReplayBatch(ctx, protocol.DLQReplayArgs{DLQSelection: protocol.DLQSelection{
				DLQFilter: protocol.DLQFilter{Queue: "orders"}, AfterID: deadIDs()[0] - 1, Limit: 1}})
			if err != nil {
				return err
			}
			if res.Replayed != 1 || res.Failed != 0 {
				return fmt.Errorf("replayed %d of 1: %+v", res.Replayed, res)
			}
			return nil
		}},
	}
	// Every route of the dashboard's API about orders, with the right
	// the sidecar's role needs for it (the token may do everything).
	httpCalls := []struct{ method, path, body, right string }{
		{"GET", "/api/queues/orders", "", "read"},
		{"GET", "/api/queues/orders/partitions", "", "read"},
		{"GET", "/api/queues/orders/partitions/p/messages", "", "read"},
		{"GET", "/api/queues/orders/partitions/p/messages/0", "", "read"},
		{"GET", "/api/dlq?queue=orders", "", "read"},
		{"GET", "/api/dlq/summary?queue=orders", "", "read"},
		{"POST", "/api/queues/orders/pause", `{"paused": false}`, "manage"},
		{"POST", "/api/queues/orders/seek", `{"group": "dead", "to": "end"}`, "manage"},
		{"POST", "/api/dlq/delete", `{"queue": "orders", "limit": 1}`, "manage"},
		{"POST", "/api/dlq/replay", `{"queue": "orders", "limit": 1}`, "manage"},
	}

	for _, cl := range calls {
		if len(cl.also) > 0 {
			f.ownerExec(t, ctx, "SELECT queenside.grant($1, 'orders', $2::text[])", a.name, cl.also)
		}
		before := f.fingerprint(t, ctx)
		refusedAs := cmp.Or(cl.refusedAs, cl.right)
		if cl.listing != nil {
			if listed, err := cl.listing(); err != nil || listed {
				t.Errorf("%s without %s: lists orders %v, %v", cl.what, cl.right, listed, err)
			}
		} else if err := cl.refused(); !refused(err, refusedAs, "orders") {
			t.Errorf("%s without %s: %v, want the refusal of %s on orders", cl.what, cl.right, err, refusedAs)
		}
		if after := f.fingerprint(t, ctx); !mapsEqual(before, after) {
			t.Errorf("%s, refused, changed tables: %v", cl.what, changedTables(before, after))
		}

		f.ownerExec(t, ctx, "SELECT queenside.grant($1, 'orders', $2::text[])", a.name, []string{cl.right})
		switch {
		case cl.listing != nil:
			if listed, err := cl.listing(); err != nil || !listed {
				t.Errorf("%s with %s: lists orders %v, %v", cl.what, cl.right, listed, err)
			}
		case cl.granted != nil:
			if err := cl.granted(); err != nil {
				t.Errorf("%s with %s: %v", cl.what, cl.right, err)
			}
		default:
			if err := cl.refused(); err != nil {
				t.Errorf("%s with %s: %v", cl.what, cl.right, err)
			}
		}
		f.ownerExec(t, ctx, "SELECT queenside.revoke($1, 'orders')", a.name)
	}

	// Dead letters of a queue the role may not read are not there for it,
	// whatever it may do elsewhere.
	before := f.fingerprint(t, ctx)
	var pe *protocol.Error
	if res, err := a.c.DLQReplay(ctx, deadIDs()[0]); err != nil || !errors.As(itemErr(nil, res[0].Error), &pe) || pe.Code != protocol.CodeNotFound {
		t.Errorf("dlqReplay by ids of a queue it may not read: %+v, %v, want not_found", res, err)
	}
	if res, err := a.c.DLQDelete(ctx, protocol.DLQSelection{IDs: deadIDs()}); err != nil || res.Deleted != 0 {
		t.Errorf("dlqDelete by ids of a queue it may not read: %+v, %v, want none deleted", res, err)
	}
	if after := f.fingerprint(t, ctx); !mapsEqual(before, after) {
		t.Errorf("dead letters of a queue it may not read changed: %v", changedTables(before, after))
	}

	// The maintenance mode is every queue's: manage on '*'.
	off := false
	if _, err := a.c.Maintenance(ctx, &off, &off); !refused(err, "manage", "*") {
		t.Errorf("maintenance without manage on *: %v", err)
	}
	f.ownerExec(t, ctx, "SELECT queenside.grant($1, '*', ARRAY['manage'])", a.name)
	if _, err := a.c.Maintenance(ctx, &off, &off); err != nil {
		t.Errorf("maintenance with manage on *: %v", err)
	}
	f.ownerExec(t, ctx, "SELECT queenside.revoke($1, '*')", a.name)

	// The dashboard acts with its sidecar's role: a's refuses what a may
	// not do, naming the right, changing nothing, and does it once a may.
	for _, hc := range httpCalls {
		before := f.fingerprint(t, ctx)
		status, body := httpDo(t, a.sc, hc.method, hc.path, hc.body)
		refusedAs := hc.right
		if strings.HasSuffix(hc.path, "/seek") {
			refusedAs = "consume" // the group's consumer or a manager: the refusal names the first
		}
		if status != http.StatusForbidden || !strings.Contains(body, "may not "+refusedAs+" orders") {
			t.Errorf("%s %s without %s: %d %s", hc.method, hc.path, hc.right, status, body)
		}
		if after := f.fingerprint(t, ctx); !mapsEqual(before, after) {
			t.Errorf("%s %s, refused, changed tables: %v", hc.method, hc.path, changedTables(before, after))
		}
		rights := []string{hc.right}
		if strings.HasSuffix(hc.path, "/replay") {
			rights = append(rights, "produce")
		}
		f.ownerExec(t, ctx, "SELECT queenside.grant($1, 'orders', $2::text[])", a.name, rights)
		if status, body := httpDo(t, a.sc, hc.method, hc.path, hc.body); status != http.StatusOK {
			t.Errorf("%s %s with %s: %d %s", hc.method, hc.path, hc.right, status, body)
		}
		f.ownerExec(t, ctx, "SELECT queenside.revoke($1, 'orders')", a.name)
	}
	for _, granted := range []bool{false, true} {
		if granted {
			f.ownerExec(t, ctx, "SELECT queenside.grant($1, 'orders', ARRAY['read'])", a.name)
		}
		status, body := httpDo(t, a.sc, "GET", "/api/queues")
		if status != http.StatusOK || strings.Contains(body, `"orders"`) != granted {
			t.Errorf("GET /api/queues, read granted %v: %d %s", granted, status, body)
		}
		status, body = httpDo(t, a.sc, "GET", "/api/dlq")
		if status != http.StatusOK || strings.Contains(body, `"queue":"orders"`) != granted {
			t.Errorf("GET /api/dlq, read granted %v: %d %s", granted, status, body)
		}
	}
	f.ownerExec(t, ctx, "SELECT queenside.revoke($1, 'orders')", a.name)
	status, body := httpDo(t, a.sc, "POST", "/api/maintenance", `{"push": false}`)
	if status != http.StatusForbidden || !strings.Contains(body, "may not manage *") {
		t.Errorf("POST /api/maintenance without manage on *: %d %s", status, body)
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func changedTables(a, b map[string]string) []string {
	var out []string
	for k, v := range a {
		if b[k] != v {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// httpDo calls the sidecar's dashboard API with its admin token, and
// body, when not "", as JSON.
func httpDo(t *testing.T, p *sidecarProcess, method, path string, body ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+p.httpAddr+path, strings.NewReader(strings.Join(body, "")))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if p.token != "" {
		req.Header.Set("Authorization", "Bearer "+p.token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// Every stored message records the role that pushed it, stamped by
// PostgreSQL: a pop, the dead letters' list and the dashboard's browser
// show it as producer, whichever role reads it, and a client that sends
// a producer of its own in a push item does not change it.
func TestTheProducerIsTheRoleThatPushed(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	f := startRightsFixture(t, ctx)
	a, b := &f.a, &f.b
	f.ownerExec(t, ctx, "SELECT queenside.grant($1, 'orders', ARRAY['produce'])", a.name)
	f.ownerExec(t, ctx, "SELECT queenside.grant($1, 'orders', ARRAY['consume', 'manage'])", b.name)
	configure(t, b.c, "orders", func(o *protocol.QueueOptions) { o.RetryLimit = 0 })

	// A push by the sidecar, a push whose item claims another producer,
	// and a send of the SQL API, all by role a.
	mustPush(t, a.c, item(t, "orders", "p", "by-sidecar", 1))
	raw := dialRaw(t, a.sc.socket)
	raw.sendRequest(1, protocol.OpPush, map[string]any{"items": []map[string]any{{
		"queue": "orders", "partition": "p", "transactionId": "claims-b", "payload": []byte{0x01}, "producer": b.name}}})
	if res := raw.read(); res.Error != nil {
		t.Fatalf("a push item with a producer of its own: %+v", res.Error)
	}
	if _, err := a.sql.Exec(ctx, `SELECT * FROM queenside.send('orders', '\x01'::bytea, 'p', 'by-sql')`); err != nil {
		t.Fatal(err)
	}

	p, err := b.c.Pop(ctx, protocol.PopArgs{Queue: "orders", Partition: "p", Group: "g", Batch: 10})
	if err != nil || len(p.Messages) != 3 {
		t.Fatalf("b's pop: %+v, %v", p, err)
	}
	for _, m := range p.Messages {
		if m.Producer != a.name {
			t.Errorf("message %s was produced by %q, want %q", m.TransactionID, m.Producer, a.name)
		}
	}
	// The pop of several partitions (pop_from) says it too.
	mustPush(t, a.c, item(t, "orders", "q", "other-partition", 2))
	p, err = b.c.Pop(ctx, protocol.PopArgs{Queue: "orders", Group: "g2", Batch: 10})
	if err != nil || len(p.Messages) == 0 || p.Messages[0].Producer != a.name {
		t.Fatalf("b's pop of any partition: %+v, %v", p, err)
	}

	m := p.Messages[0]
	if res, err := b.c.Ack(ctx, protocol.AckItem{LeaseID: m.LeaseID, Offset: &m.Offset, Status: protocol.AckFailed, Error: "no"}); err != nil || !res.Results[0].DeadLettered {
		t.Fatalf("a failed ack that dead-letters: %+v, %v", res, err)
	}
	dl, err := b.c.DLQ(ctx, protocol.DLQArgs{Queue: "orders"})
	if err != nil || len(dl.Entries) != 1 || dl.Entries[0].Producer != a.name {
		t.Fatalf("the dead letter: %+v, %v", dl, err)
	}

	status, body := httpDo(t, b.sc, "GET", "/api/queues/orders/partitions/p/messages?from=0")
	if status != http.StatusOK || strings.Count(body, `"producer":"`+a.name+`"`) != 3 {
		t.Fatalf("the browser of b's dashboard: %d %s", status, body)
	}
}
