package sidecar

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	queenside "github.com/queenside/queenside/clients/go"
	"github.com/queenside/queenside/protocol"
	"github.com/queenside/queenside/sidecar/pgtest"
	"github.com/queenside/queenside/sidecar/store"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// testSidecar is a sidecar served in-process on a fresh database.
type testSidecar struct {
	srv    *Server
	socket string
	dbURL  string
	pool   *pgxpool.Pool // for assertions straight against the tables
}

// shortTempDir returns a temporary directory with a path short enough for a
// Unix socket (t.TempDir embeds the test name).
func shortTempDir(t testing.TB) string {
	dir, err := os.MkdirTemp("", "qs")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func testLogger() hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: os.Stderr})
}

// startSidecar serves a new sidecar on dbURL ("" for a fresh database).
func startSidecar(t testing.TB, dbURL string, opts Options) *testSidecar {
	t.Helper()
	if dbURL == "" {
		dbURL = pgtest.NewDatabase(t)
	}
	return startSidecarWith(t, store.Options{URL: dbURL}, dbURL, opts)
}

// startSidecarWith serves a new sidecar that reaches PostgreSQL as db says;
// dbURL is the database itself, for assertions.
func startSidecarWith(t testing.TB, db store.Options, dbURL string, opts Options) *testSidecar {
	t.Helper()
	ctx := context.Background()
	st, err := store.OpenWith(ctx, db, testLogger())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	socket := filepath.Join(shortTempDir(t), "qs.sock")
	ln, err := ListenSocket(socket, 0o660)
	if err != nil {
		t.Fatal(err)
	}
	if opts.Logger == nil {
		opts.Logger = testLogger()
	}
	srv := New(st, opts)
	srv.SetReady()
	go srv.Serve(ln) //nolint:errcheck // ends with Close
	t.Cleanup(func() {
		srv.Close()
		st.Close()
	})
	return &testSidecar{srv: srv, socket: socket, dbURL: dbURL, pool: pgtest.Pool(t, dbURL)}
}

func (ts *testSidecar) client(t testing.TB) *queenside.Client {
	t.Helper()
	return dialClient(t, ts.socket)
}

func dialClient(t testing.TB, socket string) *queenside.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// The sidecar's own answers are under test: the client sends nothing
	// again by itself.
	c, err := queenside.Dial(ctx, socket, queenside.WithoutRetry())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func testContext(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func item(t testing.TB, queue, partition, txid string, v any) protocol.PushItem {
	t.Helper()
	p, err := queenside.Payload(v)
	if err != nil {
		t.Fatal(err)
	}
	return protocol.PushItem{Queue: queue, Partition: partition, TransactionID: txid, Payload: p}
}

// mustPush pushes and fails the test on a call error or a failed item.
func mustPush(t testing.TB, c *queenside.Client, items ...protocol.PushItem) []protocol.PushResult {
	t.Helper()
	res, err := c.Push(testContext(t), items...)
	if err != nil {
		t.Fatalf("push: %v", err)
	}
	if len(res) != len(items) {
		t.Fatalf("push: %d results for %d items", len(res), len(items))
	}
	for _, r := range res {
		if r.Status == protocol.StatusFailed {
			t.Fatalf("push: item %d failed: %v", r.Index, r.Error)
		}
	}
	return res
}

// configure sets a queue's options: the defaults with change applied.
func configure(t testing.TB, c *queenside.Client, queue string, change func(*protocol.QueueOptions)) {
	t.Helper()
	opts := protocol.DefaultQueueOptions()
	change(&opts)
	if _, err := c.Configure(testContext(t), queue, opts); err != nil {
		t.Fatal(err)
	}
}

// storedMessage is one message as the tables hold it.
type storedMessage struct {
	Offset        int64
	CommittedAt   time.Time
	TransactionID string
	MessageID     [16]byte
	Payload       []byte
}

// storedMessages reads a partition straight from the segments, in offset order.
func storedMessages(t testing.TB, pool *pgxpool.Pool, queue, partition string) []storedMessage {
	t.Helper()
	rows, err := pool.Query(testContext(t), `
		SELECT s.base_offset + u.ord - 1, s.committed_at, u.txid, u.mid, u.payload
		  FROM queenside.segments s
		  JOIN queenside.partitions p ON p.id = s.partition_id
		  JOIN queenside.queues q ON q.id = p.queue_id,
		       LATERAL unnest(s.transaction_ids, s.message_ids, s.payloads) WITH ORDINALITY AS u (txid, mid, payload, ord)
		 WHERE q.name = $1 AND p.name = $2
		 ORDER BY 1`, queue, partition)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []storedMessage
	for rows.Next() {
		var m storedMessage
		if err := rows.Scan(&m.Offset, &m.CommittedAt, &m.TransactionID, &m.MessageID, &m.Payload); err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// checkGapless asserts offsets 0..n-1 each once, with commit times that
// never decrease, and returns the messages by transaction id.
func checkGapless(t testing.TB, msgs []storedMessage, n int) map[string]storedMessage {
	t.Helper()
	if len(msgs) != n {
		t.Fatalf("stored %d messages, want %d", len(msgs), n)
	}
	byTx := make(map[string]storedMessage, n)
	for i, m := range msgs {
		if m.Offset != int64(i) {
			t.Fatalf("message %d has offset %d: offsets are not gapless from 0", i, m.Offset)
		}
		if i > 0 && m.CommittedAt.Before(msgs[i-1].CommittedAt) {
			t.Fatalf("offset %d committed at %v, before offset %d at %v", i, m.CommittedAt, i-1, msgs[i-1].CommittedAt)
		}
		if _, dup := byTx[m.TransactionID]; dup {
			t.Fatalf("transaction id %s stored twice", m.TransactionID)
		}
		byTx[m.TransactionID] = m
	}
	return byTx
}

// rawConn is a connection that speaks bytes, for malformed input.
type rawConn struct {
	t  testing.TB
	nc net.Conn
}

func dialRaw(t testing.TB, socket string) *rawConn {
	t.Helper()
	nc, err := net.Dial("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return &rawConn{t: t, nc: nc}
}

func (r *rawConn) write(b []byte) {
	r.t.Helper()
	if _, err := r.nc.Write(b); err != nil {
		r.t.Fatal(err)
	}
}

func (r *rawConn) sendBody(body []byte) { r.write(protocol.AppendFrame(nil, body)) }

func (r *rawConn) sendRequest(id uint64, op string, args any) {
	r.t.Helper()
	req := protocol.Request{ID: id, Op: op}
	if args != nil {
		raw, err := protocol.Marshal(args)
		if err != nil {
			r.t.Fatal(err)
		}
		req.Args = raw
	}
	body, err := protocol.Marshal(req)
	if err != nil {
		r.t.Fatal(err)
	}
	r.sendBody(body)
}

// read returns the next response, failing after a deadline.
func (r *rawConn) read() protocol.Response {
	r.t.Helper()
	r.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	body, err := protocol.ReadFrame(r.nc, nil, 1<<30)
	if err != nil {
		r.t.Fatalf("read response: %v", err)
	}
	var resp protocol.Response
	if err := protocol.Unmarshal(body, &resp); err != nil {
		r.t.Fatalf("decode response: %v", err)
	}
	return resp
}

// closed asserts the server closed the connection.
func (r *rawConn) closed() {
	r.t.Helper()
	r.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	var b [1]byte
	if n, err := r.nc.Read(b[:]); err == nil {
		r.t.Fatalf("connection still open: read %d bytes", n)
	}
}

func dialAdmin(t testing.TB) *pgxpool.Pool {
	t.Helper()
	return pgtest.Pool(t, pgtest.AdminURL())
}

func quoteIdent(s string) string { return pgx.Identifier{s}.Sanitize() }
