package store

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// A transaction PostgreSQL aborts to break a deadlock is run again; any
// other error is returned at once.
func TestAgainIfAborted(t *testing.T) {
	deadlock := fmt.Errorf("push: %w", &pgconn.PgError{Code: "40P01", Message: "deadlock detected"})
	calls := 0
	err := againIfAborted(context.Background(), func() error {
		calls++
		if calls < 3 {
			return deadlock
		}
		return nil
	})
	if err != nil || calls != 3 {
		t.Fatalf("after two deadlocks: %v in %d calls, want success in 3", err, calls)
	}
	calls = 0
	err = againIfAborted(context.Background(), func() error { calls++; return deadlock })
	if !errors.Is(err, deadlock) || calls != 4 {
		t.Fatalf("always deadlocked: %v in %d calls, want the deadlock after 4", err, calls)
	}
	calls = 0
	other := &pgconn.PgError{Code: "23505"}
	if err := againIfAborted(context.Background(), func() error { calls++; return other }); !errors.Is(err, other) || calls != 1 {
		t.Fatalf("a data error: %v in %d calls, want it at once", err, calls)
	}
}
