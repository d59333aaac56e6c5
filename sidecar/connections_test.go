package sidecar

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/queenside/queenside/protocol"
	"github.com/queenside/queenside/sidecar/pgtest"
	"github.com/queenside/queenside/sidecar/store"
)

// --database-connections bounds what a sidecar opens, however many
// requests it serves at once: two sidecars at 3 each, under 8 producers and
// 4 consumers apiece, never hold more than 6 connections, and serve them all.
func TestDatabaseConnectionsBoundASidecar(t *testing.T) {
	dbURL := pgtest.NewDatabase(t)
	db := store.Options{URL: dbURL, Connections: 3}
	sidecars := []*testSidecar{startSidecarWith(t, db, dbURL, Options{}), startSidecarWith(t, db, dbURL, Options{})}
	for _, ts := range sidecars {
		if ts.srv.store.PoolSize() != 1 {
			t.Fatalf("pool of %d with 3 connections and a listener, want 1", ts.srv.store.PoolSize())
		}
	}
	ctx := testContext(t)
	const producers, pushes, batch = 8, 10, 20
	var wg sync.WaitGroup
	var delivered atomic.Int64
	stop := make(chan struct{})
	for s, ts := range sidecars {
		for p := range producers {
			c := ts.client(t)
			wg.Go(func() {
				for i := range pushes {
					items := make([]protocol.PushItem, batch)
					for k := range items {
						items[k] = item(t, "cb", fmt.Sprintf("p%d", (p+k)%16), fmt.Sprintf("s%d-%d-%d-%d", s, p, i, k), k)
					}
					if _, err := c.Push(ctx, items...); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
	}
	var consumers sync.WaitGroup
	for _, ts := range sidecars {
		for range 4 {
			c := ts.client(t)
			consumers.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					res, err := c.Pop(ctx, protocol.PopArgs{Queue: "cb", Group: "g", Batch: 50, Partitions: 4, WaitMs: 200})
					if err != nil {
						t.Error(err)
						return
					}
					delivered.Add(int64(len(res.Messages)))
					if len(res.Messages) > 0 {
						if _, err := c.Ack(ctx, completedAll(res)...); err != nil {
							t.Error(err)
							return
						}
					}
				}
			})
		}
	}
	most := 0
	sample := func() {
		var n int
		if err := sidecars[0].pool.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name LIKE 'queenside%'").Scan(&n); err != nil {
			t.Error(err)
		}
		most = max(most, n)
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	want := int64(2 * producers * pushes * batch)
	for deadline := time.Now().Add(30 * time.Second); delivered.Load() < want && time.Now().Before(deadline); {
		sample()
		time.Sleep(20 * time.Millisecond)
	}
	close(stop)
	<-done
	consumers.Wait()
	if delivered.Load() != want {
		t.Fatalf("delivered %d of %d", delivered.Load(), want)
	}
	if most > 6 || most < 3 {
		t.Fatalf("at most %d connections seen for two sidecars of 3", most)
	}
}
