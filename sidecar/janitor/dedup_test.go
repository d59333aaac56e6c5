package janitor

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/queenside/queenside/protocol"
	"github.com/queenside/queenside/sidecar/pgtest"
	"github.com/queenside/queenside/sidecar/store"
)

// The hashes are found again from the transaction ids: SQL must hash them
// exactly as the sidecar does.
func TestTransactionHashMatchesTheSidecars(t *testing.T) {
	f := newFixture(t, protocol.DefaultQueueOptions())
	for _, id := range []string{"", "order-1001", "héllo wörld", "01a22b04-6894-7d65-aa75-63f679ffff4b"} {
		var got [16]byte
		if err := f.pool.QueryRow(f.ctx, "SELECT queenside.transaction_hash($1)", id).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if want := store.TransactionHash(id); got != want {
			t.Errorf("transaction_hash(%q) = %x, want %x", id, got, want)
		}
	}
}

// A message consumed and deleted after a few seconds keeps its hash for the
// queue's window: a repeat is still a duplicate of it. Once the hash is
// purged, a repeat is a new message.
//
// The horizon of a hash is never under 900 s, so the test backdates commit
// times with SQL instead of waiting.
func TestAHashOutlivesItsMessage(t *testing.T) {
	f := newFixture(t, options(func(o *protocol.QueueOptions) {
		o.CompletedRetentionSeconds = 1
		o.DedupWindowSeconds = 3600
	}))
	f.pop("g", "", 1, true)
	first := f.pushID("p", "order-1")
	f.pop("g", "", 10, true)
	f.backdate(10 * time.Second)
	if r := f.round(); r.Segments != 1 || r.Orphaned != 1 || r.OrphanHashes != 0 {
		t.Fatalf("round: %+v; want the consumed segment deleted, its hash kept", r)
	}
	if got := f.retained("p"); len(got) != 0 {
		t.Fatalf("retained %v", got)
	}
	again := f.pushID("p", "order-1")
	if !again.Duplicate || again.Offset != 0 || again.MessageID != first.MessageID {
		t.Fatalf("a repeat inside the window, its message deleted: %+v; want a duplicate of %+v", again, first)
	}
	// Past the 900 s floor, still inside the window of an hour: kept.
	f.backdate(20 * time.Minute)
	if r := f.round(); r.OrphanHashes != 0 || f.dedupRows() != 1 {
		t.Fatalf("round inside the window: %+v, %d hashes", r, f.dedupRows())
	}
	if again := f.pushID("p", "order-1"); !again.Duplicate {
		t.Fatalf("a repeat 20 minutes later: %+v, want a duplicate", again)
	}
	// Past the window: purged, and a repeat is a new message.
	f.backdate(time.Hour)
	if r := f.round(); r.OrphanHashes != 1 {
		t.Fatalf("round past the window: %+v; want its hash purged", r)
	}
	if n, o := f.dedupRows(), f.count("SELECT count(*) FROM queenside.orphan_hashes"); n != 0 || o != 0 {
		t.Fatalf("%d hashes and %d kept segments' hashes remain", n, o)
	}
	if fresh := f.pushID("p", "order-1"); fresh.Duplicate || fresh.Offset != 1 {
		t.Fatalf("a repeat after the purge: %+v; want a new message at 1", fresh)
	}
}

// The segments of a partition that one pass deletes keep their hashes in
// one row, not a row each: at a trickle every segment holds one message.
// Each hash still answers a repeat as a duplicate of its own message, and
// all of them are purged once due.
func TestHashesOfAPassKeptInOneRow(t *testing.T) {
	f := newFixture(t, options(func(o *protocol.QueueOptions) {
		o.CompletedRetentionSeconds = 1
		o.DedupWindowSeconds = 3600
	}))
	f.pop("g", "", 1, true)
	ids := []string{"order-1", "order-2", "order-3", "order-4", "order-5"}
	var first []store.Outcome
	for _, id := range ids { // a push each: five segments of one message
		first = append(first, f.pushID("p", id))
	}
	f.pop("g", "", 10, true)
	f.backdate(10 * time.Second)
	if r := f.round(); r.Segments != 5 || r.Orphaned != 1 {
		t.Fatalf("round: %+v; want the 5 consumed segments deleted and their hashes kept in one row", r)
	}
	if n := f.count("SELECT sum(cardinality(hashes)) FROM queenside.orphan_hashes"); n != 5 {
		t.Fatalf("%d hashes kept, want 5", n)
	}
	for i, id := range ids {
		again := f.pushID("p", id)
		if !again.Duplicate || again.Offset != int64(i) || again.MessageID != first[i].MessageID {
			t.Fatalf("a repeat of %s, its message deleted: %+v; want a duplicate of %+v", id, again, first[i])
		}
	}
	f.backdate(2 * time.Hour)
	if r := f.round(); r.OrphanHashes != 5 {
		t.Fatalf("round past the window: %+v; want the 5 hashes purged", r)
	}
	if n, o := f.dedupRows(), f.count("SELECT count(*) FROM queenside.orphan_hashes"); n != 0 || o != 0 {
		t.Fatalf("%d hashes and %d rows of kept hashes remain", n, o)
	}
}

// The hashes of messages still retained are purged too, at the same horizon.
func TestHashesOfRetainedMessagesArePurged(t *testing.T) {
	f := newFixture(t, options(func(o *protocol.QueueOptions) {
		o.CompletedRetentionSeconds = 60
		o.DedupWindowSeconds = 60
	}))
	f.push("p", "kept", 4) // no group: the messages stay
	f.backdate(10 * time.Minute)
	if r := f.round(); r.DedupHashes != 0 || f.dedupRows() != 4 {
		t.Fatalf("hashes purged before the 900 s floor: %+v, %d left", r, f.dedupRows())
	}
	f.backdate(10 * time.Minute)
	if r := f.round(); r.DedupHashes != 4 || r.Segments != 0 {
		t.Fatalf("round past the floor: %+v; want 4 hashes purged and the messages kept", r)
	}
	if n, got := f.dedupRows(), f.retained("p"); n != 0 || len(got) != 1 {
		t.Fatalf("%d hashes left, retained %v", n, got)
	}
	// The mark moved past the segment: another round reads nothing again.
	if mark := f.count("SELECT purged_to FROM queenside.dedup_marks"); mark != 4 {
		t.Fatalf("dedup mark %d, want 4", mark)
	}
	if r := f.round(); r.DedupHashes != 0 || r.Batches != 3 {
		t.Fatalf("a round with nothing due: %+v", r)
	}
}

// A hash taken over by a later message with the same transaction id (after
// the window) belongs to that message: it is kept for the later one's own
// horizon even when the earlier message's comes.
func TestAHashTakenOverIsKeptForTheLaterMessage(t *testing.T) {
	f := newFixture(t, options(func(o *protocol.QueueOptions) {
		o.CompletedRetentionSeconds = 60
		o.DedupWindowSeconds = 60
	}))
	f.pushID("p", "twice")
	f.backdate(2 * time.Hour)
	if later := f.pushID("p", "twice"); later.Duplicate || later.Offset != 1 {
		t.Fatalf("a repeat past the window: %+v", later)
	}
	if r := f.round(); r.DedupHashes != 0 {
		t.Fatalf("round: %+v; the hash is the later message's", r)
	}
	// The earlier message's segment still holds the hash (a segment of one
	// message keeps it): the newest message of the hash is the one a
	// repeat answers.
	if again := f.pushID("p", "twice"); !again.Duplicate || again.Offset != 1 {
		t.Fatalf("a repeat inside the later message's window: %+v; want a duplicate of offset 1", again)
	}
}

// A hash kept in a dedup row lives max(dedup_window_seconds,
// completed_retention_seconds, 900 s).
func TestHashHorizon(t *testing.T) {
	for _, c := range []struct {
		name              string
		window, completed int
		age               time.Duration
		purged            bool
	}{
		{"the floor", 60, 60, 899 * time.Second, false},
		{"past the floor", 60, 60, 901 * time.Second, true},
		{"the window", 7200, 60, 7190 * time.Second, false},
		{"past the window", 7200, 60, 7210 * time.Second, true},
		{"completed retention", 60, 7200, 7190 * time.Second, false},
		{"past completed retention", 60, 7200, 7210 * time.Second, true},
		{"dedup off", 0, 60, 901 * time.Second, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t, options(func(o *protocol.QueueOptions) {
				o.DedupWindowSeconds = c.window
				o.CompletedRetentionSeconds = c.completed
			}))
			f.push("p", "x", 2) // a segment of two messages: its hashes are dedup rows
			f.backdate(c.age)
			f.round()
			if purged := f.dedupRows() == 0; purged != c.purged {
				t.Fatalf("aged %v with window %d s and completed retention %d s: purged %v, want %v",
					c.age, c.window, c.completed, purged, c.purged)
			}
		})
	}
}

// dedup and orphan_hashes grow for as long as the hashes are kept, and
// autovacuum analyzes them each time they grow by a tenth: its sample is
// 300 rows, not 30,000, since a sample that size pushed the working set
// out of shared_buffers once dedup outgrew them (migration 17). With those
// statistics a probe of one hash, and of a batch joined from arrays, still
// goes through dedup_key, also as the generic plan PL/pgSQL caches.
func TestDedupIsAnalyzedFromASmallSample(t *testing.T) {
	pgtest.SkipOnCitus(t, "the coordinator's tables hold no rows to sample; schema's TestStatisticsTargetsReachTheShards checks the shards' targets")
	f := newFixture(t, protocol.DefaultQueueOptions())
	msgs := make([]store.Message, 5000)
	for i := range msgs {
		msgs[i] = store.Message{Queue: f.queue, Partition: "p", Payload: []byte{0xc0},
			TransactionID: fmt.Sprintf("order-%d", i), MessageID: uuid.Must(uuid.NewV7())}
	}
	if _, err := f.st.Push(f.ctx, msgs); err != nil {
		t.Fatal(err)
	}
	f.exec(`INSERT INTO queenside.orphan_hashes (purge_after, partition_id, last_offset, committed_at, hashes)
SELECT now() + interval '1 hour', 1, i, now(), ARRAY[gen_random_uuid()] FROM generate_series(1, 5000) i`)

	// ANALYZE VERBOSE says how many rows it sampled, in a notice.
	conn, notices := f.noticeConn()
	sample := regexp.MustCompile(`containing 5000 live rows .*; (\d+) rows in sample`)
	for _, table := range []string{"dedup", "orphan_hashes"} {
		*notices = nil
		if _, err := conn.Exec(f.ctx, "ANALYZE VERBOSE queenside."+table); err != nil {
			t.Fatal(err)
		}
		rows := -1
		for _, m := range *notices {
			if g := sample.FindStringSubmatch(m); g != nil {
				rows, _ = strconv.Atoi(g[1])
			}
		}
		if rows < 0 || rows > 300 {
			t.Errorf("%s: ANALYZE sampled %d of 5,000 rows, want at most 300: %q", table, rows, *notices)
		}
	}

	// The probes as push and ack make them, of one hash and of ten (a push
	// to a partition at a trickle), each also as a generic plan.
	probes := map[string]string{
		"one hash": `SELECT d.msg_offset FROM queenside.dedup d
 WHERE uuid_hash_extended(d.hash, d.partition_id) = uuid_hash_extended($1[1], $2[1])
   AND d.partition_id = $2[1] AND d.hash = $1[1]`,
		"a batch": `SELECT d.msg_offset FROM unnest($1, $2) AS u (h, pid)
  JOIN queenside.dedup d ON uuid_hash_extended(d.hash, d.partition_id) = uuid_hash_extended(u.h, u.pid)
                        AND d.hash = u.h AND d.partition_id = u.pid`,
	}
	var hashes, pids string
	if err := conn.QueryRow(f.ctx, `SELECT array_agg(d.hash)::text, array_agg(d.partition_id)::text
  FROM (SELECT hash, partition_id FROM queenside.dedup WHERE msg_offset % 500 = 7) d`).Scan(&hashes, &pids); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"auto", "force_generic_plan"} {
		for name, probe := range probes {
			if _, err := conn.Exec(f.ctx, "SET plan_cache_mode = "+mode+"; DEALLOCATE ALL; PREPARE probe(uuid[], bigint[]) AS "+probe); err != nil {
				t.Fatal(err)
			}
			rows, _ := conn.Query(f.ctx, fmt.Sprintf("EXPLAIN (FORMAT TEXT, COSTS OFF) EXECUTE probe('%s', '%s')", hashes, pids),
				pgx.QueryExecModeSimpleProtocol)
			lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				t.Fatal(err)
			}
			if plan := strings.Join(lines, "\n"); !strings.Contains(plan, "dedup_key") || strings.Contains(plan, "Seq Scan") {
				t.Errorf("%s, plan_cache_mode %s: the probe does not go through dedup_key:\n%s", name, mode, plan)
			}
		}
	}
}
