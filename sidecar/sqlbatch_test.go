package sidecar

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/queenside/queenside/protocol"
)

// queenside.send_batch (schema migration 15): many messages in one call.

// querier is a connection, a pool or a transaction.
type querier interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}

// sqlSendBatch sends items, all of one queue, with queenside.send_batch.
func sqlSendBatch(t *testing.T, q querier, queue string, items []protocol.PushItem) []sent {
	t.Helper()
	payloads := make([][]byte, len(items))
	partitions := make([]*string, len(items))
	txids := make([]*string, len(items))
	headers := make([]map[string]string, len(items))
	traces := make([]*string, len(items))
	for i, it := range items {
		payloads[i] = it.Payload
		partitions[i] = nonEmpty(it.Partition)
		txids[i] = nonEmpty(it.TransactionID)
		headers[i] = it.Headers
		traces[i] = nonEmpty(it.TraceID)
	}
	rows, err := q.Query(testContext(t), `SELECT status, "offset", message_id::text, transaction_id
		FROM queenside.send_batch($1, $2, $3, $4, $5::jsonb[], $6)`, queue, payloads, partitions, txids, headers, traces)
	if err != nil {
		t.Fatalf("queenside.send_batch: %v", err)
	}
	defer rows.Close()
	var out []sent
	for rows.Next() {
		var s sent
		if err := rows.Scan(&s.status, &s.offset, &s.messageID, &s.transactionID); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("queenside.send_batch: %v", err)
	}
	return out
}

func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// A batch answers, message by message, what a sidecar's push of the same
// items answers (store/push.go keeps the same rule in Go), and stores the
// same messages: over several partitions, with a repeat inside the batch,
// a transaction id stored before, headers and trace ids; with
// deduplication on and off.
func TestSQLSendBatchAnswersAsASidecarPush(t *testing.T) {
	ts := startSidecar(t, "", Options{})
	c := ts.client(t)
	for _, dedup := range []bool{true, false} {
		t.Run(fmt.Sprintf("dedup=%v", dedup), func(t *testing.T) {
			viaSQL, viaSocket := fmt.Sprintf("sql-%v", dedup), fmt.Sprintf("socket-%v", dedup)
			for _, q := range []string{viaSQL, viaSocket} {
				configure(t, c, q, func(o *protocol.QueueOptions) {
					if !dedup {
						o.DedupWindowSeconds = 0
					}
				})
			}
			batch := func(queue string) []protocol.PushItem {
				items := []protocol.PushItem{
					item(t, queue, "p2", "a", "a1"),
					item(t, queue, "p1", "b", "b1"),
					item(t, queue, "p1", "old", "old again"),
					item(t, queue, "p2", "a", "a2"),
					item(t, queue, "p1", "", "no id"),
					item(t, queue, "p3", "c", "c1"),
					item(t, queue, "p1", "b", "b2"),
					item(t, queue, "", "d", "d1"),
				}
				items[5].Headers = map[string]string{"kind": "created"}
				items[5].TraceID = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
				return items
			}
			sqlOld := mustPush(t, c, item(t, viaSQL, "p1", "old", "old"))
			socketOld := mustPush(t, c, item(t, viaSocket, "p1", "old", "old"))

			got := sqlSendBatch(t, ts.pool, viaSQL, batch(viaSQL))
			want := mustPush(t, c, batch(viaSocket)...)
			if len(got) != len(want) {
				t.Fatalf("%d answers for %d messages", len(got), len(want))
			}
			sqlIDs := map[string]int{sqlOld[0].MessageID: -1}
			socketIDs := map[string]int{socketOld[0].MessageID: -1}
			for i := range got {
				if _, seen := sqlIDs[got[i].messageID]; !seen {
					sqlIDs[got[i].messageID] = i
				}
				if _, seen := socketIDs[want[i].MessageID]; !seen {
					socketIDs[want[i].MessageID] = i
				}
				// A duplicate names the original: the same one either way.
				if got[i].status != want[i].Status || got[i].offset != *want[i].Offset ||
					sqlIDs[got[i].messageID] != socketIDs[want[i].MessageID] {
					t.Errorf("message %d: SQL %+v, socket %+v", i, got[i], want[i])
				}
				if got[i].transactionID == "" || (batch(viaSQL)[i].TransactionID != "" && got[i].transactionID != want[i].TransactionID) {
					t.Errorf("message %d: transaction id %q, socket's %q", i, got[i].transactionID, want[i].TransactionID)
				}
			}
			if dedup && (got[2].status != "duplicate" || got[3].status != "duplicate" || got[6].status != "duplicate") {
				t.Fatalf("with deduplication, the repeats are not duplicates: %+v", got)
			}
			if !dedup && got[3].status != "queued" {
				t.Fatalf("without deduplication, a repeat is a duplicate: %+v", got)
			}

			// Stored alike: the same messages at the same offsets, with
			// their headers and trace ids.
			stored := func(queue string) []string {
				res := mustPop(t, c, protocol.PopArgs{Queue: queue, Group: "g", Batch: 100, Partitions: 10})
				var out []string
				for _, m := range res.Messages {
					txid := m.TransactionID
					if txid != "old" && txid != "a" && txid != "b" && txid != "c" && txid != "d" {
						txid = "made up"
					}
					out = append(out, fmt.Sprintf("%s/%d %x %s %v %s", m.Partition, m.Offset, []byte(m.Payload), txid, m.Headers, m.TraceID))
				}
				sort.Strings(out)
				return out
			}
			if s, w := stored(viaSQL), stored(viaSocket); fmt.Sprint(s) != fmt.Sprint(w) {
				t.Fatalf("stored from SQL:\n%v\nthrough the socket:\n%v", s, w)
			}
		})
	}
}

// A batch rolled back leaves no message and no gap.
func TestSQLSendBatchRollsBackWhole(t *testing.T) {
	ts := startSidecar(t, "", Options{})
	ctx := testContext(t)
	tx, err := ts.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	items := []protocol.PushItem{item(t, "q", "p", "x", 1), item(t, "q", "p", "y", 2), item(t, "q", "r", "z", 3)}
	if got := sqlSendBatch(t, tx, "q", items); got[1].offset != 1 || got[2].offset != 0 {
		t.Fatalf("in the transaction: %+v", got)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	got := sqlSendBatch(t, ts.pool, "q", items)
	for i, want := range []int64{0, 1, 0} {
		if got[i].status != "queued" || got[i].offset != want {
			t.Fatalf("after the rollback: %+v", got)
		}
	}
}

// The largest message a send stores is delivered by a sidecar with the
// default frame limit; one byte more is refused, with the limit named.
func TestSQLSendRefusesAMessageNoSidecarCanDeliver(t *testing.T) {
	ts := startSidecar(t, "", Options{})
	c := ts.client(t)
	ctx := testContext(t)
	var limit int
	if err := ts.pool.QueryRow(ctx, `SELECT queenside.send_max_message_bytes()`).Scan(&limit); err != nil {
		t.Fatal(err)
	}
	if limit >= protocol.DefaultMaxFrameBytes || limit < protocol.DefaultMaxFrameBytes-64<<10 {
		t.Fatalf("send_max_message_bytes %d against the default frame limit %d", limit, protocol.DefaultMaxFrameBytes)
	}
	bin := func(n int) []byte { // a msgpack bin 32 of n bytes in all
		b := make([]byte, n)
		b[0] = 0xc6
		binary.BigEndian.PutUint32(b[1:5], uint32(n-5))
		return b
	}
	sqlSend(t, ts.pool, "big", bin(limit), "Default", "largest")
	res := mustPop(t, c, protocol.PopArgs{Queue: "big", Group: "g", Batch: 1, AutoAck: true})
	if len(res.Messages) != 1 || len(res.Messages[0].Payload) != limit {
		t.Fatalf("the largest message sent: popped %d messages", len(res.Messages))
	}

	for _, query := range []string{`SELECT queenside.send('big', $1)`, `SELECT queenside.send_batch('big', ARRAY['\xc0'::bytea, $1])`} {
		_, err := ts.pool.Exec(ctx, query, bin(limit+1))
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Detail != "invalid_argument" || !strings.Contains(pgErr.Message, fmt.Sprint(limit)) || !strings.Contains(pgErr.Message, "--max-frame-bytes") {
			t.Fatalf("%s with one byte more: %v", query, err)
		}
	}
}
