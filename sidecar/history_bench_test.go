package sidecar

import (
	"fmt"
	"testing"

	"github.com/queenside/queenside/protocol"
)

// BenchmarkHistorySample is what one sample of the dashboard's history
// costs the database on a queue of 10,000 partitions read by 10 groups
// (100,000 cursors), next to the queues page's own read:
//
//	go test -run '^$' -bench BenchmarkHistorySample -benchtime 50x ./sidecar/
func BenchmarkHistorySample(b *testing.B) {
	ts := startSidecar(b, "", Options{})
	c := ts.client(b)
	ctx := testContext(b)
	const partitions, groups = 10_000, 10
	for start := 0; start < partitions; start += 500 {
		var items []protocol.PushItem
		for i := start; i < start+500; i++ {
			items = append(items, item(b, "wide", fmt.Sprintf("p-%05d", i), "", i))
		}
		mustPush(b, c, items...)
	}
	for g := range groups {
		mustPop(b, c, protocol.PopArgs{Queue: "wide", Group: fmt.Sprintf("g-%d", g), Batch: 1})
	}
	if _, err := ts.pool.Exec(ctx, "ANALYZE"); err != nil {
		b.Fatal(err)
	}
	b.Run("QueueCounters", func(b *testing.B) {
		for range b.N {
			if _, err := ts.srv.store.QueueCounters(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("readHistory", func(b *testing.B) {
		for range b.N {
			if s := ts.srv.readHistory(ctx); len(s.Queues) != 1 || len(s.Queues[0].Groups) != groups {
				b.Fatalf("sample: %+v", s)
			}
		}
	})
	b.Run("QueueSummaries", func(b *testing.B) {
		for range b.N {
			if _, err := ts.srv.store.QueueSummaries(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
}
