package bench

import (
	"context"
	cryptorand "crypto/rand"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// The floor scenario asks what PostgreSQL must spend on a message at the
// least, whatever the broker: it issues, as plain SQL and without the
// sidecar, only the row writes the guarantees require for the traffic of
// mixed, and reports PostgreSQL's CPU for them. Every choice leans in the
// broker's favour, so a broker keeping the guarantees spends about this or
// more (plain SQL has overheads of its own, so it is an estimate, not a
// strict bound):
//
//   - push: one transaction of FloorTransactionMessages messages over
//     FloorPartitions partitions chosen at random. Each partition it touches
//     has its serialiser row updated, in id order (the lock that keeps
//     offsets gapless and commit times monotone, and the next offset);
//     each message gets its dedup row (the exact probe needs one index
//     entry a message); and all the messages go into ONE storage row, the
//     least any layout can write (queenside writes one a partition).
//   - consume: for every FloorLeaseMessages messages one lease write and
//     one ack write of a cursor row, FloorLeasePartitions cursors a
//     statement. A lease covers as many messages as a partition gathers
//     between two pops; with 40,000 msg/s over 1,000 partitions and a p99
//     of 100 ms, that is at most 4.
//
// Nothing is read: no dedup probe, no pop of the messages, no choice of the
// partitions to serve. The tables are copies of queenside's own (same
// columns, indexes and fill factors), in a schema of their own, dropped at
// the end.

// floorTables creates the scenario's schema; %[1]s is its name.
const floorTables = `
CREATE SCHEMA %[1]s;
CREATE TABLE %[1]s.partitions (LIKE queenside.partitions INCLUDING ALL) WITH (fillfactor = 50);
CREATE TABLE %[1]s.dedup (LIKE queenside.dedup INCLUDING ALL);
CREATE TABLE %[1]s.cursors (LIKE queenside.cursors INCLUDING ALL) WITH (fillfactor = 70);
CREATE TABLE %[1]s.storage (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    committed_at    timestamptz NOT NULL,
    partition_ids   bigint[]    NOT NULL,
    base_offsets    bigint[]    NOT NULL,
    counts          integer[]   NOT NULL,
    message_ids     uuid[]      NOT NULL,
    transaction_ids text[]      NOT NULL,
    payloads        bytea[]     NOT NULL);
ALTER TABLE %[1]s.storage ALTER COLUMN payloads SET STORAGE EXTERNAL`

// floorRows gives the tables their partitions, $1 of them, and a cursor
// on each.
const floorRows = `
WITH made AS (
    INSERT INTO %[1]s.partitions (id, queue_id, name) SELECT g, 0, 'p' || g FROM generate_series(1, $1::integer) g
    RETURNING id)
INSERT INTO %[1]s.cursors (group_id, partition_id, committed, head_at) SELECT 0, id, 0, now() FROM made`

// floorPush is one push transaction: $1 the distinct partitions in id
// order and $2 how many messages each gets; then per message, in the
// order of $1, its partition, its place in that partition's run, its
// 128-bit hash, id, transaction id and payload.
const floorPush = `
WITH moved AS (
    UPDATE %[1]s.partitions p
       SET next_offset = p.next_offset + c.n, last_committed_at = now()
      FROM unnest($1::bigint[], $2::integer[]) AS c (id, n)
     WHERE p.id = c.id
    RETURNING p.id, p.next_offset - c.n AS base),
hashes AS (
    INSERT INTO %[1]s.dedup (partition_id, hash, msg_offset, message_id, committed_at)
    SELECT m.pid, m.hash, moved.base + m.k, m.mid, now()
      FROM unnest($3::bigint[], $4::integer[], $5::uuid[], $6::uuid[]) AS m (pid, k, hash, mid)
      JOIN moved ON moved.id = m.pid),
stored AS (
    INSERT INTO %[1]s.storage (committed_at, partition_ids, base_offsets, counts, message_ids, transaction_ids, payloads)
    SELECT now(), $1, array_agg(moved.base ORDER BY moved.id), $2, $6, $7, $8 FROM moved)
SELECT count(*) FROM moved`

// floorLease and floorAck are the cursor writes of one pop and one ack
// over the partitions $1, leases of $2 messages.
const (
	floorLease = `
UPDATE %[1]s.cursors
   SET lease_id = gen_random_uuid(), lease_from = committed, lease_to = committed + $2 - 1,
       lease_expires_at = now() + interval '60 seconds'
 WHERE group_id = 0 AND partition_id = ANY ($1::bigint[])`
	floorAck = `
UPDATE %[1]s.cursors
   SET committed = committed + $2, lease_id = NULL, lease_from = NULL, lease_to = NULL, lease_expires_at = NULL
 WHERE group_id = 0 AND partition_id = ANY ($1::bigint[])`
)

func (b *bench) scenarioFloor(ctx context.Context) (r Result) {
	r = Result{Name: ScenarioFloor}
	schema, drop, err := b.openScratch(ctx, ScenarioFloor, func(ctx context.Context, db *pgx.Conn, schema string) error {
		return createFloor(ctx, db, schema, b.cfg.FloorPartitions)
	})
	if err != nil {
		r.setupFailed(err)
		return r
	}
	defer func() {
		if err := drop(); err != nil {
			r.setupFailed(err)
		}
	}()
	conns := make([]*pgx.Conn, b.cfg.Connections)
	for i := range conns {
		if conns[i], err = floorConn(ctx, b.dbURL); err != nil {
			r.setupFailed(err)
			return r
		}
		defer conns[i].Close(context.Background())
	}

	m := b.probe.start()
	end := time.Now().Add(b.cfg.FloorDuration)
	ts := tallies(len(conns))
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Go(func() { b.floorWorker(ctx, c, schema, ts[i], end) })
	}
	wg.Wait()
	m.stop(&r)
	r.absorb(newTally().merge(ts...), "push")
	return r
}

// floorConn connects a worker, planned as queenside's push is: partitions
// found by key, so locked in the order given and never deadlocking two
// workers.
func floorConn(ctx context.Context, url string) (*pgx.Conn, error) {
	c, err := pgx.Connect(ctx, url)
	if err == nil {
		if _, err = c.Exec(ctx, "SET enable_seqscan = off; SET enable_bitmapscan = off"); err != nil {
			c.Close(context.Background())
		}
	}
	if err != nil {
		return nil, fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	return c, nil
}

// createFloor makes the scenario's tables in schema, with partitions
// partitions and a cursor on each.
func createFloor(ctx context.Context, db *pgx.Conn, schema string, partitions int) error {
	if _, err := db.Exec(ctx, fmt.Sprintf(floorTables, schema)); err != nil {
		return fmt.Errorf("create the floor's tables: %w", err)
	}
	if _, err := db.Exec(ctx, fmt.Sprintf(floorRows, schema), partitions); err != nil {
		return fmt.Errorf("fill the floor's tables: %w", err)
	}
	if _, err := db.Exec(ctx, fmt.Sprintf("ANALYZE %[1]s.partitions, %[1]s.cursors", schema)); err != nil {
		return fmt.Errorf("analyze the floor's tables: %w", err)
	}
	return nil
}

// floorWorker runs push transactions, each followed by its share of cursor
// writes, until end. Its messages are those pushed.
func (b *bench) floorWorker(ctx context.Context, c *pgx.Conn, schema string, t *tally, end time.Time) {
	push, lease, ack := fmt.Sprintf(floorPush, schema), fmt.Sprintf(floorLease, schema), fmt.Sprintf(floorAck, schema)
	n, parts := b.cfg.FloorTransactionMessages, b.cfg.FloorPartitions
	perLease, leaseParts := b.cfg.FloorLeaseMessages, b.cfg.FloorLeasePartitions
	payload := b.pay.stamped(time.Now())
	for k := 0; ctx.Err() == nil && time.Now().Before(end); k++ {
		args := floorPushArgs(n, parts, payload, strconv.Itoa(k))
		start := time.Now()
		if _, err := c.Exec(ctx, push, args...); err != nil {
			t.failf("push: %v", err)
			return
		}
		t.took("push", start)
		t.messages += int64(n)
		if perLease == 0 {
			continue
		}
		// The pops lease, then the acks release the same cursors.
		var sets [][]int64
		for left := n / perLease; left > 0; left -= leaseParts {
			sets = append(sets, randomIDs(min(left, leaseParts, parts), parts))
		}
		for _, stmt := range []string{lease, ack} {
			for _, ids := range sets {
				if _, err := c.Exec(ctx, stmt, ids, perLease); err != nil {
					t.failf("cursor write: %v", err)
					return
				}
			}
		}
	}
}

// floorPushArgs makes the arguments of floorPush: n messages, each to one
// of partitions 1..parts at random, ordered by partition.
func floorPushArgs(n, parts int, payload []byte, tag string) []any {
	pids := make([]int64, n)
	for i := range pids {
		pids[i] = 1 + rand.Int64N(int64(parts))
	}
	slices.Sort(pids)
	var ids []int64
	var counts []int32
	ks := make([]int32, n)
	hashes, mids := make([][16]byte, n), make([][16]byte, n)
	txids, payloads := make([]string, n), make([][]byte, n)
	for i, p := range pids {
		if len(ids) == 0 || ids[len(ids)-1] != p {
			ids, counts = append(ids, p), append(counts, 0)
		}
		ks[i] = counts[len(counts)-1]
		counts[len(counts)-1]++
		_, _ = cryptorand.Read(hashes[i][:])
		_, _ = cryptorand.Read(mids[i][:])
		txids[i] = tag + "-" + strconv.Itoa(i)
		payloads[i] = payload
	}
	return []any{ids, counts, pids, ks, hashes, mids, txids, payloads}
}

// randomIDs returns k distinct partitions of 1..parts, in id order.
func randomIDs(k, parts int) []int64 {
	seen := make(map[int64]bool, k)
	for len(seen) < k {
		seen[1+rand.Int64N(int64(parts))] = true
	}
	ids := make([]int64, 0, k)
	for id := range seen {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}
