package queenside_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	queenside "github.com/queenside/queenside/clients/go"
	"github.com/queenside/queenside/protocol"
	"github.com/queenside/queenside/sidecar"
	"github.com/queenside/queenside/sidecar/pgtest"
)

// appDB is the application's own database, a sidecar serving the same
// one, and a client of that sidecar.
func appDB(t *testing.T) (context.Context, *pgx.Conn, *queenside.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	dbURL := pgtest.NewDatabase(t)
	c := dial(t, serveOn(t, dbURL, sidecar.Options{}))
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	if _, err := conn.Exec(ctx, `CREATE TABLE orders (id bigint PRIMARY KEY, sku text NOT NULL);
		CREATE TABLE billed (order_id bigint PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	return ctx, conn, c
}

type orderCreated struct {
	ID  int64  `msgpack:"id"`
	SKU string `msgpack:"sku"`
}

// The outbox: an order row and its event commit together, or neither.
func TestPushTxCommitsWithTheApplicationsTransaction(t *testing.T) {
	ctx, conn, c := appDB(t)
	createOrder := func(id int64, commit bool) []queenside.PushResult {
		t.Helper()
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx) //nolint:errcheck // committed when asked
		if _, err := tx.Exec(ctx, `INSERT INTO orders VALUES ($1, 'A1')`, id); err != nil {
			t.Fatal(err)
		}
		item, err := queenside.Item("orders", orderCreated{ID: id, SKU: "A1"})
		if err != nil {
			t.Fatal(err)
		}
		item.Partition, item.TransactionID = "customer-7", queenside.TransactionID("order", id)
		item.Headers = map[string]string{"kind": "order-created"}
		res, err := queenside.PushTx(ctx, tx, item)
		if err != nil {
			t.Fatal(err)
		}
		if commit {
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
		}
		return res
	}
	first := createOrder(1, true)
	if r := first[0]; r.Status != protocol.StatusQueued || *r.Offset != 0 || r.Partition != "customer-7" || r.MessageID == "" {
		t.Fatalf("first order: %+v", r)
	}
	if r := createOrder(2, false)[0]; r.Status != protocol.StatusQueued || *r.Offset != 1 {
		t.Fatalf("rolled-back order, before the rollback: %+v", r)
	}
	if r := createOrder(3, true)[0]; *r.Offset != 1 {
		t.Fatalf("the order after a rollback took offset %d, want 1: no gap", *r.Offset)
	}
	res, err := c.Pop(ctx, queenside.PopArgs{Queue: "orders", Group: "billing", Batch: 10})
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for _, m := range res.Messages {
		var o orderCreated
		if err := m.Decode(&o); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, o.ID)
		if m.Headers["kind"] != "order-created" {
			t.Fatalf("headers %v", m.Headers)
		}
	}
	if len(ids) != 2 || ids[0] != 1 || ids[1] != 3 || res.Messages[0].MessageID != first[0].MessageID {
		t.Fatalf("delivered orders %v, want [1 3]", ids)
	}

	// The same transaction id through the socket is a duplicate of it.
	again, err := queenside.Item("orders", orderCreated{ID: 1})
	if err != nil {
		t.Fatal(err)
	}
	again.Partition, again.TransactionID = "customer-7", queenside.TransactionID("order", 1)
	dup, err := c.Push(ctx, again)
	if err != nil || dup[0].Status != protocol.StatusDuplicate || dup[0].MessageID != first[0].MessageID {
		t.Fatalf("the socket's push of an id pushed in SQL: %+v %v", dup, err)
	}
	// And the reverse.
	pushed, err := c.Push(ctx, withTxid(t, "from-socket"))
	if err != nil {
		t.Fatal(err)
	}
	back, err := queenside.PushTx(ctx, conn, withTxid(t, "from-socket"))
	if err != nil || back[0].Status != protocol.StatusDuplicate || back[0].MessageID != pushed[0].MessageID {
		t.Fatalf("PushTx of an id pushed through the socket: %+v %v", back, err)
	}
}

func withTxid(t *testing.T, txid string) queenside.PushItem {
	t.Helper()
	item, err := queenside.Item("events", txid)
	if err != nil {
		t.Fatal(err)
	}
	item.TransactionID = txid
	return item
}

// The inbox: the consumer's effect and its ack commit together; rolled
// back, the lease is as it was.
func TestAckTxCommitsWithTheApplicationsTransaction(t *testing.T) {
	ctx, conn, c := appDB(t)
	item, err := queenside.Item("orders", orderCreated{ID: 7, SKU: "B2"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Push(ctx, item); err != nil {
		t.Fatal(err)
	}
	res, err := c.Pop(ctx, queenside.PopArgs{Queue: "orders", Group: "billing", Batch: 1})
	if err != nil || len(res.Messages) != 1 {
		t.Fatalf("pop: %+v %v", res, err)
	}
	m := res.Messages[0]
	bill := func(commit bool) queenside.AckResult {
		t.Helper()
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx) //nolint:errcheck // committed when asked
		var o orderCreated
		if err := m.Decode(&o); err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO billed VALUES ($1)`, o.ID); err != nil {
			t.Fatal(err)
		}
		ar, err := queenside.AckTx(ctx, tx, m.Completed())
		if err != nil {
			t.Fatal(err)
		}
		if commit {
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
		}
		return ar
	}
	if ar := bill(false); !ar.Results[0].Success {
		t.Fatalf("ack in the rolled-back transaction: %+v", ar.Results)
	}
	if ar := bill(true); !ar.Results[0].Success {
		t.Fatalf("ack after the rollback: %+v: the lease should be as it was", ar.Results)
	}
	var billed int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM billed`).Scan(&billed); err != nil || billed != 1 {
		t.Fatalf("billed %d times, %v", billed, err)
	}
	next, err := c.Pop(ctx, queenside.PopArgs{Queue: "orders", Group: "billing", Batch: 1})
	if err != nil || len(next.Messages) != 0 {
		t.Fatalf("after the committed ack, the message came again: %+v %v", next, err)
	}
	if ar, err := queenside.AckTx(ctx, conn, m.Completed()); err != nil || ar.Results[0].Code != protocol.ItemAlreadyAcked {
		t.Fatalf("the same ack again: %+v %v", ar, err)
	}
}

// A refusal is the protocol's error, wrapping PostgreSQL's.
func TestPushTxRefusalIsTheProtocolsError(t *testing.T) {
	ctx, conn, _ := appDB(t)
	item, err := queenside.Item("no spaces allowed", 1)
	if err != nil {
		t.Fatal(err)
	}
	_, err = queenside.PushTx(ctx, conn, item)
	var qe *queenside.Error
	var pgErr *pgconn.PgError
	if !errors.As(err, &qe) || qe.Code != protocol.CodeInvalidArgument || !errors.As(err, &pgErr) {
		t.Fatalf("PushTx of a bad queue name: %v", err)
	}
	if _, err := queenside.PushTx(ctx, conn, queenside.PushItem{Queue: "q"}); !errors.As(err, &qe) || qe.Code != protocol.CodeInvalidArgument {
		t.Fatalf("PushTx without a payload: %v", err)
	}
	// A refusal of one item of a statement names that item.
	huge := make([]byte, protocol.DefaultMaxFrameBytes)
	huge[0] = 0xc4 // any bytes: the size is refused first
	items := []queenside.PushItem{{Queue: "a", Payload: []byte{1}}, {Queue: "b", Payload: []byte{2}}, {Queue: "a", Payload: huge}}
	if _, err := queenside.PushTx(ctx, conn, items...); !errors.As(err, &qe) || qe.Code != protocol.CodeInvalidArgument ||
		!strings.HasPrefix(qe.Message, "push item 2: ") || !strings.Contains(qe.Message, "--max-frame-bytes") {
		t.Fatalf("PushTx of a message too large as item 2: %v", err)
	}
}

// The items of several queues, interleaved, answer in their order: a
// statement a queue, the results put back in place.
func TestPushTxAnswersItemsInTheirOrder(t *testing.T) {
	ctx, conn, _ := appDB(t)
	var items []queenside.PushItem
	for i, q := range []string{"a", "b", "a", "c", "b", "a"} {
		items = append(items, queenside.PushItem{Queue: q, Partition: "p", Payload: []byte{byte(i)},
			Headers: map[string]string{"i": fmt.Sprint(i)}})
	}
	items[5].TransactionID = "same"
	items = append(items, queenside.PushItem{Queue: "a", Partition: "p", Payload: []byte{9}, TransactionID: "same"})
	res, err := queenside.PushTx(ctx, conn, items...)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		queue  string
		offset int64
		status string
	}{{"a", 0, "queued"}, {"b", 0, "queued"}, {"a", 1, "queued"}, {"c", 0, "queued"}, {"b", 1, "queued"}, {"a", 2, "queued"}, {"a", 2, "duplicate"}}
	for i, w := range want {
		r := res[i]
		if r.Index != i || r.Queue != w.queue || *r.Offset != w.offset || r.Status != w.status || r.Partition != "p" || r.MessageID == "" {
			t.Fatalf("result %d: %+v, want %+v", i, r, w)
		}
	}
	if res[6].MessageID != res[5].MessageID {
		t.Fatalf("the repeat's original: %s, want %s", res[6].MessageID, res[5].MessageID)
	}
}
