package sidecar

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/vmihailenco/msgpack/v5"

	queenside "github.com/queenside/queenside/clients/go"
	"github.com/queenside/queenside/protocol"
	"github.com/queenside/queenside/sidecar/crypt"
)

const secretMarker = "SECRET-PLAINTEXT-7f3a"

// keyFile writes key lines to a file and returns its path.
func keyFile(t *testing.T, path string, ids ...string) string {
	t.Helper()
	var b bytes.Buffer
	for _, id := range ids {
		line, err := crypt.NewKeyLine(id)
		if err != nil {
			t.Fatal(err)
		}
		b.WriteString(line + "\n")
	}
	if err := os.WriteFile(path, b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// appendKeyFirst puts a new key at the front of a key file.
func appendKeyFirst(t *testing.T, path, id string) {
	t.Helper()
	old, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	line, err := crypt.NewKeyLine(id)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, append([]byte(line+"\n"), old...), 0o600); err != nil {
		t.Fatal(err)
	}
}

// storedPayloadsHold reports whether any stored payload or dead letter
// holds needle, read straight from the tables.
func storedPayloadsHold(t *testing.T, pool *pgxpool.Pool, needle string) bool {
	t.Helper()
	var n int
	err := pool.QueryRow(testContext(t), `
		SELECT (SELECT count(*) FROM queenside.segments s, unnest(s.payloads) p WHERE position($1::bytea IN p) > 0)
		     + (SELECT count(*) FROM queenside.dead_letters d WHERE position($1::bytea IN d.payload) > 0)`,
		[]byte(needle)).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n > 0
}

func secretItem(t *testing.T, queue, partition, txid string) protocol.PushItem {
	return item(t, queue, partition, txid, map[string]string{"card": secretMarker, "tx": txid})
}

// wantSecret checks a delivered payload is the one secretItem pushed.
func wantSecret(t *testing.T, m protocol.Message) {
	t.Helper()
	var v map[string]string
	if err := msgpack.Unmarshal(m.Payload, &v); err != nil || v["card"] != secretMarker || v["tx"] != m.TransactionID {
		t.Fatalf("payload of %s: %v %v", m.TransactionID, v, err)
	}
}

func encrypted(t *testing.T, c *queenside.Client, queue string, change func(*protocol.QueueOptions)) {
	t.Helper()
	configure(t, c, queue, func(o *protocol.QueueOptions) {
		o.EncryptPayloads = true
		if change != nil {
			change(o)
		}
	})
}

func TestEncryptedPayloadsAreSealedAtRestAndOpenedOnPop(t *testing.T) {
	path := keyFile(t, filepath.Join(t.TempDir(), "keys"), "k1")
	keys, err := crypt.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	ts := startSidecar(t, "", Options{Keys: keys})
	c := ts.client(t)
	encrypted(t, c, "sec", nil)
	mustPush(t, c, secretItem(t, "sec", "p", "a"), secretItem(t, "sec", "p", "b"))
	mustPush(t, c, secretItem(t, "plain", "p", "x"))

	// The plain queue's payload is found in the table, the sealed one's not.
	if !storedPayloadsHold(t, ts.pool, secretMarker) {
		t.Fatal("the scan finds nothing, not even the plain queue's payload")
	}
	if hasPlainSecretOutside(t, ts.pool) {
		t.Fatal("the sealed queue's payloads hold their plaintext")
	}
	stored := storedMessages(t, ts.pool, "sec", "p")
	if id, _, err := crypt.UnpackRecord(stored[0].Payload); err != nil || id != "k1" {
		t.Fatalf("stored payload: key %q %v", id, err)
	}
	res := mustPop(t, c, protocol.PopArgs{Queue: "sec", Group: "g", Batch: 10})
	if len(res.Messages) != 2 {
		t.Fatalf("pop: %+v", res)
	}
	for _, m := range res.Messages {
		wantSecret(t, m)
	}
	mustAck(t, c, queenside.Completed(res.Messages[0]), queenside.Completed(res.Messages[1]))

	// Rotation: a key put first writes from the reload on; the old one
	// still reads.
	appendKeyFirst(t, path, "k2")
	if err := keys.Reload(path); err != nil {
		t.Fatal(err)
	}
	mustPush(t, c, secretItem(t, "sec", "p", "c"))
	if id, _, _ := crypt.UnpackRecord(storedMessages(t, ts.pool, "sec", "p")[2].Payload); id != "k2" {
		t.Fatalf("after rotation the new message is sealed under %q, want k2", id)
	}
	res = mustPop(t, c, protocol.PopArgs{Queue: "sec", Group: "late", Batch: 10, AutoAck: true})
	if len(res.Messages) != 3 || res.Messages[0].LeaseID != "" || len(res.Leases) != 0 {
		t.Fatalf("an auto-acked pop across both keys: %+v", res)
	}
	for _, m := range res.Messages {
		wantSecret(t, m)
	}

	// A sidecar without the keys: key_missing for the push and the pop,
	// and nothing moves.
	bare := startSidecar(t, ts.dbURL, Options{})
	cb := bare.client(t)
	waitFor(t, 5*time.Second, "the keyless sidecar to read the control state", func() bool {
		return bare.srv.control.encrypted("sec")
	})
	if pr, err := cb.Push(testContext(t), secretItem(t, "sec", "p", "d")); err != nil || pr[0].Status != protocol.StatusFailed ||
		pr[0].Error.Code != protocol.CodeKeyMissing {
		t.Fatalf("a push to a sealed queue without a key: %+v %v", pr, err)
	}
	for _, autoAck := range []bool{false, true} {
		if _, err := cb.Pop(testContext(t), protocol.PopArgs{Queue: "sec", Group: "g2", Batch: 10, AutoAck: autoAck}); !isCode(err, protocol.CodeKeyMissing) {
			t.Fatalf("a pop (autoAck %v) without the key: %v, want key_missing", autoAck, err)
		}
	}
	if res := mustPop(t, c, protocol.PopArgs{Queue: "sec", Group: "g2", Batch: 10}); len(res.Messages) != 3 || res.Messages[0].Offset != 0 {
		t.Fatalf("after the keyless pops, the keyed sidecar's pop of that group: %+v", res)
	} else {
		for _, m := range res.Messages {
			wantSecret(t, m)
		}
	}

	// A payload altered in the table is refused, not returned.
	mustPush(t, c, secretItem(t, "sec", "t", "e"))
	if _, err := ts.pool.Exec(testContext(t), `
		UPDATE queenside.segments s SET payloads[1] = set_byte(s.payloads[1], length(s.payloads[1]) - 3,
		                                              get_byte(s.payloads[1], length(s.payloads[1]) - 3) # 1)
		  FROM queenside.partitions p JOIN queenside.queues q ON q.id = p.queue_id
		 WHERE p.id = s.partition_id AND q.name = 'sec' AND p.name = 't'`); err != nil {
		t.Fatal(err)
	}
	for range 2 { // and it stays where it is
		if res, err := c.Pop(testContext(t), protocol.PopArgs{Queue: "sec", Partition: "t", Group: "g"}); !isCode(err, protocol.CodeInternal) {
			t.Fatalf("a pop of an altered payload: %+v %v", res, err)
		}
	}

	// Dead letters: listed and replayed as plaintext, stored sealed.
	encrypted(t, c, "dl", func(o *protocol.QueueOptions) { o.RetryLimit = 0 })
	mustPush(t, c, secretItem(t, "dl", "p", "f"))
	held := mustPop(t, c, protocol.PopArgs{Queue: "dl", Group: "g"})
	if ar := mustAck(t, c, queenside.Failed(held.Messages[0], "no")); !ar.Results[0].DeadLettered {
		t.Fatalf("not dead-lettered: %+v", ar)
	}
	page, err := c.DLQ(testContext(t), queenside.DLQArgs{Queue: "dl"})
	if err != nil || len(page.Entries) != 1 {
		t.Fatalf("dlq: %+v %v", page, err)
	}
	var v map[string]string
	if err := msgpack.Unmarshal(page.Entries[0].Payload, &v); err != nil || v["card"] != secretMarker {
		t.Fatalf("dead letter payload: %v %v", v, err)
	}
	if r, err := c.DLQReplay(testContext(t), page.Entries[0].ID); err != nil || r[0].Status != protocol.StatusQueued {
		t.Fatalf("replay: %+v %v", r, err)
	}
	// A replay is a new message, with a transaction id of its own.
	if res := mustPop(t, c, protocol.PopArgs{Queue: "dl", Group: "g"}); len(res.Messages) != 1 {
		t.Fatalf("the replayed message: %+v", res)
	} else if err := msgpack.Unmarshal(res.Messages[0].Payload, &v); err != nil || v["card"] != secretMarker || v["tx"] != "f" {
		t.Fatalf("the replayed payload: %v %v", v, err)
	}
	if _, err := cb.DLQ(testContext(t), queenside.DLQArgs{Queue: "dl"}); !isCode(err, protocol.CodeKeyMissing) {
		t.Fatalf("dlq without the key: %v", err)
	}
	if hasPlainSecretOutside(t, ts.pool) {
		t.Fatal("the plaintext of a sealed queue is in the database")
	}
}

// hasPlainSecretOutside reports whether the secret is stored anywhere but
// in the plain queue, where the test put it in the clear.
func hasPlainSecretOutside(t *testing.T, pool *pgxpool.Pool) bool {
	t.Helper()
	var n int
	err := pool.QueryRow(testContext(t), `
		SELECT (SELECT count(*) FROM queenside.segments s JOIN queenside.partitions p ON p.id = s.partition_id
		          JOIN queenside.queues q ON q.id = p.queue_id, unnest(s.payloads) pl
		         WHERE q.name <> 'plain' AND position($1::bytea IN pl) > 0)
		     + (SELECT count(*) FROM queenside.dead_letters d WHERE position($1::bytea IN d.payload) > 0)`,
		[]byte(secretMarker)).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n > 0
}

func TestEncryptedQueuesSpoolNoPlaintext(t *testing.T) {
	pg := startPrivatePostgres(t)
	keys := keyFile(t, filepath.Join(t.TempDir(), "keys"), "k1")
	spoolDir := t.TempDir()
	sc := launchSidecar(t, pg.url, spoolDir, "--encryption-keys", keys)
	sc.waitReplayed(t) // migrated
	c := dialClient(t, sc.socket)
	encrypted(t, c, "sec", nil)
	pg.stop(t)
	for _, tx := range []string{"a", "b", "c"} {
		res, err := c.Push(testContext(t), secretItem(t, "sec", "p", tx))
		if err != nil || res[0].Status != protocol.StatusBuffered {
			t.Fatalf("push during the outage: %+v %v", res, err)
		}
	}
	files := 0
	err := filepath.WalkDir(spoolDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		files++
		if bytes.Contains(b, []byte(secretMarker)) {
			t.Errorf("spool file %s holds the plaintext of a sealed queue", path)
		}
		return nil
	})
	if err != nil || files == 0 {
		t.Fatalf("spool files: %d %v", files, err)
	}
	pg.restart(t)
	sc.waitReplayed(t)
	if hasPlainSecretOutside(t, pg.pool(t)) {
		t.Fatal("the plaintext of a sealed queue is in the database after replay")
	}
	res := mustPop(t, c, protocol.PopArgs{Queue: "sec", Group: "g", Batch: 10})
	if len(res.Messages) != 3 {
		t.Fatalf("pop after replay: %+v", res)
	}
	for _, m := range res.Messages {
		wantSecret(t, m)
	}

	// Rotation on SIGHUP: the key put first seals from then on, and what
	// the old key sealed still opens.
	appendKeyFirst(t, keys, "k2")
	if err := sc.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the keys to be reloaded", func() bool {
		return strings.Contains(sc.logText(), "encryption keys reloaded")
	})
	mustPush(t, c, secretItem(t, "sec", "p", "d"))
	stored := storedMessages(t, pg.pool(t), "sec", "p")
	if id, _, err := crypt.UnpackRecord(stored[3].Payload); err != nil || id != "k2" {
		t.Fatalf("after SIGHUP a new message is sealed under %q (%v), want k2", id, err)
	}
	res = mustPop(t, c, protocol.PopArgs{Queue: "sec", Group: "after", Batch: 10})
	if len(res.Messages) != 4 {
		t.Fatalf("pop after the rotation: %+v", res)
	}
	for _, m := range res.Messages {
		wantSecret(t, m)
	}
}
