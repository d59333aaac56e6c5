package pgserver

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// A frozen server answers nothing, refuses nothing, and answers again once
// thawed, on the connection that waited.
func TestFreezeAndThaw(t *testing.T) {
	s := start(t, Options{Dir: workDir(t), Fast: true})
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, s.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if err := s.Freeze(); err != nil {
		t.Fatal(err)
	}
	thawed := false
	defer func() {
		if !thawed {
			s.Thaw() //nolint:errcheck // the test failed; the cleanup stops it
		}
	}()
	qctx, cancel := context.WithTimeout(ctx, time.Second)
	_, err = conn.Exec(qctx, "SELECT 1")
	cancel()
	if err == nil || qctx.Err() == nil {
		t.Fatalf("a frozen server answered: %v", err)
	}
	// A new connection waits too: the kernel accepts it, nobody answers.
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	_, err = pgx.Connect(cctx, s.URL("postgres"))
	cancel()
	if err == nil {
		t.Fatal("connected to a frozen server")
	}
	if err := s.Thaw(); err != nil {
		t.Fatal(err)
	}
	thawed = true
	c2, err := pgx.Connect(ctx, s.URL("postgres"))
	if err != nil {
		t.Fatalf("after the thaw: %v", err)
	}
	defer c2.Close(ctx)
	var one int
	if err := c2.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
		t.Fatal(err)
	}
}
