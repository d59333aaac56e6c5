package sidecar

import (
	"context"
	"fmt"
	"testing"
	"time"

	queenside "github.com/queenside/queenside/clients/go"
	"github.com/queenside/queenside/protocol"
	"github.com/queenside/queenside/sidecar/citustest"
	"github.com/queenside/queenside/sidecar/pgtest"
)

// A Citus worker frozen (every process SIGSTOPped) under traffic: pushes
// to partitions on its shards are buffered within the database timeout,
// while the partitions on the other worker are pushed to and popped from
// as before; once it is thawed the spool drains, and every message is
// stored once, in push order.
func TestAStalledWorkerBuffersOnlyItsPartitions(t *testing.T) {
	pgtest.SkipUnlessCitus(t)
	const parts = 8
	pg := startPrivatePostgres(t)
	sc := launchSidecar(t, pg.url, t.TempDir(), "--database-timeout", stallTimeout.String())
	sc.waitReplayed(t)
	c := dialClient(t, sc.socket)
	configure(t, c, "ws", func(*protocol.QueueOptions) {})
	worker := pg.cluster.Workers[0]
	admin := pg.pool(t)

	var log answers
	stop := make(chan struct{})
	pushed := make(chan struct{})
	go func() { defer close(pushed); pushOneByOne(t, c, "ws", parts, stop, &log) }()
	waitFor(t, 30*time.Second, "a push to every partition", func() bool { return len(log.list()) >= 2*parts })
	onWorker, err := citustest.PartitionsOn(testContext(t), admin, "ws", worker)
	if err != nil {
		t.Fatal(err)
	}
	if len(onWorker) == 0 || len(onWorker) == parts {
		t.Fatalf("partitions on the worker: %v; want some of the %d, not all", onWorker, parts)
	}
	healthy := ""
	for p := range parts {
		if name := fmt.Sprint("p", p); !onWorker[name] {
			healthy = name
			break
		}
	}

	// The group exists before the stall: a new group's first pop sets its
	// start in every partition, on every worker. On a loaded machine that
	// may take longer than the database timeout, and is tried again.
	var joined error
	waitFor(t, 30*time.Second, "the group's first pop", func() bool {
		_, joined = c.Pop(testContext(t), queenside.PopArgs{Queue: "ws", Group: "other", Partition: healthy, Batch: 1, AutoAck: true})
		if joined != nil && !isCode(joined, protocol.CodeUnavailable) {
			t.Fatal(joined)
		}
		return joined == nil
	})
	if err := worker.Freeze(); err != nil {
		t.Fatal(err)
	}
	frozen := time.Now()
	thawed := false
	defer func() {
		if !thawed {
			worker.Thaw() //nolint:errcheck // the test failed; let the cleanup stop it
		}
	}()
	time.Sleep(3 * time.Second)
	// A partition on the other worker is consumed as before.
	pctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	popped, err := c.Pop(pctx, queenside.PopArgs{Queue: "ws", Group: "other", Partition: healthy, Batch: 5, AutoAck: true})
	cancel()
	if err != nil || len(popped.Messages) == 0 {
		t.Fatalf("a pop of %s, on the worker that answers, during the stall: %d messages, %v", healthy, len(popped.Messages), err)
	}
	time.Sleep(time.Until(frozen.Add(8 * time.Second)))
	if err := worker.Thaw(); err != nil {
		t.Fatal(err)
	}
	thawed = true
	resumed := time.Now()
	time.Sleep(time.Second)
	close(stop)
	<-pushed
	all := log.list()

	var slowest time.Duration
	during := map[bool]map[string]int{true: {}, false: {}} // on the stalled worker -> status -> pushes
	for _, a := range all {
		if a.status != protocol.StatusQueued && a.status != protocol.StatusBuffered {
			t.Fatalf("item %d: %s %v; want queued or buffered", a.k, a.status, a.err)
		}
		slowest = max(slowest, a.took)
		// Sent while the worker was frozen: one sent before may have
		// committed there and been answered after.
		if sent := a.at.Add(-a.took); sent.After(frozen) && sent.Before(resumed) {
			during[onWorker[fmt.Sprint("p", a.k%parts)]][a.status]++
		}
	}
	if slowest > stallTimeout+2*time.Second {
		t.Fatalf("the slowest push took %v; the bound is %v", slowest, stallTimeout)
	}
	if during[true][protocol.StatusBuffered] == 0 || during[true][protocol.StatusQueued] != 0 {
		t.Fatalf("pushes to the stalled worker's partitions during the stall: %v; want buffered only", during[true])
	}
	if during[false][protocol.StatusQueued] == 0 || during[false][protocol.StatusBuffered] != 0 {
		t.Fatalf("pushes to the other worker's partitions during the stall: %v; want queued only", during[false])
	}
	sc.waitReplayed(t)
	checkStoredOnceInOrder(t, admin, "ws", len(all), parts, nil)
	t.Logf("a worker frozen 8 s: to its partitions %v, to the others %v; the slowest push answered in %v",
		during[true], during[false], slowest.Round(time.Millisecond))
}
