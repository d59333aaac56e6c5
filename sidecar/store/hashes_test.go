package store

import (
	"context"
	"testing"

	"github.com/google/uuid"
)

// A segment of one message holds its message's hash itself and writes no
// dedup row; a segment of several keeps a dedup row a message. Each shape
// of push stores them so (one partition, one message in each of several
// partitions, runs of mixed lengths, and the general path), and every
// reader finds a hash in either place: a repeat is a duplicate of its
// original, and a transaction id is found by its hash.
func TestASegmentOfOneMessageHoldsItsHash(t *testing.T) {
	s := openStore(t)
	ctx := context.Background()
	msg := func(partition, txid string) Message {
		return Message{Queue: "q", Partition: partition, Payload: []byte{0xc0},
			TransactionID: txid, MessageID: uuid.Must(uuid.NewV7())}
	}
	calls := [][]Message{
		{msg("solo", "a")},                                                                   // one partition
		{msg("x", "b"), msg("y", "c")},                                                       // one message in each partition
		{msg("one", "d"), msg("two", "e"), msg("two", "f")},                                  // runs of mixed lengths
		{msg("one", "g"), msg("one", "g"), msg("three", "h")},                                // a repeat: the general path
		{msg("solo", "a"), msg("four", "i"), msg("four", "j")},                               // a stored hash: the general path
		{msg("five", "k"), msg("six", "l"), msg("six", "m")},                                 // the fast path again
		{msg("x", "b"), msg("two", "f"), msg("one", "g"), msg("five", "k"), msg("six", "m")}, // every one a repeat
	}
	originals := map[string]Outcome{}
	for i, call := range calls {
		out, err := s.Push(ctx, call)
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		for j, m := range call {
			key := m.Partition + "/" + m.TransactionID
			orig, seen := originals[key]
			if !seen {
				if out[j].Duplicate {
					t.Fatalf("call %d, %s: a first message answered duplicate", i, key)
				}
				originals[key] = out[j]
				continue
			}
			if !out[j].Duplicate || out[j].Offset != orig.Offset || out[j].MessageID != orig.MessageID {
				t.Fatalf("call %d, %s: %+v; want a duplicate of %+v", i, key, out[j], orig)
			}
		}
	}

	// Where each hash is kept: the segments of one message hold theirs.
	wantInSegment := map[string]bool{"solo/a": true, "x/b": true, "y/c": true, "one/d": true, "one/g": true,
		"three/h": true, "five/k": true}
	rows, err := s.pool.Query(ctx, `
		SELECT p.name, s.transaction_ids, s.hash FROM queenside.segments s
		  JOIN queenside.partitions p ON p.id = s.partition_id`)
	if err != nil {
		t.Fatal(err)
	}
	inSegment := map[string]bool{}
	for rows.Next() {
		var name string
		var txids []string
		var hash *uuid.UUID
		if err := rows.Scan(&name, &txids, &hash); err != nil {
			t.Fatal(err)
		}
		if hash == nil {
			continue
		}
		if len(txids) != 1 || *hash != TransactionHash(txids[0]) {
			t.Fatalf("%s: a segment of %v holds hash %v", name, txids, *hash)
		}
		inSegment[name+"/"+txids[0]] = true
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	var inDedup []string
	if err := s.pool.QueryRow(ctx, `
		SELECT array_agg(p.name || '/' || t ORDER BY p.name, t)
		  FROM queenside.dedup d JOIN queenside.partitions p ON p.id = d.partition_id,
		       unnest(ARRAY['d', 'e', 'f', 'g', 'h', 'i', 'j', 'k', 'l', 'm', 'a', 'b', 'c']) t
		 WHERE d.hash = queenside.transaction_hash(t)`).Scan(&inDedup); err != nil {
		t.Fatal(err)
	}
	wantInDedup := []string{"four/i", "four/j", "six/l", "six/m", "two/e", "two/f"}
	if len(inSegment) != len(wantInSegment) || len(inDedup) != len(wantInDedup) {
		t.Fatalf("hashes in segments %v, in dedup rows %v; want %v and %v", inSegment, inDedup, wantInSegment, wantInDedup)
	}
	for k := range wantInSegment {
		if !inSegment[k] {
			t.Fatalf("hashes in segments %v; want %v", inSegment, wantInSegment)
		}
	}
	for i := range wantInDedup {
		if inDedup[i] != wantInDedup[i] {
			t.Fatalf("hashes in dedup rows %v; want %v", inDedup, wantInDedup)
		}
	}

	// A transaction id is found by its hash in either place.
	for key, c := range map[string]struct{ partition, txid string }{"segment": {"one", "g"}, "dedup row": {"two", "f"}} {
		b, err := s.PartitionBounds(ctx, "q", c.partition)
		if err != nil {
			t.Fatal(err)
		}
		off, found, byDedup, err := s.FindTransaction(ctx, b, c.txid, 0)
		if want := originals[c.partition+"/"+c.txid].Offset; err != nil || !found || !byDedup || off != want {
			t.Fatalf("%s/%s, its hash in a %s: offset %d found %v by hash %v (%v); want %d by hash",
				c.partition, c.txid, key, off, found, byDedup, err, want)
		}
	}
}
