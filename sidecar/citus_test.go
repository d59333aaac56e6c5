package sidecar

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	queenside "github.com/queenside/queenside/clients/go"
	"github.com/queenside/queenside/protocol"
	"github.com/queenside/queenside/sidecar/pgtest"
)

// ackingConsumer pops group g's messages and acks each pop at once, until
// stop is closed. It fails the test when a message it was answered acked
// is delivered again, or a partition's messages come out of order. An ack
// whose answer was lost (a worker stopped after it committed, before it
// answered) may have moved the cursor all the same: its messages are not
// delivered again, and were delivered once.
type ackingConsumer struct {
	t      *testing.T
	c      *queenside.Client
	queue  string
	mu     sync.Mutex
	acked  map[string]int64 // partition -> offset last answered acked
	seen   map[string]bool  // transaction ids delivered
	errors int              // pops and acks that failed (the database out of reach)
}

func (a *ackingConsumer) run(stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		res, err := a.c.Pop(ctx, protocol.PopArgs{Queue: a.queue, Group: "g", Batch: 200, Partitions: 16, WaitMs: 500})
		cancel()
		if err != nil {
			a.failed()
			continue
		}
		if !a.check(res.Messages) {
			return
		}
		a.mu.Lock()
		for _, m := range res.Messages {
			a.seen[m.TransactionID] = true
		}
		a.mu.Unlock()
		var items []protocol.AckItem
		for _, m := range res.Messages {
			items = append(items, queenside.Completed(m))
		}
		if len(items) == 0 {
			continue
		}
		ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
		ar, err := a.c.Ack(ctx, items...)
		cancel()
		if err != nil {
			a.failed()
			continue
		}
		a.mu.Lock()
		for i, r := range ar.Results {
			if m := res.Messages[i]; r.Success {
				a.acked[m.Partition] = max(a.acked[m.Partition], m.Offset)
			}
		}
		a.mu.Unlock()
	}
}

func (a *ackingConsumer) failed() {
	a.mu.Lock()
	a.errors++
	a.mu.Unlock()
	time.Sleep(100 * time.Millisecond)
}

// check holds a pop's messages against what was acked: none acked before,
// each partition's in offset order from one past what it acked last at
// most.
func (a *ackingConsumer) check(msgs []protocol.Message) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	last := map[string]int64{}
	for _, m := range msgs {
		acked, ok := a.acked[m.Partition]
		if ok && m.Offset <= acked {
			a.t.Errorf("%s offset %d delivered again after it was acked (acked to %d)", m.Partition, m.Offset, acked)
			return false
		}
		if prev, seen := last[m.Partition]; seen && m.Offset != prev+1 {
			a.t.Errorf("%s: offset %d after %d in one pop: out of order", m.Partition, m.Offset, prev)
			return false
		}
		last[m.Partition] = m.Offset
	}
	return true
}

// A Citus worker stopped as a crash would while producers push and a
// consumer acks over partitions on every worker: pushes that touch its
// shards are spooled, pops and acks fail while it is down, and once it is
// back the spool is replayed. Every message is stored once in push order,
// every one is delivered and acked, and none acked comes back.
func TestAWorkerStoppedUnderTrafficLosesNothing(t *testing.T) {
	pgtest.SkipUnlessCitus(t)
	const total, parts = 6000, 16
	pg, sc, c, consumer := startCitusTraffic(t, "w")
	worker := pg.cluster.Workers[0]
	restarted := make(chan struct{})
	buffered := pushNumbered(t, c, "w", total, parts, func(k int) {
		if k != 2000 {
			return
		}
		if err := worker.Stop("immediate"); err != nil {
			t.Fatal(err)
		}
		go func() { // down for three seconds, pushes going on
			defer close(restarted)
			time.Sleep(3 * time.Second)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			if err := worker.Restart(ctx); err != nil {
				t.Error(err)
			}
		}()
	})
	<-restarted
	if buffered == 0 {
		t.Fatal("nothing was buffered while a worker was down")
	}
	sc.waitReplayed(t)
	checkStoredOnceInOrder(t, pg.pool(t), "w", total, parts, nil)
	consumer.waitConsumed(t, pg.pool(t), total)
	t.Logf("%d pushed, %d of them buffered while the worker was down; %d pops or acks failed meanwhile; every message delivered and acked, none answered acked delivered again",
		total, buffered, consumer.errors)
}

// startCitusTraffic starts a Citus cluster of the test's own, a sidecar
// process on it, a client of that sidecar, and a consumer acking the
// messages of queue, whose leases last two seconds.
func startCitusTraffic(t *testing.T, queue string) (*privatePostgres, *sidecarProcess, *queenside.Client, *ackingConsumer) {
	t.Helper()
	pg := startPrivatePostgres(t)
	sc := launchSidecar(t, pg.url, t.TempDir())
	sc.waitReplayed(t)
	c := dialClient(t, sc.socket)
	configure(t, c, queue, func(o *protocol.QueueOptions) { o.LeaseSeconds = 2 })
	return pg, sc, c, startAcking(t, sc.socket, queue)
}

// pushNumbered pushes items 0..total-1 (numbered) over parts partitions in
// batches, a little apart, calling before(k) before the batch from k, and
// returns how many were buffered.
func pushNumbered(t *testing.T, c *queenside.Client, queue string, total, parts int, before func(k int)) (buffered int) {
	t.Helper()
	for k := 0; k < total; k += outageBatch {
		before(k)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		res, err := c.Push(ctx, numbered(t, queue, k, min(outageBatch, total-k), parts)...)
		cancel()
		if err != nil {
			t.Fatalf("push of %d..: %v", k, err)
		}
		for _, r := range res {
			switch r.Status {
			case protocol.StatusBuffered:
				buffered++
			case protocol.StatusQueued:
			default:
				t.Fatalf("item %d of batch %d: %s %v; want queued or buffered", r.Index, k, r.Status, r.Error)
			}
		}
		time.Sleep(2 * time.Millisecond)
	}
	return buffered
}

// startAcking starts a consumer of queue's group g acking what it gets
// (ackingConsumer), stopped when the test ends.
func startAcking(t *testing.T, socket, queue string) *ackingConsumer {
	a := &ackingConsumer{t: t, c: dialClient(t, socket), queue: queue, acked: map[string]int64{}, seen: map[string]bool{}}
	stop := make(chan struct{})
	consumed := make(chan struct{})
	go func() {
		defer close(consumed)
		a.run(stop)
	}()
	t.Cleanup(func() {
		close(stop)
		<-consumed
	})
	return a
}

// waitConsumed waits until every one of total messages was delivered and
// group g's cursors stand at the end of every partition of the queue.
func (a *ackingConsumer) waitConsumed(t *testing.T, pool *pgxpool.Pool, total int) {
	t.Helper()
	waitFor(t, 120*time.Second, "every message delivered and acked", func() bool {
		a.mu.Lock()
		delivered := len(a.seen)
		a.mu.Unlock()
		var behind int
		err := pool.QueryRow(context.Background(), `SELECT count(*) FROM queenside.cursors c
			JOIN queenside.groups g ON g.id = c.group_id JOIN queenside.queues q ON q.id = g.queue_id
			JOIN queenside.partitions p ON p.id = c.partition_id
			WHERE q.name = $1 AND g.name = 'g' AND c.committed < p.next_offset`, a.queue).Scan(&behind)
		return err == nil && delivered >= total && behind == 0 || t.Failed()
	})
}

// A third worker joins under traffic and the shards are rebalanced onto
// it: the rebalance finishes, shards move to the new worker, and every
// message is stored once in push order, delivered and acked, none acked
// coming back. A shard being moved takes no writes until it is moved
// (shard_transfer_mode block_writes: dedup has no key logical
// replication could copy it by); pushes to it wait.
func TestRebalanceOntoANewWorkerUnderTraffic(t *testing.T) {
	pgtest.SkipUnlessCitus(t)
	const total, parts = 16000, 16
	pg, sc, c, consumer := startCitusTraffic(t, "r")
	rebalanced := make(chan error, 1)
	done := make(chan struct{})
	var moved int
	buffered := pushNumbered(t, c, "r", total, parts, func(k int) {
		if k > 2000 {
			select { // the pushes spread out while the rebalance runs
			case <-done:
			default:
				time.Sleep(50 * time.Millisecond)
			}
		}
		if k != 2000 {
			return
		}
		go func() {
			defer close(done)
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			w, err := pg.cluster.AddWorker(ctx)
			if err == nil {
				_, err = pg.pool(t).Exec(ctx, "SELECT citus_rebalance_start(shard_transfer_mode := 'block_writes')")
			}
			if err == nil {
				_, err = pg.pool(t).Exec(ctx, "SELECT citus_rebalance_wait()")
			}
			if err == nil {
				err = pg.pool(t).QueryRow(ctx, "SELECT count(*) FROM pg_dist_shard_placement WHERE nodename = $1 AND nodeport = $2",
					w.SocketDir(), w.Port()).Scan(&moved)
			}
			rebalanced <- err
		}()
	})
	if err := <-rebalanced; err != nil {
		t.Fatal(err)
	}
	if moved == 0 {
		t.Fatal("the rebalance moved no shard onto the new worker")
	}
	sc.waitReplayed(t)
	checkStoredOnceInOrder(t, pg.pool(t), "r", total, parts, nil)
	consumer.waitConsumed(t, pg.pool(t), total)
	t.Logf("%d shard placements moved onto the third worker under traffic; %d pushes buffered, %d pops or acks failed meanwhile",
		moved, buffered, consumer.errors)
}
