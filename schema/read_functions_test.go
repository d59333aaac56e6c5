package schema_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/queenside/queenside/schema"
)

// The reads (version 26) as a role with no privilege on the tables: what
// its grant of read allows it reads, the rest is refused with the right
// named, or left out of a listing; the owner reads everything; configure
// needs manage and writes nothing when refused.
func TestReadFunctionsCheckRead(t *testing.T) {
	ctx := context.Background()
	db := emptyDatabase(t)
	owner := connect(t, db)
	if err := schema.Migrate(ctx, owner); err != nil {
		t.Fatal(err)
	}
	role := fmt.Sprintf("qs_reader_%x", time.Now().UnixNano())
	app := roleConn(t, owner, db, role)

	exec := func(conn *pgx.Conn, sql string, args ...any) {
		t.Helper()
		if _, err := conn.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	// orders: p1 (3 messages), p2 (1), a group with a lease in p1; secret:
	// one message, a group; empty: a queue without partitions.
	for _, m := range []struct{ queue, partition, txid string }{
		{"orders", "p1", "tx-1"}, {"orders", "p1", "tx-2"}, {"orders", "p1", "tx-3"},
		{"orders", "p2", "tx-4"}, {"secret", "s1", "tx-5"},
	} {
		exec(owner, "SELECT * FROM queenside.send($1, $2::bytea, $3, $4)", m.queue, []byte("payload of "+m.txid), m.partition, m.txid)
	}
	exec(owner, "SELECT queenside.configure('empty', 60, 3, 3600, 0, 86400, 0, false, false, 0)")
	// plain's hashes are gone (as the janitor purges them past the
	// window): a transaction id is found by the scan.
	exec(owner, "SELECT queenside.configure('plain', 60, 3, 0, 0, 86400, 0, false, false, 0)")
	exec(owner, "SELECT * FROM queenside.send_batch('plain', ARRAY['x', 'y']::bytea[], ARRAY['x1', 'x1'], ARRAY['tx-o', 'tx-p'])")
	exec(owner, "DELETE FROM queenside.dedup WHERE partition_id = (SELECT id FROM queenside.partitions WHERE name = 'x1')")
	var group, p1, s1 int64
	if err := owner.QueryRow(ctx, "SELECT o_group FROM queenside.join_group('orders', 'workers', 'all', NULL)").Scan(&group); err != nil {
		t.Fatal(err)
	}
	exec(owner, "SELECT * FROM queenside.join_group('secret', 'spies', 'all', NULL)")
	if err := owner.QueryRow(ctx, "SELECT id FROM queenside.partitions WHERE name = 'p1'").Scan(&p1); err != nil {
		t.Fatal(err)
	}
	if err := owner.QueryRow(ctx, "SELECT id FROM queenside.partitions WHERE name = 's1'").Scan(&s1); err != nil {
		t.Fatal(err)
	}
	exec(owner, "SELECT * FROM queenside.pop($1, $2, 1, 2, 60, false)", group, p1)
	exec(owner, fmt.Sprintf("SELECT queenside.grant('%s', 'orders', ARRAY['read'])", role))

	// A role with no privilege on the tables: PostgreSQL itself refuses it
	// every table these functions read.
	for _, table := range []string{"queues", "partition_names", "partitions", "segments", "dedup", "groups", "cursors"} {
		_, err := app.Exec(ctx, "SELECT 1 FROM queenside."+table+" LIMIT 1")
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "42501" || pgErr.SchemaName != "" {
			t.Errorf("a direct read of %s by the role: %v, want PostgreSQL's 42501", table, err)
		}
	}

	for _, helper := range []string{"queenside.readable_queue_ids()", "queenside.reading(1)"} {
		_, err := app.Exec(ctx, "SELECT "+helper)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "42501" || pgErr.SchemaName != "" {
			t.Errorf("%s called by the role: %v, want PostgreSQL's 42501", helper, err)
		}
	}

	// column runs a query of one text column.
	column := func(conn *pgx.Conn, sql string, args ...any) ([]string, error) {
		t.Helper()
		rows, err := conn.Query(ctx, sql, args...)
		if err != nil {
			return nil, err
		}
		return pgx.CollectRows(rows, pgx.RowTo[string])
	}
	refused := func(what, right string, err error) {
		t.Helper()
		r := refusal(err)
		if r == nil || r.ColumnName != right || !strings.Contains(r.Message, role+" may not "+right) {
			t.Errorf("%s: %v, want the refusal of %s", what, err, right)
		}
	}

	// The listings: the queues the role may read; all of them for the owner.
	listings := map[string]string{
		"queue_list":      "SELECT o_queue FROM queenside.queue_list()",
		"queue_summaries": "SELECT o_queue FROM queenside.queue_summaries()",
		"queue_counters":  "SELECT DISTINCT o_queue FROM queenside.queue_counters() ORDER BY 1",
	}
	for name, sql := range listings {
		got, err := column(app, sql)
		if err != nil || !slices.Equal(got, []string{"orders"}) {
			t.Errorf("%s as the role: %v %v, want [orders]", name, got, err)
		}
		got, err = column(owner, sql)
		if err != nil || !slices.Equal(got, []string{"empty", "orders", "plain", "secret"}) {
			t.Errorf("%s as the owner: %v %v, want every queue", name, got, err)
		}
	}
	var partitions, messages, pushed, consumed, groups int64
	err := app.QueryRow(ctx, "SELECT o_partitions, o_messages, o_pushed, o_consumed, o_groups FROM queenside.queue_summaries('orders')").
		Scan(&partitions, &messages, &pushed, &consumed, &groups)
	if err != nil || partitions != 2 || messages != 4 || pushed != 4 || consumed != 0 || groups != 1 {
		t.Errorf("queue_summaries('orders'): %d %d %d %d %d %v", partitions, messages, pushed, consumed, groups, err)
	}
	var n int
	if err := owner.QueryRow(ctx, "SELECT count(*) FROM queenside.queue_list() WHERE o_queue = 'empty' AND o_partitions = 0").Scan(&n); err != nil || n != 1 {
		t.Errorf("queue_list: the empty queue: %d %v", n, err)
	}
	var lag int64
	if err := app.QueryRow(ctx, "SELECT o_lag FROM queenside.queue_counters() WHERE o_group = 'workers'").Scan(&lag); err != nil || lag != 4 {
		t.Errorf("queue_counters: the lag of workers: %d %v", lag, err)
	}

	// The reads of one queue: granted, the answer; not granted, refused.
	// In the statements, %[1]d is orders' partition p1, %[2]d secret's s1.
	for _, r := range []struct {
		name, granted, refused string
		want                   []string
	}{
		{"group_summaries", "SELECT o_group || ':' || o_lag || ':' || o_leased FROM queenside.group_summaries('orders')",
			"SELECT * FROM queenside.group_summaries('secret')", []string{"workers:4:1"}},
		{"partition_stats", "SELECT o_partition || ':' || o_head || ':' || o_messages FROM queenside.partition_stats('orders')",
			"SELECT * FROM queenside.partition_stats('secret')", []string{"p1:3:3", "p2:1:1"}},
		{"partition_page", "SELECT o_partition FROM queenside.partition_page('orders', 'p1', 'p', 10)",
			"SELECT * FROM queenside.partition_page('secret', '', '', 10)", []string{"p2"}},
		{"cursor_stats", "SELECT o_partition || ':' || o_group || ':' || o_cursor || ':' || (o_lease_expires_at IS NOT NULL) FROM queenside.cursor_stats('orders')",
			"SELECT * FROM queenside.cursor_stats('secret')", []string{"p1:workers:0:true", "p2:workers:0:false"}},
		// Partitions of another queue are not that queue's.
		{"cursor_stats of partitions", "SELECT o_partition FROM queenside.cursor_stats('orders', ARRAY[%[1]d, %[2]d])",
			"SELECT * FROM queenside.cursor_stats('secret', ARRAY[%[2]d])", []string{"p1"}},
		{"partition_bounds", "SELECT o_partition_id || ':' || o_first || ':' || o_head FROM queenside.partition_bounds('orders', 'p1')",
			"SELECT * FROM queenside.partition_bounds('secret', 's1')", []string{fmt.Sprintf("%d:0:3", p1)}},
		{"offset_at", "SELECT queenside.offset_at(%[1]d, now() - interval '1 hour')::text",
			"SELECT queenside.offset_at(%[2]d, now())::text", []string{"0"}},
		{"message_page", "SELECT o_offset || ':' || o_transaction_id || ':' || coalesce(encode(o_payload, 'escape'), '-') || ':' || o_payload_bytes FROM queenside.message_page(%[1]d, 1, 10, 15)",
			"SELECT * FROM queenside.message_page(%[2]d, 0, 10, 100)", []string{"1:tx-2:payload of tx-2:15", "2:tx-3:payload of tx-3:15"}},
		{"find_transaction", "SELECT o_offset || ':' || o_by_dedup FROM queenside.find_transaction(%[1]d, 'tx-2', 0)",
			"SELECT * FROM queenside.find_transaction(%[2]d, 'tx-5', 0)", []string{"1:true"}},
		{"group_position", "SELECT o_cursor || ':' || o_leased || ':' || o_lease_from || '-' || o_lease_to FROM queenside.group_position(%[1]d, 'workers')",
			"SELECT * FROM queenside.group_position(%[2]d, 'spies')", []string{"0:true:0-1"}},
	} {
		granted, refusedSQL := r.granted, r.refused
		if strings.Contains(granted, "%[") {
			granted = fmt.Sprintf(granted, p1, s1)
		}
		if strings.Contains(refusedSQL, "%[") {
			refusedSQL = fmt.Sprintf(refusedSQL, p1, s1)
		}
		for _, conn := range []*pgx.Conn{app, owner} {
			got, err := column(conn, granted)
			if err != nil || !slices.Equal(got, r.want) {
				t.Errorf("%s (owner %v): %q %v, want %q", r.name, conn == owner, got, err, r.want)
			}
		}
		_, err := app.Exec(ctx, refusedSQL)
		refused(r.name, "read", err)
		if _, err := owner.Exec(ctx, refusedSQL); err != nil {
			t.Errorf("%s of secret as the owner: %v", r.name, err)
		}
	}
	// Found or not, as the sidecar tells them apart.
	for sql, want := range map[string]string{
		"SELECT count(*)::text FROM queenside.partition_stats('nothing')":                                                                                "0",
		"SELECT (o_queue_id IS NOT NULL AND o_partition_id IS NULL)::text FROM queenside.partition_stats('empty')":                                       "true",
		"SELECT (o_partition_id IS NULL)::text FROM queenside.partition_bounds('orders', 'p9')":                                                          "true",
		"SELECT (o_partition_id IS NULL)::text FROM queenside.partition_page('orders', 'p2', '', 10)":                                                    "true",
		"SELECT (o_offset IS NULL)::text FROM queenside.find_transaction(" + fmt.Sprint(p1) + ", 'tx-9', 0)":                                             "true",
		"SELECT count(*)::text FROM queenside.group_position(" + fmt.Sprint(p1) + ", 'nobody')":                                                          "0",
		"SELECT count(*)::text FROM queenside.message_page(" + fmt.Sprint(p1) + ", 0, 10, 14) WHERE o_payload IS NULL AND o_payload_bytes = 15":          "3",
		"SELECT o_offset || ':' || o_by_dedup FROM queenside.partition_bounds('plain', 'x1') b, queenside.find_transaction(b.o_partition_id, 'tx-p', 0)": "1:false",
	} {
		got, err := column(owner, sql)
		if err != nil || len(got) != 1 || got[0] != want {
			t.Errorf("%s: %v %v, want %s", sql, got, err, want)
		}
	}
	// A queue that does not exist is refused as any other not granted.
	_, err = column(app, "SELECT * FROM queenside.partition_stats('nothing')")
	refused("partition_stats of a queue that does not exist", "read", err)

	// configure: manage, to change a queue and to create one.
	configure := "SELECT o_lease_seconds FROM queenside.configure($1, 30, 3, 3600, 0, 86400, 0, false, false, 0)"
	_, err = column(app, configure, "orders")
	refused("configure orders", "manage", err)
	_, err = column(app, configure, "fresh.q")
	refused("configure a new queue", "manage", err)
	var lease int
	if err := owner.QueryRow(ctx, "SELECT lease_seconds FROM queenside.queues WHERE name = 'orders'").Scan(&lease); err != nil || lease != 60 {
		t.Errorf("orders' lease after a refused configure: %d %v", lease, err)
	}
	if err := owner.QueryRow(ctx, "SELECT count(*) FROM queenside.queues WHERE name = 'fresh.q'").Scan(&n); err != nil || n != 0 {
		t.Errorf("a refused configure created its queue: %d %v", n, err)
	}
	exec(owner, fmt.Sprintf("SELECT queenside.grant('%s', 'fresh.*', ARRAY['manage'])", role))
	got, err := column(app, "SELECT o_lease_seconds::text || ':' || o_encrypt_payloads FROM queenside.configure($1, 30, 3, 3600, 0, 86400, 0, false, true, 0)", "fresh.q")
	if err != nil || !slices.Equal(got, []string{"30:true"}) {
		t.Errorf("configure with manage: %v %v", got, err)
	}
	if err := owner.QueryRow(ctx, "SELECT lease_seconds FROM queenside.queues WHERE name = 'fresh.q'").Scan(&lease); err != nil || lease != 30 {
		t.Errorf("fresh.q after configure: %d %v", lease, err)
	}
	// manage includes read: the new queue is listed for the role.
	if got, err := column(app, listings["queue_list"]); err != nil || !slices.Equal(got, []string{"fresh.q", "orders"}) {
		t.Errorf("queue_list with manage on fresh.*: %v %v", got, err)
	}
	got, err = column(owner, "SELECT o_lease_seconds::text FROM queenside.configure('orders', 45, 3, 3600, 0, 86400, 0, false, false, 0)")
	if err != nil || !slices.Equal(got, []string{"45"}) {
		t.Errorf("configure as the owner: %v %v", got, err)
	}
}
