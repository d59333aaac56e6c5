package sidecar

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/queenside/queenside/protocol"
	"github.com/queenside/queenside/sidecar/buffer"
	"github.com/queenside/queenside/sidecar/store"
)

// With PostgreSQL out of reach the sidecar still serves: every operation
// that needs the database answers unavailable (retryable), health says so,
// and nothing is lost, because nothing was taken.
func TestUnreachableDatabaseAnswersUnavailable(t *testing.T) {
	srv, socket := serveWithoutDatabase(t, nil)
	c := dialClient(t, socket)
	ctx := testContext(t)

	// As Run does: the attempt to migrate found PostgreSQL unreachable, so
	// requests are answered at once rather than waiting for the schema.
	_, err := srv.store.Migrate(ctx)
	if !store.IsUnavailable(err) {
		t.Fatalf("migrate without a database: %v, want unreachable", err)
	}
	srv.noteStartupError(err)
	start := time.Now()
	if _, err := c.Push(ctx, item(t, "q", "p", "tx", 1)); !isCode(err, protocol.CodeUnavailable) ||
		!strings.Contains(err.Error(), "not ready yet") {
		t.Fatalf("push before the schema is ready: %v, want unavailable", err)
	}
	if waited := time.Since(start); waited > time.Second {
		t.Fatalf("the push waited %v for a schema that cannot be migrated while the database is unreachable", waited)
	}
	h, err := c.Health(ctx)
	if err != nil || h.Status != protocol.HealthUnavailable || h.Database.OK || h.Database.Error == "" {
		t.Fatalf("health: %+v %v", h, err)
	}
	// As if migrated earlier: the database itself is what is missing now.
	srv.SetReady()
	res, err := c.Push(ctx, item(t, "q", "p", "tx", 1))
	if err != nil || res[0].Status != protocol.StatusFailed || res[0].Error.Code != protocol.CodeUnavailable || !res[0].Error.Retryable {
		t.Fatalf("push: %+v %v, want the item failed with a retryable unavailable", res, err)
	}
	if _, err := c.Pop(ctx, protocol.PopArgs{Queue: "q"}); !isCode(err, protocol.CodeUnavailable) {
		t.Fatalf("pop: %v, want unavailable", err)
	}
	ack, err := c.Ack(ctx, protocol.AckItem{LeaseID: "1.1.00000000000000000000000000000000", TransactionID: "tx"})
	if err != nil || ack.Results[0].Success || ack.Results[0].Code != string(protocol.CodeUnavailable) {
		t.Fatalf("ack: %+v %v, want the item unavailable", ack, err)
	}
	if h, _ := c.Health(ctx); h.Status != protocol.HealthUnavailable {
		t.Fatalf("the sidecar stopped serving: %+v", h)
	}
}

// serveWithoutDatabase serves, in this process, a sidecar whose database
// does not exist, with the spool of newBuffer when given.
func serveWithoutDatabase(t *testing.T, newBuffer func(*store.Store) *buffer.Buffer) (*Server, string) {
	t.Helper()
	dir := shortTempDir(t)
	st, err := store.Open(context.Background(), "postgres://postgres@/queenside?host="+dir+"&connect_timeout=1", testLogger())
	if err != nil {
		t.Fatal(err)
	}
	opts := Options{Logger: testLogger()}
	if newBuffer != nil {
		opts.Buffer = newBuffer(st)
	}
	socket := filepath.Join(dir, "qs.sock")
	ln, err := ListenSocket(socket, 0o660)
	if err != nil {
		t.Fatal(err)
	}
	srv := New(st, opts)
	go srv.Serve(ln) //nolint:errcheck // ends with Close
	t.Cleanup(func() { srv.Close(); st.Close() })
	return srv, socket
}

func isCode(err error, code protocol.Code) bool {
	pe, ok := err.(*protocol.Error)
	return ok && pe.Code == code
}
