package sidecar

import (
	"fmt"
	"sync"
	"testing"

	queenside "github.com/queenside/queenside/clients/go"
	"github.com/queenside/queenside/protocol"
)

// pushConcurrently pushes from several connections at once to one partition
// and returns every result by transaction id.
func pushConcurrently(t *testing.T, clients []*queenside.Client, queue, partition string, requests, perRequest int) map[string]protocol.PushResult {
	t.Helper()
	var mu sync.Mutex
	results := make(map[string]protocol.PushResult)
	var wg sync.WaitGroup
	for ci, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := 0; r < requests; r++ {
				items := make([]protocol.PushItem, perRequest)
				for i := range items {
					items[i] = item(t, queue, partition, fmt.Sprintf("c%d-r%d-i%d", ci, r, i), map[string]int{"c": ci, "r": r, "i": i})
				}
				res, err := c.Push(testContext(t), items...)
				if err != nil {
					t.Errorf("push: %v", err)
					return
				}
				for i, x := range res {
					if x.Status != protocol.StatusQueued {
						t.Errorf("item %s: status %s (%v)", x.TransactionID, x.Status, x.Error)
						return
					}
					// Items of one request get consecutive offsets in request order.
					if i > 0 && *x.Offset != *res[i-1].Offset+1 {
						t.Errorf("request items got offsets %d then %d", *res[i-1].Offset, *x.Offset)
					}
				}
				mu.Lock()
				for _, x := range res {
					results[x.TransactionID] = x
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return results
}

// checkResultsMatchStorage asserts each answer names what was stored.
func checkResultsMatchStorage(t *testing.T, results map[string]protocol.PushResult, stored map[string]storedMessage) {
	t.Helper()
	for tx, r := range results {
		m, ok := stored[tx]
		if !ok {
			t.Fatalf("%s answered queued but is not stored", tx)
		}
		if *r.Offset != m.Offset {
			t.Fatalf("%s answered offset %d, stored at %d", tx, *r.Offset, m.Offset)
		}
		if r.MessageID != fmt.Sprintf("%x-%x-%x-%x-%x", m.MessageID[0:4], m.MessageID[4:6], m.MessageID[6:8], m.MessageID[8:10], m.MessageID[10:16]) {
			t.Fatalf("%s answered messageId %s, stored %x", tx, r.MessageID, m.MessageID)
		}
		if !r.CommittedAt.Equal(m.CommittedAt) {
			t.Fatalf("%s answered committedAt %v, stored %v", tx, r.CommittedAt, m.CommittedAt)
		}
	}
}

func TestOffsetsGaplessWithEightConnections(t *testing.T) {
	ts := startSidecar(t, "", Options{})
	clients := make([]*queenside.Client, 8)
	for i := range clients {
		clients[i] = ts.client(t)
	}
	const requests, perRequest = 40, 10
	results := pushConcurrently(t, clients, "orders", "p1", requests, perRequest)
	stored := checkGapless(t, storedMessages(t, ts.pool, "orders", "p1"), 8*requests*perRequest)
	checkResultsMatchStorage(t, results, stored)
}

func TestPushItemsOfOnePartitionKeepRequestOrder(t *testing.T) {
	ts := startSidecar(t, "", Options{})
	c := ts.client(t)
	var items []protocol.PushItem
	for i := 0; i < 50; i++ {
		items = append(items, item(t, "q", "a", fmt.Sprintf("a%d", i), i), item(t, "q", "b", fmt.Sprintf("b%d", i), i))
	}
	res := mustPush(t, c, items...)
	next := map[string]int64{}
	for i, r := range res {
		if r.Index != i || r.TransactionID != items[i].TransactionID {
			t.Fatalf("result %d is for item %d (%s)", i, r.Index, r.TransactionID)
		}
		if *r.Offset != next[r.Partition] {
			t.Fatalf("item %d in %s got offset %d, want %d", i, r.Partition, *r.Offset, next[r.Partition])
		}
		next[r.Partition]++
	}
	for _, p := range []string{"a", "b"} {
		msgs := storedMessages(t, ts.pool, "q", p)
		checkGapless(t, msgs, 50)
		for i, m := range msgs {
			if want := fmt.Sprintf("%s%d", p, i); m.TransactionID != want {
				t.Fatalf("%s offset %d holds %s, want %s", p, i, m.TransactionID, want)
			}
		}
	}
}

func TestPayloadStoredByteForByte(t *testing.T) {
	ts := startSidecar(t, "", Options{})
	c := ts.client(t)
	payloads := []any{nil, "text", 42, -1.5, []byte{0, 1, 2}, map[string]any{"nested": []any{1, "two", nil}}}
	var items []protocol.PushItem
	for i, p := range payloads {
		items = append(items, item(t, "bytes", "", fmt.Sprint(i), p))
	}
	mustPush(t, c, items...)
	msgs := storedMessages(t, ts.pool, "bytes", protocol.DefaultPartition)
	checkGapless(t, msgs, len(payloads))
	for i, m := range msgs {
		if string(m.Payload) != string(items[i].Payload) {
			t.Fatalf("payload %d stored as %x, sent %x", i, m.Payload, items[i].Payload)
		}
	}
}
