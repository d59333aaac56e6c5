package janitor

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/queenside/queenside/protocol"
	"github.com/queenside/queenside/sidecar/pgtest"
	"github.com/queenside/queenside/sidecar/store"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// fixture is a fresh database with a store, a janitor whose rounds the
// test runs itself, and a pool for looking at and backdating the tables.
type fixture struct {
	t     *testing.T
	ctx   context.Context
	url   string
	st    *store.Store
	j     *Janitor
	pool  *pgxpool.Pool
	queue string
}

func newFixture(t *testing.T, opts protocol.QueueOptions) *fixture {
	t.Helper()
	url := pgtest.NewDatabase(t)
	f := &fixture{t: t, ctx: context.Background(), url: url, queue: "q", pool: pgtest.Pool(t, url)}
	f.st = openStore(t, url)
	f.j = New(f.st, Options{})
	if _, err := f.st.Configure(f.ctx, f.queue, opts); err != nil {
		t.Fatal(err)
	}
	return f
}

func openStore(t *testing.T, url string) *store.Store {
	t.Helper()
	st, err := store.Open(context.Background(), url, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	return st
}

// options are the defaults with the changes a test makes.
func options(change func(*protocol.QueueOptions)) protocol.QueueOptions {
	o := protocol.DefaultQueueOptions()
	change(&o)
	return o
}

// push stores one segment: a push of n messages to a partition, whose
// transaction ids are prefix-0, prefix-1...
func (f *fixture) push(partition, prefix string, n int) []store.Outcome {
	f.t.Helper()
	msgs := make([]store.Message, n)
	for i := range msgs {
		msgs[i] = store.Message{Queue: f.queue, Partition: partition, Payload: []byte{0xa1, 'x'},
			TransactionID: fmt.Sprintf("%s-%d", prefix, i), MessageID: uuid.Must(uuid.NewV7())}
	}
	out, err := f.st.Push(f.ctx, msgs)
	if err != nil {
		f.t.Fatal(err)
	}
	return out
}

// pushID pushes one message with the given transaction id.
func (f *fixture) pushID(partition, txid string) store.Outcome {
	f.t.Helper()
	out, err := f.st.Push(f.ctx, []store.Message{{Queue: f.queue, Partition: partition, Payload: []byte{0xc0},
		TransactionID: txid, MessageID: uuid.Must(uuid.NewV7())}})
	if err != nil {
		f.t.Fatal(err)
	}
	return out[0]
}

// pop takes up to batch messages for group from partition ("" for any).
func (f *fixture) pop(group, partition string, batch int, autoAck bool) protocol.PopResult {
	f.t.Helper()
	res, err := f.st.Pop(f.ctx, store.PopRequest{Queue: f.queue, Partition: partition, Group: group,
		Batch: batch, Partitions: 1, AutoAck: autoAck, Mode: "all"}, 1<<24)
	if err != nil {
		f.t.Fatal(err)
	}
	return res
}

// offsets lists the offsets of a pop's messages.
func offsets(res protocol.PopResult) []int64 {
	out := []int64{}
	for _, m := range res.Messages {
		out = append(out, m.Offset)
	}
	return out
}

// backdate moves the commit times of everything stored so far in the
// queue (messages, their hashes, the hashes kept of deleted messages) age
// into the past, all by the same amount so their order is kept. Tests
// backdate rather than wait: retention counts in seconds, and the hashes'
// horizon is never under 900 s.
func (f *fixture) backdate(age time.Duration) {
	f.t.Helper()
	secs := age.Seconds()
	// In UTC, where timestamp minus interval is immutable: Citus refuses
	// an UPDATE of a stable expression of a column (SCALING.md, R4).
	earlier := func(column string) string {
		return "((" + column + " AT TIME ZONE 'UTC') - make_interval(secs => $2)) AT TIME ZONE 'UTC'"
	}
	f.exec(`UPDATE queenside.segments s SET committed_at = `+earlier("s.committed_at")+`
	         FROM queenside.partitions p JOIN queenside.queues q ON q.id = p.queue_id
	        WHERE s.partition_id = p.id AND q.name = $1`, f.queue, secs)
	f.exec(`UPDATE queenside.dedup d SET committed_at = `+earlier("d.committed_at")+`
	         FROM queenside.partitions p JOIN queenside.queues q ON q.id = p.queue_id
	        WHERE d.partition_id = p.id AND q.name = $1`, f.queue, secs)
	f.exec(`UPDATE queenside.orphan_hashes o SET committed_at = `+earlier("o.committed_at")+`,
	                                            purge_after = `+earlier("o.purge_after")+`
	         FROM queenside.partitions p JOIN queenside.queues q ON q.id = p.queue_id
	        WHERE o.partition_id = p.id AND q.name = $1`, f.queue, secs)
}

func (f *fixture) exec(sql string, args ...any) {
	f.t.Helper()
	if _, err := f.pool.Exec(f.ctx, sql, args...); err != nil {
		f.t.Fatalf("%s: %v", sql, err)
	}
}

func (f *fixture) count(sql string, args ...any) int64 {
	f.t.Helper()
	var n int64
	if err := f.pool.QueryRow(f.ctx, sql, args...).Scan(&n); err != nil {
		f.t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// round runs one janitor round, which must not be skipped.
func (f *fixture) round() Round {
	f.t.Helper()
	r, err := f.j.Round(f.ctx)
	if err != nil {
		f.t.Fatal(err)
	}
	if r.Skipped {
		f.t.Fatal("round skipped: another janitor holds the lock")
	}
	return r
}

// retained lists the [base, last] offsets of a partition's segments.
func (f *fixture) retained(partition string) [][2]int64 {
	f.t.Helper()
	rows, err := f.pool.Query(f.ctx, `
		SELECT s.base_offset, s.last_offset FROM queenside.segments s
		  JOIN queenside.partitions p ON p.id = s.partition_id
		  JOIN queenside.queues q ON q.id = p.queue_id
		 WHERE q.name = $1 AND p.name = $2 ORDER BY s.last_offset`, f.queue, partition)
	if err != nil {
		f.t.Fatal(err)
	}
	defer rows.Close()
	out := [][2]int64{}
	for rows.Next() {
		var r [2]int64
		if err := rows.Scan(&r[0], &r[1]); err != nil {
			f.t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

// dedupRows counts the queue's hashes still kept.
func (f *fixture) dedupRows() int64 {
	return f.count(`SELECT count(*) FROM queenside.dedup d JOIN queenside.partitions p ON p.id = d.partition_id
	                 JOIN queenside.queues q ON q.id = p.queue_id WHERE q.name = $1`, f.queue)
}

// stats returns a partition's stats, by name.
func (f *fixture) stats(partition string) protocol.PartitionStats {
	f.t.Helper()
	res, err := f.st.Stats(f.ctx, f.queue)
	if err != nil {
		f.t.Fatal(err)
	}
	for _, p := range res.Partitions {
		if p.Partition == partition {
			return p
		}
	}
	f.t.Fatalf("stats: no partition %s in %+v", partition, res)
	return protocol.PartitionStats{}
}

// groupStats returns one group's stats in a partition.
func groupStats(t *testing.T, p protocol.PartitionStats, group string) protocol.GroupStats {
	t.Helper()
	for _, g := range p.Groups {
		if g.Group == group {
			return g
		}
	}
	t.Fatalf("stats of %s: no group %q in %+v", p.Partition, group, p.Groups)
	return protocol.GroupStats{}
}

func ackOffsets(f *fixture, lease string, status string, offs ...int64) protocol.AckResult {
	f.t.Helper()
	items := make([]protocol.AckItem, len(offs))
	for i := range offs {
		items[i] = protocol.AckItem{LeaseID: lease, Offset: &offs[i], Status: status}
	}
	res, err := f.st.Ack(f.ctx, items)
	if err != nil {
		f.t.Fatal(err)
	}
	return res
}

// noticeConn is a connection of its own whose notices (auto_explain's
// plans, ANALYZE VERBOSE's counts) gather in the slice returned.
func (f *fixture) noticeConn() (*pgx.Conn, *[]string) {
	f.t.Helper()
	cfg, err := pgx.ParseConfig(f.url)
	if err != nil {
		f.t.Fatal(err)
	}
	notices := new([]string)
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) { *notices = append(*notices, n.Message) }
	conn, err := pgx.ConnectConfig(f.ctx, cfg)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { conn.Close(context.Background()) })
	return conn, notices
}
