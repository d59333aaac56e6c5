package schema_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/queenside/queenside/schema"
)

// manageFixture is a migrated database with five queues, each with a
// partition Default, a group g1 and one dead letter, and an application
// role granted:
//
//	orders     read, manage
//	billing    read
//	ops        manage
//	work       consume as workers* only
//	secret     nothing
//	future.*   read, consume (no such queue exists)
type manageFixture struct {
	owner, app *pgx.Conn
	role       string
	dead       map[string]int64 // each queue's dead letter's id
	partition  map[string]int64 // each queue's partition Default
}

var manageQueues = []string{"billing", "ops", "orders", "secret", "work"}

func newManageFixture(t *testing.T) manageFixture {
	t.Helper()
	ctx := context.Background()
	db := emptyDatabase(t)
	owner := connect(t, db)
	if err := schema.Migrate(ctx, owner); err != nil {
		t.Fatal(err)
	}
	f := manageFixture{owner: owner, role: fmt.Sprintf("qs_mgr_%x", time.Now().UnixNano()),
		dead: map[string]int64{}, partition: map[string]int64{}}
	f.app = roleConn(t, owner, db, f.role)
	for _, q := range manageQueues {
		f.exec(t, owner, "SELECT queenside.send($1, '\\x01'::bytea)", q)
		f.exec(t, owner, "SELECT queenside.join_group($1, 'g1', 'all', NULL)", q)
		var id, pid int64
		err := owner.QueryRow(ctx, `
			INSERT INTO queenside.dead_letters (queue_id, partition_id, group_id, queue_name, partition_name, group_name,
			       msg_offset, message_id, transaction_id, payload, error, failures, committed_at)
			SELECT q.id, n.id, g.id, q.name, n.name, g.name, 0, gen_random_uuid(), 'tx-' || q.name, '\x01', 'boom in ' || q.name, 3, now()
			  FROM queenside.queues q
			  JOIN queenside.partition_names n ON n.queue_id = q.id
			  JOIN queenside.groups g ON g.queue_id = q.id AND g.name = 'g1'
			 WHERE q.name = $1
			RETURNING id, partition_id`, q).Scan(&id, &pid)
		if err != nil {
			t.Fatal(err)
		}
		f.dead[q], f.partition[q] = id, pid
	}
	for _, g := range []string{
		"SELECT queenside.grant($1, 'orders', ARRAY['read', 'manage'])",
		"SELECT queenside.grant($1, 'billing', ARRAY['read'])",
		"SELECT queenside.grant($1, 'ops', ARRAY['manage'])",
		"SELECT queenside.grant($1, 'work', ARRAY['consume'], 'workers*')",
		"SELECT queenside.grant($1, 'future.*', ARRAY['read', 'consume'])",
	} {
		f.exec(t, owner, g, f.role)
	}
	return f
}

func (f manageFixture) exec(t *testing.T, conn *pgx.Conn, sql string, args ...any) {
	t.Helper()
	if _, err := conn.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// refused fails the test unless err is queenside's refusal of right on
// queue.
func refused(t *testing.T, what string, err error, right, queue string) {
	t.Helper()
	r := refusal(err)
	if r == nil || r.ColumnName != right || r.TableName != queue {
		t.Errorf("%s: %v, want the refusal of %s on %s", what, err, right, queue)
	}
}

// strings1 runs a query of one text column.
func strings1(t *testing.T, conn *pgx.Conn, sql string, args ...any) ([]string, error) {
	t.Helper()
	rows, err := conn.Query(context.Background(), sql, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

func (f manageFixture) count(t *testing.T, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := f.owner.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// An application role has no privilege on the tables these functions
// read and write: PostgreSQL itself refuses it (no schema in the error).
func TestManageTablesAreClosedToApplicationRoles(t *testing.T) {
	f := newManageFixture(t)
	for _, table := range []string{"dead_letters", "groups", "queues", "cursors", "partitions", "partition_names", "segments", "maintenance"} {
		_, err := f.app.Exec(context.Background(), "SELECT 1 FROM queenside."+table+" LIMIT 1")
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "42501" || pgErr.SchemaName != "" {
			t.Errorf("SELECT from %s as an application role: %v, want PostgreSQL's 42501", table, err)
		}
	}
	for _, helper := range []string{"SELECT queenside.readable_queue_ids()", "SELECT queenside.dlq_manageable(ARRAY[1::bigint])",
		"SELECT queenside.dlq_refuse_partition(1)"} {
		_, err := f.app.Exec(context.Background(), helper)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "42501" || pgErr.SchemaName != "" {
			t.Errorf("%s as an application role: %v, want PostgreSQL's 42501", helper, err)
		}
	}
}

// queue_exists answers only for a queue the role holds the right on: any
// other is refused, whether it exists or not.
func TestQueueExistsRefusesBeforeNotFound(t *testing.T) {
	f := newManageFixture(t)
	ctx := context.Background()
	exists := func(conn *pgx.Conn, queue, right string) (bool, error) {
		var ok bool
		err := conn.QueryRow(ctx, "SELECT queenside.queue_exists($1, $2)", queue, right).Scan(&ok)
		return ok, err
	}
	if ok, err := exists(f.app, "orders", "read"); err != nil || !ok {
		t.Errorf("orders, read: %v, %v; want true", ok, err)
	}
	if ok, err := exists(f.app, "future.eu", "read"); err != nil || ok {
		t.Errorf("future.eu (granted, missing): %v, %v; want false", ok, err)
	}
	for _, c := range []struct{ queue, right string }{{"secret", "read"}, {"nosuch", "read"}, {"billing", "manage"}} {
		_, err := exists(f.app, c.queue, c.right)
		refused(t, "queue_exists "+c.queue, err, c.right, c.queue)
	}
	if ok, err := exists(f.owner, "nosuch", "manage"); err != nil || ok {
		t.Errorf("the owner, nosuch: %v, %v; want false", ok, err)
	}
	if ok, err := exists(f.owner, "secret", "manage"); err != nil || !ok {
		t.Errorf("the owner, secret: %v, %v; want true", ok, err)
	}
}

// The dead letters' list, count and summary need read (which manage
// includes); a listing of every queue shows the queues the role may read,
// the owner's every queue.
func TestDeadLetterListingsNeedRead(t *testing.T) {
	f := newManageFixture(t)
	ctx := context.Background()
	const list = "SELECT o_queue FROM queenside.dlq_list($1, NULL, NULL, '', NULL, NULL, 0, 100)"
	const summary = "SELECT o_queue FROM queenside.dlq_summary($1, 100)"
	for _, c := range []struct {
		conn *pgx.Conn
		who  string
		want []string
	}{{f.app, "the role", []string{"billing", "ops", "orders"}}, {f.owner, "the owner", manageQueues}} {
		for _, sql := range []string{list, summary} {
			got, err := strings1(t, c.conn, sql, "")
			slices.Sort(got)
			if err != nil || !slices.Equal(got, c.want) {
				t.Errorf("%s as %s, every queue: %v, %v; want %v", sql, c.who, got, err, c.want)
			}
		}
		var n, replayed int64
		err := c.conn.QueryRow(ctx, "SELECT o_count, o_replayed FROM queenside.dlq_count('', NULL, NULL, '', NULL, NULL)").Scan(&n, &replayed)
		if err != nil || n != int64(len(c.want)) || replayed != 0 {
			t.Errorf("dlq_count as %s, every queue: %d, %d, %v; want %d", c.who, n, replayed, err, len(c.want))
		}
	}
	got, err := strings1(t, f.app, list, "orders")
	if err != nil || !slices.Equal(got, []string{"orders"}) {
		t.Errorf("dlq_list orders: %v, %v", got, err)
	}
	// The filter applies: an error that does not match lists nothing.
	got, err = strings1(t, f.app, "SELECT o_queue FROM queenside.dlq_list('orders', 'g1', 'Default', 'boom in billing', NULL, NULL, 0, 100)")
	if err != nil || len(got) != 0 {
		t.Errorf("dlq_list orders filtered out: %v, %v", got, err)
	}
	for _, q := range []string{"secret", "work", "nosuch"} {
		_, err := strings1(t, f.app, list, q)
		refused(t, "dlq_list "+q, err, "read", q)
		_, err = strings1(t, f.app, summary, q)
		refused(t, "dlq_summary "+q, err, "read", q)
		_, err = f.app.Exec(ctx, "SELECT * FROM queenside.dlq_count($1, NULL, NULL, '', NULL, NULL)", q)
		refused(t, "dlq_count "+q, err, "read", q)
	}
}

// Reading entries to replay, locking them and marking them replayed need
// manage: by filter on its queue; by ids on each entry's queue, an entry
// of a queue the role may read refusing the call, one of a queue it may
// not read left out as if it did not exist.
func TestDeadLetterReplayNeedsManage(t *testing.T) {
	f := newManageFixture(t)
	ctx := context.Background()
	const entries = "SELECT o_queue FROM queenside.dlq_entries($1, $2, NULL, NULL, '', NULL, NULL, 0, 100)"
	got, err := strings1(t, f.app, entries, nil, "orders")
	if err != nil || !slices.Equal(got, []string{"orders"}) {
		t.Errorf("dlq_entries by filter, orders: %v, %v", got, err)
	}
	_, err = strings1(t, f.app, entries, nil, "billing")
	refused(t, "dlq_entries by filter, billing", err, "manage", "billing")

	ids := []int64{f.dead["orders"], f.dead["ops"], f.dead["secret"], f.dead["work"]}
	got, err = strings1(t, f.app, entries, ids, "")
	slices.Sort(got)
	if err != nil || !slices.Equal(got, []string{"ops", "orders"}) {
		t.Errorf("dlq_entries by ids: %v, %v; want ops and orders", got, err)
	}
	_, err = strings1(t, f.app, entries, append(ids, f.dead["billing"]), "")
	refused(t, "dlq_entries by ids with billing's", err, "manage", "billing")
	got, err = strings1(t, f.owner, entries, append(ids, f.dead["billing"]), "")
	if err != nil || len(got) != 5 {
		t.Errorf("dlq_entries by ids as the owner: %v, %v", got, err)
	}

	// Lock and mark in one transaction, as the sidecar's replay does.
	tx, err := f.app.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var locked []int64
	rows, err := tx.Query(ctx, "SELECT * FROM queenside.dlq_lock($1, $2, false)", f.partition["orders"], []int64{f.dead["orders"]})
	if err == nil {
		locked, err = pgx.CollectRows(rows, pgx.RowTo[int64])
	}
	if err != nil || !slices.Equal(locked, []int64{f.dead["orders"]}) {
		t.Fatalf("dlq_lock orders: %v, %v", locked, err)
	}
	mark := "SELECT queenside.dlq_mark_replayed($1, $2, ARRAY[gen_random_uuid()], ARRAY['again'], ARRAY[7::bigint], ARRAY[now()])"
	if _, err := tx.Exec(ctx, mark, f.partition["orders"], []int64{f.dead["orders"]}); err != nil {
		t.Fatalf("dlq_mark_replayed orders: %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// A queue the role has no right on is not named: its partition is.
	for q, named := range map[string]string{"billing": "billing", "secret": fmt.Sprintf("(partition %d)", f.partition["secret"])} {
		_, err := f.app.Exec(ctx, "SELECT * FROM queenside.dlq_lock($1, $2, true)", f.partition[q], []int64{f.dead[q]})
		refused(t, "dlq_lock "+q, err, "manage", named)
		_, err = f.app.Exec(ctx, mark, f.partition[q], []int64{f.dead[q]})
		refused(t, "dlq_mark_replayed "+q, err, "manage", named)
	}
	if n := f.count(t, "SELECT count(*) FROM queenside.dead_letters WHERE replayed_at IS NOT NULL"); n != 1 {
		t.Errorf("%d entries marked replayed, want orders' alone", n)
	}
	if n := f.count(t, "SELECT count(*) FROM queenside.dead_letters WHERE replay_offset = 7 AND id = $1", f.dead["orders"]); n != 1 {
		t.Error("orders' entry is not marked as its replay")
	}
}

// Deleting dead letters needs manage, as replaying them does; a refused
// call deletes nothing.
func TestDeadLetterDeleteNeedsManage(t *testing.T) {
	f := newManageFixture(t)
	ctx := context.Background()
	del := func(conn *pgx.Conn, ids []int64, queue string, limit int) (deleted, read int, last *int64, err error) {
		err = conn.QueryRow(ctx, "SELECT * FROM queenside.dlq_delete($1, $2, NULL, NULL, '', NULL, NULL, 0, $3)",
			ids, queue, limit).Scan(&deleted, &read, &last)
		return
	}
	_, _, _, err := del(f.app, nil, "billing", 10)
	refused(t, "dlq_delete by filter, billing", err, "manage", "billing")
	_, _, _, err = del(f.app, []int64{f.dead["ops"], f.dead["billing"]}, "", 10)
	refused(t, "dlq_delete by ids with billing's", err, "manage", "billing")
	if n := f.count(t, "SELECT count(*) FROM queenside.dead_letters"); n != 5 {
		t.Fatalf("a refused delete left %d entries, want 5", n)
	}
	// secret's entry is left alone, and not told apart from one missing.
	deleted, read, _, err := del(f.app, []int64{f.dead["ops"], f.dead["secret"], 1 << 40}, "", 10)
	if err != nil || deleted != 1 || read != 1 {
		t.Errorf("dlq_delete by ids, ops' and secret's: %d deleted, %d read, %v; want ops' alone", deleted, read, err)
	}
	f.exec(t, f.owner, `INSERT INTO queenside.dead_letters (queue_id, partition_id, group_id, queue_name, partition_name, group_name,
		       msg_offset, message_id, transaction_id, payload, failures, committed_at)
		SELECT queue_id, partition_id, group_id, queue_name, partition_name, group_name, 1, gen_random_uuid(), 'tx2', payload, 1, now()
		  FROM queenside.dead_letters WHERE queue_name = 'orders'`)
	deleted, read, last, err := del(f.app, nil, "orders", 1)
	if err != nil || deleted != 1 || read != 1 || last == nil || *last != f.dead["orders"] {
		t.Errorf("dlq_delete orders, a batch of 1: %d, %d, %v, %v", deleted, read, last, err)
	}
	deleted, read, last, err = del(f.app, nil, "orders", 5)
	if err != nil || deleted != 1 || read != 1 || last == nil {
		t.Errorf("dlq_delete orders, the rest: %d, %d, %v, %v", deleted, read, last, err)
	}
	deleted, read, last, err = del(f.app, nil, "orders", 5)
	if err != nil || deleted != 0 || read != 0 || last != nil {
		t.Errorf("dlq_delete orders, none left: %d, %d, %v, %v", deleted, read, last, err)
	}
	if got, err := strings1(t, f.owner, "SELECT queue_name FROM queenside.dead_letters ORDER BY 1"); err != nil ||
		!slices.Equal(got, []string{"billing", "secret", "work"}) {
		t.Errorf("left: %v, %v", got, err)
	}
	if deleted, _, _, err := del(f.owner, []int64{f.dead["secret"]}, "", 10); err != nil || deleted != 1 {
		t.Errorf("the owner's delete of secret's entry: %d, %v", deleted, err)
	}
}

// The groups' list needs read, which manage includes (a listing of every
// queue shows those the role may read); deleting a group needs manage.
func TestGroupsListNeedsReadAndDeleteManage(t *testing.T) {
	f := newManageFixture(t)
	ctx := context.Background()
	const list = "SELECT o_queue || '/' || o_group FROM queenside.list_groups($1)"
	got, err := strings1(t, f.app, list, "")
	if err != nil || !slices.Equal(got, []string{"billing/g1", "ops/g1", "orders/g1"}) {
		t.Errorf("list_groups as the role: %v, %v", got, err)
	}
	got, err = strings1(t, f.owner, list, "")
	if err != nil || len(got) != len(manageQueues) {
		t.Errorf("list_groups as the owner: %v, %v", got, err)
	}
	var lag int64
	if err := f.app.QueryRow(ctx, "SELECT o_lag FROM queenside.list_groups('billing')").Scan(&lag); err != nil || lag != 1 {
		t.Errorf("billing's lag: %d, %v; want 1", lag, err)
	}
	for _, q := range []string{"secret", "work"} {
		_, err := strings1(t, f.app, list, q)
		refused(t, "list_groups "+q, err, "read", q)
	}
	var deleted bool
	for _, q := range []string{"billing", "secret", "nosuch"} {
		err := f.app.QueryRow(ctx, "SELECT queenside.delete_group($1, 'g1')", q).Scan(&deleted)
		refused(t, "delete_group "+q, err, "manage", q)
	}
	if n := f.count(t, "SELECT count(*) FROM queenside.groups"); n != 5 {
		t.Fatalf("refused deletes left %d groups, want 5", n)
	}
	if err := f.app.QueryRow(ctx, "SELECT queenside.delete_group('ops', 'g1')").Scan(&deleted); err != nil || !deleted {
		t.Errorf("delete_group ops: %v, %v", deleted, err)
	}
	if err := f.app.QueryRow(ctx, "SELECT queenside.delete_group('ops', 'g1')").Scan(&deleted); err != nil || deleted {
		t.Errorf("delete_group ops again: %v, %v; want false", deleted, err)
	}
	if n := f.count(t, "SELECT count(*) FROM queenside.groups g JOIN queenside.queues q ON q.id = g.queue_id WHERE q.name = 'ops'"); n != 0 {
		t.Error("ops' group is still there")
	}
}

// Seek is allowed with manage on the queue, or consume as the group; it is
// refused before a missing queue is not found.
func TestSeekGroupNeedsManageOrConsume(t *testing.T) {
	f := newManageFixture(t)
	seek := func(conn *pgx.Conn, queue, group string, partition any) ([]string, error) {
		return strings1(t, conn, "SELECT o_partition || '@' || o_cursor FROM queenside.seek_group($1, $2, $3, 'end', NULL)",
			queue, group, partition)
	}
	// consume as workers*: the group is made, as a pop makes it.
	got, err := seek(f.app, "work", "workers-1", nil)
	if err != nil || !slices.Equal(got, []string{"Default@1"}) {
		t.Errorf("seek work/workers-1: %v, %v", got, err)
	}
	if n := f.count(t, "SELECT count(*) FROM queenside.groups WHERE name = 'workers-1'"); n != 1 {
		t.Error("seek of a new group did not make it")
	}
	_, err = seek(f.app, "work", "g1", nil)
	refused(t, "seek work/g1", err, "consume", "work")
	// manage: any group that exists; making one is consuming as it.
	if got, err := seek(f.app, "ops", "g1", "Default"); err != nil || !slices.Equal(got, []string{"Default@1"}) {
		t.Errorf("seek ops/g1: %v, %v", got, err)
	}
	_, err = seek(f.app, "ops", "fresh", nil)
	refused(t, "seek ops/fresh", err, "consume", "ops")
	for _, q := range []string{"billing", "secret", "nosuch"} {
		_, err := seek(f.app, q, "g1", nil)
		refused(t, "seek "+q, err, "consume", q)
	}
	if n := f.count(t, "SELECT count(*) FROM queenside.groups"); n != 6 {
		t.Errorf("%d groups, want the 5 and workers-1", n)
	}
	if n := f.count(t, "SELECT count(*) FROM queenside.cursors WHERE committed = 1"); n != 2 {
		t.Errorf("%d cursors at the end, want work/workers-1's and ops/g1's", n)
	}
	// Not found once allowed: the queue (in the table field), the
	// partition (in the column field too).
	var pgErr *pgconn.PgError
	if _, err := seek(f.app, "future.eu", "g1", nil); !errors.As(err, &pgErr) || pgErr.Code != "42704" ||
		pgErr.SchemaName != "queenside" || pgErr.TableName != "future.eu" || pgErr.ColumnName != "" {
		t.Errorf("seek of a missing queue the role may consume: %v", err)
	}
	if _, err := seek(f.owner, "orders", "g1", "nope"); !errors.As(err, &pgErr) || pgErr.Code != "42704" ||
		pgErr.SchemaName != "queenside" || pgErr.TableName != "orders" || pgErr.ColumnName != "nope" {
		t.Errorf("seek of a missing partition: %v", err)
	}
	if got, err := seek(f.owner, "secret", "new", nil); err != nil || len(got) != 1 {
		t.Errorf("the owner's seek of a new group: %v, %v", got, err)
	}
}

// The maintenance mode needs manage on '*': a grant on every queue.
func TestSetMaintenanceNeedsManageOnEveryQueue(t *testing.T) {
	f := newManageFixture(t)
	ctx := context.Background()
	set := func(conn *pgx.Conn, push, pop any) (bool, bool, error) {
		var pu, po bool
		var pus, pos *time.Time
		err := conn.QueryRow(ctx, "SELECT * FROM queenside.set_maintenance($1, $2)", push, pop).Scan(&pu, &po, &pus, &pos)
		if err == nil && (pu != (pus != nil) || po != (pos != nil)) {
			err = fmt.Errorf("since times %v, %v for %v, %v", pus, pos, pu, po)
		}
		return pu, po, err
	}
	f.exec(t, f.owner, "SELECT queenside.grant($1, 'o*', ARRAY['manage'])", f.role)
	_, _, err := set(f.app, true, nil)
	refused(t, "set_maintenance with manage on o*", err, "manage", "*")
	if n := f.count(t, "SELECT count(*) FROM queenside.maintenance WHERE push OR pop"); n != 0 {
		t.Fatal("a refused set_maintenance changed the state")
	}
	if push, pop, err := set(f.owner, nil, true); err != nil || push || !pop {
		t.Errorf("the owner's set_maintenance: %v, %v, %v", push, pop, err)
	}
	f.exec(t, f.owner, "SELECT queenside.grant($1, '*', ARRAY['manage'])", f.role)
	if push, pop, err := set(f.app, true, false); err != nil || !push || pop {
		t.Errorf("set_maintenance with manage on *: %v, %v, %v", push, pop, err)
	}
}
