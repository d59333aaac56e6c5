package store

import (
	"context"
	"fmt"
	"net/url"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/queenside/queenside/protocol"
	"github.com/queenside/queenside/sidecar/citustest"
)

// remoteLog gathers what a Citus coordinator says it sends its workers
// (citus.log_remote_commands): each command and the node it went to.
type remoteLog struct {
	mu       sync.Mutex
	commands []remoteCommand
}

type remoteCommand struct{ node, sql string }

var remoteNode = regexp.MustCompile(`on server \S+@(\S+) connectionId`)

func (l *remoteLog) notice(n *pgconn.Notice) {
	sql, ok := strings.CutPrefix(n.Message, "issuing ")
	m := remoteNode.FindStringSubmatch(n.Detail)
	if !ok || m == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.commands = append(l.commands, remoteCommand{node: m[1], sql: sql})
}

// during returns what was sent while f ran.
func (l *remoteLog) during(t *testing.T, f func()) remoteCall {
	t.Helper()
	l.mu.Lock()
	from := len(l.commands)
	l.mu.Unlock()
	f()
	l.mu.Lock()
	defer l.mu.Unlock()
	return remoteCall(append([]remoteCommand(nil), l.commands[from:]...))
}

// remoteCall is what one call sent the workers.
type remoteCall []remoteCommand

// writers are the nodes that were sent a statement that writes, or a
// commit: the nodes the call's transaction changed.
func (c remoteCall) nodes() []string {
	seen := map[string]bool{}
	for _, rc := range c {
		seen[rc.node] = true
	}
	var out []string
	for n := range seen {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func (c remoteCall) count(prefix string) int {
	n := 0
	for _, rc := range c {
		if strings.HasPrefix(rc.sql, prefix) {
			n++
		}
	}
	return n
}

// calls tells whether a command called function f (its name qualified).
func (c remoteCall) calls(f string) bool {
	for _, rc := range c {
		if strings.Contains(rc.sql, f+"(") {
			return true
		}
	}
	return false
}

func (c remoteCall) String() string {
	var b strings.Builder
	for _, rc := range c {
		fmt.Fprintf(&b, "\n    %s: %.160s", rc.node, rc.sql)
	}
	return b.String()
}

// On Citus, each hot call whose partitions lie on one shard runs on that
// shard's worker alone and commits there in one phase: a push as one call
// of queenside.push sent whole to the worker (delegated), a pop of a named
// partition, an ack, a renew and a release as statements routed to it.
// A push over partitions on both workers commits in two phases. The
// evidence is Citus's own: what the coordinator logs it sends. So it is
// for an application role, whose grants each call checks where it runs.
func TestHotCallsRunOnOneWorker(t *testing.T) {
	cluster := citustest.Start(t, 2)
	ctx := context.Background()
	if err := cluster.Migrate(ctx, citustest.Database, 4); err != nil {
		t.Fatal(err)
	}
	conn := cluster.Connect(t)
	t.Run("the owner", func(t *testing.T) { hotCallsRunOnOneWorker(t, cluster, conn, "", "q") })
	// A role that is not the owner: its grants are checked on the worker
	// each call is sent to (a reference table), with no command more.
	role := fmt.Sprintf("qs_app_%x", time.Now().UnixNano())
	for _, sql := range []string{"CREATE ROLE " + role + " LOGIN",
		"SELECT queenside.grant('" + role + "', 'qa', ARRAY['produce', 'consume'])"} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	t.Run("an application role", func(t *testing.T) { hotCallsRunOnOneWorker(t, cluster, conn, role, "qa") })
}

// hotCallsRunOnOneWorker makes the calls as role ("" for the owner) on
// queue queue, which it alone uses.
func hotCallsRunOnOneWorker(t *testing.T, cluster *citustest.Cluster, conn *pgx.Conn, role, queue string) {
	ctx := context.Background()
	var log remoteLog
	u, err := url.Parse(cluster.URL())
	if err != nil {
		t.Fatal(err)
	}
	if role != "" {
		u.User = url.User(role)
	}
	q := u.Query()
	q.Set("options", "-ccitus.log_remote_commands=on")
	u.RawQuery = q.Encode()
	s, err := OpenWith(ctx, Options{URL: u.String(), OnNotice: log.notice}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	// Sixteen partitions, then where each one's shard lies.
	var msgs []Message
	for p := range 16 {
		msgs = append(msgs, message(queue, fmt.Sprintf("p%d", p), "first"))
	}
	if _, err := s.Push(ctx, msgs); err != nil {
		t.Fatal(err)
	}
	rows, err := conn.Query(ctx, `
		SELECT n.name, p.shardid, p.nodename || ':' || p.nodeport
		  FROM queenside.partition_names n
		  JOIN queenside.queues qu ON qu.id = n.queue_id
		  JOIN pg_dist_shard_placement p ON p.shardid = get_shard_id_for_distribution_column('queenside.partitions', n.id)
		 WHERE qu.name = $1
		 ORDER BY n.id`, queue)
	if err != nil {
		t.Fatal(err)
	}
	type place struct {
		name  string
		shard int64
		node  string
	}
	places, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (place, error) {
		var p place
		return p, r.Scan(&p.name, &p.shard, &p.node)
	})
	if err != nil {
		t.Fatal(err)
	}
	var same []string  // two partitions on one shard
	var apart []string // two partitions on different workers
	for i, a := range places {
		for _, b := range places[i+1:] {
			if same == nil && a.shard == b.shard {
				same = []string{a.name, b.name}
			}
			if apart == nil && a.node != b.node {
				apart = []string{a.name, b.name}
			}
		}
	}
	if same == nil || apart == nil {
		t.Fatalf("no two partitions on one shard, or none apart: %+v", places)
	}

	onePhase := func(what string, c remoteCall) {
		t.Helper()
		if len(c.nodes()) != 1 || c.count("PREPARE TRANSACTION") > 0 {
			t.Errorf("%s went to %v, %d prepared: want one worker, one phase:%s", what, c.nodes(), c.count("PREPARE TRANSACTION"), c)
		}
		t.Logf("%s: %d commands to %v:%s", what, len(c), c.nodes(), c)
	}
	push := log.during(t, func() {
		if _, err := s.Push(ctx, []Message{message(queue, same[0], "a"), message(queue, same[1], "b")}); err != nil {
			t.Fatal(err)
		}
	})
	onePhase("a push to two partitions of one shard", push)
	if len(push) != 1 || !push.calls("queenside.push") {
		t.Errorf("the push was not sent whole to its worker:%s", push)
	}

	twoPhase := log.during(t, func() {
		if _, err := s.Push(ctx, []Message{message(queue, apart[0], "c"), message(queue, apart[1], "d")}); err != nil {
			t.Fatal(err)
		}
	})
	if len(twoPhase.nodes()) != 2 || twoPhase.count("PREPARE TRANSACTION") != 2 {
		t.Errorf("a push over two workers went to %v, %d prepared: want both, two phases:%s",
			twoPhase.nodes(), twoPhase.count("PREPARE TRANSACTION"), twoPhase)
	}
	t.Logf("a push over two workers: %d commands to %v", len(twoPhase), twoPhase.nodes())

	// The group first: its creation writes a cursor in every partition.
	if _, err := s.groupID(ctx, groupKey{queue, "g"}, protocol.SubscribeAll, nil); err != nil {
		t.Fatal(err)
	}
	var popped protocol.PopResult
	popNamed := log.during(t, func() {
		if popped, err = pop(s, PopRequest{Queue: queue, Partition: same[0], Group: "g", Batch: 10, Partitions: 1}); err != nil {
			t.Fatal(err)
		}
	})
	onePhase("a pop of a named partition", popNamed)
	if len(popNamed) != 1 || !popNamed.calls("queenside.pop_from") {
		t.Errorf("the pop was not sent whole to its worker:%s", popNamed)
	}
	if len(popped.Leases) != 1 {
		t.Fatalf("the pop leased %+v", popped.Leases)
	}
	lease := popped.Leases[0].LeaseID
	onePhase("a renew", log.during(t, func() {
		if r, err := s.Renew(ctx, []string{lease}, 30); err != nil || !r[0].Success {
			t.Fatal(r, err)
		}
	}))
	onePhase("a release", log.during(t, func() {
		if r, err := s.Release(ctx, []string{lease}); err != nil || !r[0].Success {
			t.Fatal(r, err)
		}
	}))
	if popped, err = pop(s, PopRequest{Queue: queue, Partition: same[0], Group: "g", Batch: 10, Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	ack := log.during(t, func() {
		res, err := s.Ack(ctx, completedAll(popped))
		if err != nil || !res.Results[0].Success {
			t.Fatal(res, err)
		}
	})
	onePhase("an ack", ack)
	if len(ack) != 1 || !ack.calls("queenside.ack_call") {
		t.Errorf("the ack was not sent whole to its worker:%s", ack)
	}
	// A pop that names no partition reads every shard for the ready ones,
	// then takes one on its shard.
	any := log.during(t, func() {
		if popped, err = pop(s, PopRequest{Queue: queue, Group: "g", Batch: 100, Partitions: 1}); err != nil {
			t.Fatal(err)
		}
	})
	if len(popped.Leases) != 1 || any.count("PREPARE TRANSACTION") > 0 {
		t.Errorf("a pop of any partition leased %d partitions, %d prepared:%s", len(popped.Leases), any.count("PREPARE TRANSACTION"), any)
	}
	if !any.calls("queenside.pop_from") {
		t.Errorf("the pop was not sent whole to its worker:%s", any)
	}
	t.Logf("a pop of any partition: %d commands to %v:%s", len(any), any.nodes(), any)
	if _, err := s.Release(ctx, []string{popped.Leases[0].LeaseID}); err != nil {
		t.Fatal(err)
	}

	// Leases on both workers, acked by one call: a call a shard, each sent
	// whole to its worker and committed there in one phase (each lease's
	// ack stands on its own). A transaction op over both is one
	// transaction, committed in two phases.
	if _, err := s.Push(ctx, []Message{message(queue, apart[0], "c0"), message(queue, apart[1], "d0")}); err != nil {
		t.Fatal(err)
	}
	var items []protocol.AckItem
	for _, p := range apart {
		r, err := pop(s, PopRequest{Queue: queue, Partition: p, Group: "g", Batch: 10, Partitions: 1})
		if err != nil || len(r.Messages) == 0 {
			t.Fatal(r, err)
		}
		items = append(items, completedAll(r)...)
	}
	both := log.during(t, func() {
		res, err := s.Ack(ctx, items)
		if err != nil || !res.Results[0].Success || !res.Results[len(items)-1].Success {
			t.Fatal(res, err)
		}
	})
	if len(both.nodes()) != 2 || both.count("PREPARE TRANSACTION") != 0 || len(both) != 2 {
		t.Errorf("an ack over two workers went to %v, %d prepared: want a call to each, one phase each:%s",
			both.nodes(), both.count("PREPARE TRANSACTION"), both)
	}
	t.Logf("an ack over two workers: %d commands to %v", len(both), both.nodes())
	if _, err := s.Push(ctx, []Message{message(queue, apart[0], "e0"), message(queue, apart[1], "f0")}); err != nil {
		t.Fatal(err)
	}
	items = nil
	for _, p := range apart {
		r, err := pop(s, PopRequest{Queue: queue, Partition: p, Group: "g", Batch: 10, Partitions: 1})
		if err != nil || len(r.Messages) == 0 {
			t.Fatal(r, err)
		}
		items = append(items, completedAll(r)...)
	}
	txn := log.during(t, func() {
		_, _, err := s.Transaction(ctx, items, []Message{message(queue, apart[0], "e"), message(queue, apart[1], "f")})
		if err != nil {
			t.Fatal(err)
		}
	})
	if len(txn.nodes()) != 2 || txn.count("PREPARE TRANSACTION") != 2 {
		t.Errorf("a transaction op over two workers went to %v, %d prepared: want both, two phases:%s",
			txn.nodes(), txn.count("PREPARE TRANSACTION"), txn)
	}
	t.Logf("a transaction op over two workers: %d commands to %v", len(txn), txn.nodes())
}

// pop serves one pop as the sidecar does, in a consumption round.
func pop(s *Store, r PopRequest) (protocol.PopResult, error) {
	res, errs := s.PopMany(context.Background(), []PopRequest{r}, 1<<20)
	return res[0], errs[0]
}

func message(queue, partition, txid string) Message {
	return Message{Queue: queue, Partition: partition, Payload: []byte{0xc0}, TransactionID: txid, MessageID: uuid.Must(uuid.NewV7())}
}
