package sidecar

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/vmihailenco/msgpack/v5"

	queenside "github.com/queenside/queenside/clients/go"
	"github.com/queenside/queenside/protocol"
	"github.com/queenside/queenside/sidecar/pgtest"
)

// The SQL API (schema migrations 14 and 15): queenside.send, send_json,
// send_batch and ack_message, called by an application in its own
// transaction.

// sent is one answer of queenside.send.
type sent struct {
	status, messageID, transactionID string
	offset                           int64
}

func sqlSend(t *testing.T, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, queue string, payload []byte, partition, txid string) sent {
	t.Helper()
	var s sent
	var tx *string
	if txid != "" {
		tx = &txid
	}
	err := q.QueryRow(testContext(t), `SELECT status, "offset", message_id::text, transaction_id
		FROM queenside.send($1, $2, $3, $4)`, queue, payload, partition, tx).
		Scan(&s.status, &s.offset, &s.messageID, &s.transactionID)
	if err != nil {
		t.Fatalf("queenside.send: %v", err)
	}
	return s
}

func msgpackOf(t *testing.T, v any) []byte {
	t.Helper()
	b, err := queenside.Payload(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A send commits with the caller's transaction: a rollback leaves neither
// message nor gap, and what committed is delivered in offset order with
// the payload as it was sent.
func TestSQLSendCommitsWithTheCallersTransaction(t *testing.T) {
	ts := startSidecar(t, "", Options{})
	c := ts.client(t)
	ctx := testContext(t)

	tx, err := ts.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	first := sqlSend(t, tx, "orders", msgpackOf(t, "one"), "p", "order-1")
	second := sqlSend(t, tx, "orders", msgpackOf(t, "two"), "p", "")
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if first.status != "queued" || first.offset != 0 || second.offset != 1 || first.transactionID != "order-1" || second.transactionID == "" {
		t.Fatalf("sends: %+v %+v", first, second)
	}

	tx, err = ts.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rolled := sqlSend(t, tx, "orders", msgpackOf(t, "never"), "p", "order-rolled-back"); rolled.offset != 2 {
		t.Fatalf("send in the rolled-back transaction: %+v", rolled)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	// No gap: the next push, through the socket this time, takes offset 2.
	res := mustPush(t, c, item(t, "orders", "p", "order-3", "three"))
	if res[0].Status != protocol.StatusQueued || *res[0].Offset != 2 {
		t.Fatalf("push after the rollback: %+v", res[0])
	}

	got := mustPop(t, c, protocol.PopArgs{Queue: "orders", Group: "billing", Batch: 10})
	var payloads []string
	for i, m := range got.Messages {
		var s string
		if err := m.Decode(&s); err != nil {
			t.Fatal(err)
		}
		payloads = append(payloads, s)
		if m.Offset != int64(i) {
			t.Fatalf("offsets %v", got.Messages)
		}
	}
	if fmt.Sprint(payloads) != "[one two three]" || got.Messages[0].MessageID != first.messageID ||
		got.Messages[1].TransactionID != second.transactionID {
		t.Fatalf("delivered %v %+v, sent %+v %+v", payloads, got.Messages, first, second)
	}
	// The transaction id left out was made up, as the sidecar does; the
	// one rolled back was never stored, so it is not a duplicate.
	if again := mustPush(t, c, item(t, "orders", "p", "order-rolled-back", "x")); again[0].Status != protocol.StatusQueued {
		t.Fatalf("the rolled-back id pushed again: %+v", again[0])
	}
}

// Deduplication is exact between SQL and the socket, both ways.
func TestSQLSendDeduplicatesAgainstTheSocket(t *testing.T) {
	ts := startSidecar(t, "", Options{})
	c := ts.client(t)
	first := sqlSend(t, ts.pool, "q", msgpackOf(t, 1), "Default", "from-sql")
	res := mustPush(t, c, item(t, "q", "", "from-sql", 2))
	if res[0].Status != protocol.StatusDuplicate || res[0].MessageID != first.messageID || *res[0].Offset != first.offset {
		t.Fatalf("the socket's push of an id sent from SQL: %+v, sent %+v", res[0], first)
	}
	pushed := mustPush(t, c, item(t, "q", "", "from-socket", 3))
	again := sqlSend(t, ts.pool, "q", msgpackOf(t, 4), "Default", "from-socket")
	if again.status != "duplicate" || again.messageID != pushed[0].MessageID || again.offset != *pushed[0].Offset {
		t.Fatalf("SQL's send of an id pushed through the socket: %+v, pushed %+v", again, pushed[0])
	}
}

// An open transaction that sent holds its partition: a sidecar's push to
// it waits, and lands after it, gapless, once it commits; a send to
// another partition does not wait.
func TestSQLSendHoldsThePartitionUntilTheTransactionEnds(t *testing.T) {
	ts := startSidecar(t, "", Options{})
	c := ts.client(t)
	ctx := testContext(t)
	mustPush(t, c, item(t, "q", "p", "", "before"))
	tx, err := ts.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // committed below
	if s := sqlSend(t, tx, "q", msgpackOf(t, "in the transaction"), "p", ""); s.offset != 1 {
		t.Fatalf("send: %+v", s)
	}
	answered := make(chan []protocol.PushResult, 1)
	go func() {
		res, _ := c.Push(ctx, item(t, "q", "p", "", "waited"))
		answered <- res
	}()
	// Another partition's row is not held. (Through a sidecar, a push to it
	// may still wait, when group commit puts it in the held push's
	// transaction.)
	free, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var status string
	if err := ts.pool.QueryRow(free, `SELECT status FROM queenside.send('q', '\xc0', 'elsewhere')`).Scan(&status); err != nil || status != "queued" {
		t.Fatalf("a send to another partition: %q, %v", status, err)
	}
	select {
	case res := <-answered:
		t.Fatalf("a push to the held partition answered before the commit: %+v", res)
	case <-time.After(500 * time.Millisecond):
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case res := <-answered:
		if len(res) != 1 || res[0].Status != protocol.StatusQueued || *res[0].Offset != 2 {
			t.Fatalf("the push that waited: %+v", res)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the push that waited was not answered after the commit")
	}
}

// A commit wakes a long-poll, through any sidecar.
func TestSQLSendWakesALongPoll(t *testing.T) {
	ts := startSidecar(t, "", Options{})
	other := startSidecar(t, ts.dbURL, Options{})
	c := other.client(t)
	mustPush(t, c, item(t, "q", "p", "", "made the queue"))
	first := mustPop(t, c, protocol.PopArgs{Queue: "q", Group: "g", Batch: 10})
	mustAck(t, c, queenside.Completed(first.Messages[0]))

	type popped struct {
		res protocol.PopResult
		at  time.Time
		err error
	}
	done := make(chan popped, 1)
	go func() {
		res, err := c.Pop(testContext(t), protocol.PopArgs{Queue: "q", Group: "g", Batch: 10, WaitMs: 20000})
		done <- popped{res, time.Now(), err}
	}()
	time.Sleep(300 * time.Millisecond) // the pop is waiting
	committed := time.Now()
	sqlSend(t, ts.pool, "q", msgpackOf(t, "wake up"), "p", "")
	select {
	case p := <-done:
		if p.err != nil || len(p.res.Messages) != 1 {
			t.Fatalf("the long-poll: %+v %v", p.res, p.err)
		}
		if took := p.at.Sub(committed); took > 2*time.Second {
			t.Fatalf("woken %v after the commit", took)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the long-poll was not woken by the commit")
	}
}

// send_json stores what a client would push for the same value, so that
// every client decodes it alike; queenside.msgpack encodes each JSON type.
func TestSQLSendJSONStoresMsgpack(t *testing.T) {
	ts := startSidecar(t, "", Options{})
	c := ts.client(t)
	ctx := testContext(t)
	for _, doc := range []string{
		`null`, `true`, `false`, `0`, `127`, `128`, `255`, `256`, `65535`, `65536`, `4294967295`, `4294967296`,
		`9223372036854775807`, `18446744073709551615`, `-1`, `-32`, `-33`, `-128`, `-129`, `-32768`, `-32769`,
		`-2147483648`, `-2147483649`, `-9223372036854775808`, `1.5`, `-0.25`, `1e300`, `18446744073709551616`,
		`""`, `"café ☕"`, `"` + string(bytes.Repeat([]byte("x"), 31)) + `"`, `"` + string(bytes.Repeat([]byte("x"), 32)) + `"`,
		`"` + string(bytes.Repeat([]byte("x"), 300)) + `"`, `"` + string(bytes.Repeat([]byte("x"), 70000)) + `"`,
		`[]`, `[1, "a", [null]]`, `{}`, `{"sku": "A1", "qty": 2, "tags": ["x"], "price": {"eur": 9.5}}`,
	} {
		var got []byte
		if err := ts.pool.QueryRow(ctx, "SELECT queenside.msgpack($1::jsonb)", doc).Scan(&got); err != nil {
			t.Fatalf("msgpack(%.40s): %v", doc, err)
		}
		var fromSQL, fromJSON any
		if err := msgpack.Unmarshal(got, &fromSQL); err != nil {
			t.Fatalf("msgpack(%.40s) = %x does not decode: %v", doc, got, err)
		}
		dec := json.NewDecoder(bytes.NewReader([]byte(doc)))
		dec.UseNumber()
		if err := dec.Decode(&fromJSON); err != nil {
			t.Fatal(err)
		}
		if a, b := fmt.Sprint(normalised(fromSQL)), fmt.Sprint(normalised(fromJSON)); a != b {
			t.Errorf("msgpack(%.40s) decodes to %.80s, want %.80s", doc, a, b)
		}
		if want := smallestEncoding(t, fromJSON); want != nil && !bytes.Equal(got, want) {
			t.Errorf("msgpack(%.40s) = %x, want the smallest form %x", doc, got, want)
		}
	}

	var s sent
	err := ts.pool.QueryRow(ctx, `SELECT status, "offset" FROM queenside.send_json('q', '{"sku": "A1", "qty": 2}', 'p',
		p_headers => '{"origin": "billing"}', p_trace_id => 'trace-1')`).Scan(&s.status, &s.offset)
	if err != nil || s.status != "queued" {
		t.Fatalf("send_json: %+v %v", s, err)
	}
	res := mustPop(t, c, protocol.PopArgs{Queue: "q", Batch: 1})
	var order struct {
		SKU string `msgpack:"sku"`
		Qty int    `msgpack:"qty"`
	}
	if err := res.Messages[0].Decode(&order); err != nil || order.SKU != "A1" || order.Qty != 2 {
		t.Fatalf("decoded %+v, %v", order, err)
	}
	if m := res.Messages[0]; m.TraceID != "trace-1" || m.Headers["origin"] != "billing" || len(m.Headers) != 1 {
		t.Fatalf("trace id %q, headers %v", m.TraceID, m.Headers)
	}
}

// normalised makes JSON's and msgpack's decodings of one value comparable:
// every number becomes its decimal text.
func normalised(v any) any {
	switch x := v.(type) {
	case json.Number:
		return numberText(string(x))
	case int8, int16, int32, int64, uint8, uint16, uint32, uint64, int, uint:
		return fmt.Sprint(x)
	case float32, float64:
		return numberText(fmt.Sprint(x))
	case []any:
		out := make([]any, len(x))
		for i := range x {
			out[i] = normalised(x[i])
		}
		return out
	case map[string]any:
		out := map[string]any{}
		for k, e := range x {
			out[k] = normalised(e)
		}
		return out
	}
	return v
}

func numberText(s string) string {
	if i, err := strconv.ParseInt(s, 10, 64); err == nil {
		return fmt.Sprint(i)
	}
	if u, err := strconv.ParseUint(s, 10, 64); err == nil {
		return fmt.Sprint(u)
	}
	f, _ := strconv.ParseFloat(s, 64)
	return fmt.Sprintf("%g", f)
}

// smallestEncoding is the smallest msgpack form of an integer or a
// string, as the Python and Node clients write it; nil for other values.
func smallestEncoding(t *testing.T, v any) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	enc.UseCompactInts(true)
	switch x := v.(type) {
	case json.Number:
		if i, err := x.Int64(); err == nil {
			if err := enc.EncodeInt(i); err != nil {
				t.Fatal(err)
			}
			return buf.Bytes()
		}
		var u uint64
		if _, err := fmt.Sscan(string(x), &u); err == nil && fmt.Sprint(u) == string(x) {
			if err := enc.EncodeUint(u); err != nil {
				t.Fatal(err)
			}
			return buf.Bytes()
		}
		return nil
	case string:
		if err := enc.EncodeString(x); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
	return nil
}

// What send refuses, it refuses with the protocol's code in the error's
// detail, and stores nothing.
func TestSQLSendRefusals(t *testing.T) {
	ts := startSidecar(t, "", Options{})
	ctx := testContext(t)
	refused := func(query string, code, sqlstate string, args ...any) {
		t.Helper()
		_, err := ts.pool.Exec(ctx, query, args...)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Detail != code || pgErr.Code != sqlstate {
			t.Fatalf("%s: %v, want detail %s and SQLSTATE %s", query, err, code, sqlstate)
		}
	}
	refused(`SELECT queenside.send('bad name', '\xc0')`, "invalid_argument", "22023")
	refused(`SELECT queenside.send('q', NULL)`, "invalid_argument", "22023")
	refused(`SELECT queenside.send('q', '\xc0', '')`, "invalid_argument", "22023")
	refused(`SELECT queenside.send('q', '\xc0', 'p', '')`, "invalid_argument", "22023")
	refused(`SELECT queenside.send('q', '\xc0', 'p', NULL, '{"a": 1}')`, "invalid_argument", "22023")
	refused(`SELECT queenside.send_batch('q', '{}')`, "invalid_argument", "22023")
	refused(`SELECT queenside.send_batch('q', ARRAY['\xc0'::bytea, NULL])`, "invalid_argument", "22023")
	refused(`SELECT queenside.send_batch('q', ARRAY['\xc0'::bytea], ARRAY['a', 'b'])`, "invalid_argument", "22023")
	refused(`SELECT queenside.ack_message('1.2.00000000000000000000000000000000', 0, 'done')`, "invalid_argument", "22023")
	refused(`SELECT queenside.ack_message('1.2.00000000000000000000000000000000', 0, p_transaction_id => 'x')`, "invalid_argument", "22023")

	if _, err := ts.pool.Exec(ctx, `UPDATE queenside.maintenance SET push = true, push_since = now()`); err != nil {
		t.Fatal(err)
	}
	refused(`SELECT queenside.send('q', '\xc0')`, "unavailable", "55000")
	if _, err := ts.pool.Exec(ctx, `UPDATE queenside.maintenance SET push = false, push_since = NULL`); err != nil {
		t.Fatal(err)
	}

	sqlSend(t, ts.pool, "sealed", []byte{0xc0}, "Default", "")
	if _, err := ts.pool.Exec(ctx, `UPDATE queenside.queues SET encrypt_payloads = true WHERE name = 'sealed'`); err != nil {
		t.Fatal(err)
	}
	refused(`SELECT queenside.send('sealed', '\xc0')`, "unsupported", "55000")

	var n int
	if err := ts.pool.QueryRow(ctx, `SELECT count(*) FROM queenside.queues WHERE name IN ('q', 'bad name')`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("queues left behind by refused sends: %d, %v", n, err)
	}
}

// ack_message commits with the caller's transaction: rolled back, the
// lease is as it was; committed, the cursor moves, with the effect the
// consumer wrote in the same transaction (the inbox); a failure rewinds.
func TestSQLAckMessageCommitsWithTheCallersTransaction(t *testing.T) {
	ts := startSidecar(t, "", Options{})
	c := ts.client(t)
	ctx := testContext(t)
	if _, err := ts.pool.Exec(ctx, `CREATE TABLE effects (offset_done bigint PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	pushN(t, c, "q", "p", "x", 3)
	res := mustPop(t, c, protocol.PopArgs{Queue: "q", Group: "g", Batch: 2})
	lease := res.Leases[0].LeaseID

	handle := func(offset int64, status string, commit bool) (ok bool, code string) {
		t.Helper()
		tx, err := ts.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx) //nolint:errcheck // committed when asked
		if _, err := tx.Exec(ctx, `INSERT INTO effects VALUES ($1)`, offset); err != nil {
			t.Fatal(err)
		}
		var dead bool
		var c *string
		if err := tx.QueryRow(ctx, `SELECT success, code, dead_lettered FROM queenside.ack_message($1, $2, $3, 'it broke')`,
			lease, offset, status).Scan(&ok, &c, &dead); err != nil {
			t.Fatal(err)
		}
		if c != nil {
			code = *c
		}
		if commit {
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
		}
		return ok, code
	}

	if ok, code := handle(0, "completed", false); !ok || code != "" {
		t.Fatalf("ack in a transaction rolled back: %v %q", ok, code)
	}
	if cur, leased := cursorOf(t, c, "q", "p", "g"); cur != 0 || !leased {
		t.Fatalf("after the rollback: cursor %d, leased %v; want 0 and the lease as it was", cur, leased)
	}
	if ok, _ := handle(0, "completed", true); !ok {
		t.Fatal("ack committed: refused")
	}
	if cur, leased := cursorOf(t, c, "q", "p", "g"); cur != 1 || !leased {
		t.Fatalf("after the commit: cursor %d, leased %v; want 1, still leased", cur, leased)
	}
	var effects int
	if err := ts.pool.QueryRow(ctx, `SELECT count(*) FROM effects`).Scan(&effects); err != nil || effects != 1 {
		t.Fatalf("effects %d, %v; want the committed one alone", effects, err)
	}
	// A failure rewinds, charges the retry budget, and wakes nothing lost:
	// offset 1 comes again.
	if _, err := ts.pool.Exec(ctx, `DELETE FROM effects`); err != nil {
		t.Fatal(err)
	}
	if ok, _ := handle(1, "failed", true); !ok {
		t.Fatal("failure committed: refused")
	}
	again := mustPop(t, c, protocol.PopArgs{Queue: "q", Group: "g", Batch: 1})
	if len(again.Messages) != 1 || again.Messages[0].Offset != 1 || !again.Messages[0].Redelivered || again.Leases[0].HeadAttempts != 2 {
		t.Fatalf("after the failure: %+v", again)
	}
	// The old lease is done: offset 0 says so.
	if ok, code := handle(0, "completed", false); ok || code != protocol.ItemAlreadyAcked {
		t.Fatalf("the first lease's ack again: %v %q", ok, code)
	}
	if ok, code := handle(5, "completed", false); ok || code != protocol.ItemLeaseExpired {
		t.Fatalf("an offset past the cursor on a lease that ended: %v %q", ok, code)
	}
	// By transaction id, on the live lease.
	var ok bool
	err := ts.pool.QueryRow(ctx, `SELECT success FROM queenside.ack_message($1, NULL, p_transaction_id => 'tx-x-1')`,
		again.Leases[0].LeaseID).Scan(&ok)
	if cur, _ := cursorOf(t, c, "q", "p", "g"); err != nil || !ok || cur != 2 {
		t.Fatalf("ack by transaction id: %v %v, cursor %d", ok, err, cur)
	}
}

// On Citus, one application transaction that sends to partitions on two
// workers, by sends and by a batch, commits on both or on neither
// (Citus's two-phase commit).
func TestSQLSendOnTwoWorkersInOneTransaction(t *testing.T) {
	pgtest.SkipUnlessCitus(t)
	ts := startSidecar(t, "", Options{})
	c := ts.client(t)
	ctx := testContext(t)
	// Partitions until two lie on different workers.
	nodeOf := map[string]string{}
	var a, b string
	for p := 0; b == "" && p < 32; p++ {
		name := fmt.Sprint("p", p)
		sqlSend(t, ts.pool, "spread", msgpackOf(t, "first"), name, "")
		var node string
		err := ts.pool.QueryRow(ctx, `SELECT pl.nodename || ':' || pl.nodeport FROM queenside.partition_names n
			JOIN queenside.queues q ON q.id = n.queue_id
			JOIN pg_dist_shard_placement pl ON pl.shardid = get_shard_id_for_distribution_column('queenside.partitions', n.id)
			WHERE q.name = 'spread' AND n.name = $1`, name).Scan(&node)
		if err != nil {
			t.Fatal(err)
		}
		nodeOf[name] = node
		if a == "" {
			a = name
		} else if node != nodeOf[a] {
			b = name
		}
	}
	if b == "" {
		t.Fatalf("every partition on one worker: %v", nodeOf)
	}
	both := func(commit bool) {
		t.Helper()
		tx, err := ts.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx) //nolint:errcheck // committed when asked
		if sa, sb := sqlSend(t, tx, "spread", msgpackOf(t, "second"), a, ""), sqlSend(t, tx, "spread", msgpackOf(t, "second"), b, ""); sa.offset != 1 || sb.offset != 1 {
			t.Fatalf("sends: %+v %+v", sa, sb)
		}
		// And one batch over both workers.
		if s := sqlSendBatch(t, tx, "spread", []protocol.PushItem{item(t, "spread", a, "", "third"), item(t, "spread", b, "", "third")}); s[0].offset != 2 || s[1].offset != 2 {
			t.Fatalf("batch: %+v", s)
		}
		if commit {
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	both(false)
	for _, p := range []string{a, b} {
		if res := mustPop(t, c, protocol.PopArgs{Queue: "spread", Group: "g", Partition: p, Batch: 10}); len(res.Messages) != 1 {
			t.Fatalf("partition %s after the rollback: %d messages, want the first alone", p, len(res.Messages))
		} else {
			mustAck(t, c, queenside.Completed(res.Messages[0]))
		}
	}
	both(true)
	for _, p := range []string{a, b} {
		res := mustPop(t, c, protocol.PopArgs{Queue: "spread", Group: "g", Partition: p, Batch: 10})
		if len(res.Messages) != 2 || res.Messages[0].Offset != 1 || res.Messages[1].Offset != 2 {
			t.Fatalf("partition %s (%s) after the commit: %+v", p, nodeOf[p], res.Messages)
		}
	}
}

// A sidecar's push that waits behind an application's open transaction
// for longer than --database-timeout is buffered, as in an outage, and
// stored once the transaction ends: after the application's message, in
// the order the sidecar received its pushes, each once.
func TestASidecarPushHeldByAnApplicationTransactionIsBufferedInOrder(t *testing.T) {
	dbURL := pgtest.NewDatabase(t)
	sc := launchSidecar(t, dbURL, t.TempDir(), "--database-timeout", stallTimeout.String())
	sc.waitReplayed(t)
	c := dialClient(t, sc.socket)
	ctx := testContext(t)
	mustPush(t, c, item(t, "q", "p", "m0", "m0"))
	app, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close(context.Background())
	tx, err := app.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // committed below
	sqlSend(t, tx, "q", msgpackOf(t, "app"), "p", "app")
	for _, m := range []string{"m1", "m2"} {
		began := time.Now()
		res := mustPush(t, c, item(t, "q", "p", m, m))
		if res[0].Status != protocol.StatusBuffered {
			t.Fatalf("push %s behind the open transaction: %+v, want buffered", m, res[0])
		}
		if took := time.Since(began); took > stallTimeout+2*time.Second {
			t.Fatalf("push %s answered after %v; the bound is %v", m, took, stallTimeout)
		}
	}
	time.Sleep(stallTimeout)
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	var got []string
	waitFor(t, 30*time.Second, "the buffered pushes to be stored", func() bool {
		res := mustPop(t, c, protocol.PopArgs{Queue: "q", Group: "g", Batch: 10})
		for _, m := range res.Messages {
			if m.Offset != int64(len(got)) {
				t.Fatalf("offset %d after %v", m.Offset, got)
			}
			got = append(got, m.TransactionID)
		}
		var acks []protocol.AckItem
		for _, m := range res.Messages {
			acks = append(acks, queenside.Completed(m))
		}
		if len(acks) > 0 {
			mustAck(t, c, acks...)
		}
		return len(got) >= 4
	})
	time.Sleep(2 * stallTimeout) // a replay stored twice would show now
	if extra := mustPop(t, c, protocol.PopArgs{Queue: "q", Group: "g", Batch: 10}); fmt.Sprint(got) != "[m0 app m1 m2]" || len(extra.Messages) != 0 {
		t.Fatalf("stored %v, then %d more; want [m0 app m1 m2], each once", got, len(extra.Messages))
	}
}

// Two application transactions sending to one partition: the second
// waits for the first, and their offsets follow their commits.
func TestSQLSendsOfTwoTransactionsFollowTheirCommits(t *testing.T) {
	ts := startSidecar(t, "", Options{})
	c := ts.client(t)
	ctx := testContext(t)
	first, err := ts.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Rollback(ctx) //nolint:errcheck // committed below
	sqlSend(t, first, "q", msgpackOf(t, "first"), "p", "first")
	second := make(chan sent, 1)
	go func() {
		tx, err := ts.pool.Begin(ctx)
		if err != nil {
			t.Error(err)
			return
		}
		defer tx.Rollback(ctx) //nolint:errcheck // committed below
		var s sent
		if err := tx.QueryRow(ctx, `SELECT "offset" FROM queenside.send('q', '\xc0', 'p', 'second')`).Scan(&s.offset); err != nil {
			t.Error(err)
			return
		}
		if err := tx.Commit(ctx); err != nil {
			t.Error(err)
		}
		second <- s
	}()
	select {
	case s := <-second:
		t.Fatalf("the second transaction's send answered while the first held the partition: %+v", s)
	case <-time.After(300 * time.Millisecond):
	}
	if err := first.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case s := <-second:
		if s.offset != 1 {
			t.Fatalf("the second transaction's send: %+v, want offset 1", s)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the second transaction's send did not end after the first committed")
	}
	res := mustPop(t, c, protocol.PopArgs{Queue: "q", Batch: 10})
	if len(res.Messages) != 2 || res.Messages[0].TransactionID != "first" || res.Messages[1].TransactionID != "second" {
		t.Fatalf("delivered %+v", res.Messages)
	}
}

// The README's SQL (section "Inside your own transaction") runs as
// printed: the outbox stores its message once committed, and the inbox's
// ack of a lease id that names no lease answers lease_expired.
func TestTheReadmesSQLRunsAsPrinted(t *testing.T) {
	ts := startSidecar(t, "", Options{})
	c := ts.client(t)
	ctx := testContext(t)
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, _ := strings.Cut(string(readme), "## Inside your own transaction\n")
	section, _, _ = strings.Cut(section, "\n## ")
	blocks := regexp.MustCompile("(?s)```sql\n(.*?)```").FindAllStringSubmatch(section, -1)
	if len(blocks) != 3 {
		t.Fatalf("%d SQL blocks in the section, want the outbox, the batch and the inbox", len(blocks))
	}
	if _, err := ts.pool.Exec(ctx, `CREATE TABLE orders (id bigint PRIMARY KEY, sku text NOT NULL);
		CREATE TABLE billed (order_id bigint PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	for _, b := range blocks {
		if _, err := ts.pool.Exec(ctx, b[1], pgx.QueryExecModeSimpleProtocol); err != nil {
			t.Fatalf("%s\n%v", b[1], err)
		}
	}
	res := mustPop(t, c, protocol.PopArgs{Queue: "orders", Batch: 10, Partitions: 2})
	var got []string
	for _, m := range res.Messages {
		var order struct {
			ID  int64  `msgpack:"id"`
			SKU string `msgpack:"sku"`
		}
		if err := m.Decode(&order); err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%s@%d %s %d %s", m.Partition, m.Offset, m.TransactionID, order.ID, order.SKU))
	}
	sort.Strings(got)
	if want := "[customer-42@0 order-1001 1001 A1 customer-42@1 order-1002 1002 B2 customer-7@0 order-1003 1003 C3]"; fmt.Sprint(got) != want {
		t.Fatalf("the outbox's messages: %v, want %s", got, want)
	}
}
