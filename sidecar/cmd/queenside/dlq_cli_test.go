package main

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	queenside "github.com/queenside/queenside/clients/go"
	"github.com/queenside/queenside/protocol"
)

// fillDLQ dead-letters n messages of queue through the client, over n
// partitions (a failure ends its lease: one dead letter a partition each
// round), error "timeout" for even i and "bad input" for odd.
func fillDLQ(t *testing.T, dir, queue string, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := queenside.Dial(ctx, filepath.Join(dir, queenside.DevSocket))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Configure(ctx, queue, protocol.QueueOptions{RetryLimit: 0, LeaseSeconds: 30}); err != nil {
		t.Fatal(err)
	}
	var items []queenside.PushItem
	for i := range n {
		it, _ := queenside.Item(queue, i)
		it.Partition = fmt.Sprintf("p%d", i)
		items = append(items, it)
	}
	if _, err := c.Push(ctx, items...); err != nil {
		t.Fatal(err)
	}
	res, err := c.Pop(ctx, protocol.PopArgs{Queue: queue, Group: "g", Batch: n, Partitions: n})
	if err != nil || len(res.Messages) != n {
		t.Fatalf("pop: %d messages, %v", len(res.Messages), err)
	}
	var acks []queenside.AckItem
	for i, m := range res.Messages {
		acks = append(acks, queenside.Failed(m, map[bool]string{true: "timeout", false: "bad input"}[i%2 == 0]))
	}
	if _, err := c.Ack(ctx, acks...); err != nil {
		t.Fatal(err)
	}
}

func TestDLQBulkCommands(t *testing.T) {
	bin := buildCLI(t)
	dir := shortDir(t)
	startDev(t, bin, dir)
	run := func(stdin string, args ...string) string {
		t.Helper()
		out, err := runCLI(t, bin, dir, stdin, args...)
		if err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
		return out
	}
	fillDLQ(t, dir, "bulk", 10)

	if out := run("", "dlq", "summary", "-q", "bulk"); !regexp.MustCompile(`bulk +g +5 +0 .* timeout`).MatchString(out) ||
		!regexp.MustCompile(`bulk +g +5 +0 .* bad input`).MatchString(out) {
		t.Fatalf("dlq summary:\n%s", out)
	}
	if out := run("", "dlq", "list", "-q", "bulk", "--error", "bad", "--since", "1h"); strings.Count(out, "bad input") != 5 || strings.Contains(out, "timeout") {
		t.Fatalf("dlq list --error bad:\n%s", out)
	}
	if out := run("", "dlq", "replay", "--all", "-q", "bulk", "--error", "timeout", "--batch", "2"); !strings.Contains(out, "replayed 5, skipped 0 as replayed already, failed 0") ||
		strings.Count(out, "\n") != 3 {
		t.Fatalf("dlq replay --all (batches of 2):\n%s", out)
	}
	var total map[string]int
	if err := json.Unmarshal([]byte(run("", "dlq", "replay", "--all", "-q", "bulk", "--json")), &total); err != nil ||
		total["replayed"] != 5 || total["skipped"] != 5 || total["failed"] != 0 {
		t.Fatalf("dlq replay --all again: %v %v", total, err)
	}

	// Deletion asks first, and only a yes deletes.
	if out, err := runCLI(t, bin, dir, "n\n", "dlq", "delete", "--all", "-q", "bulk", "--error", "bad"); err == nil ||
		!strings.Contains(out, "Delete 5 dead letters of queue bulk matching the filter for good?") || !strings.Contains(out, "nothing deleted") {
		t.Fatalf("dlq delete answered no: %v\n%s", err, out)
	}
	if out := run("yes\n", "dlq", "delete", "--all", "-q", "bulk", "--error", "bad"); !strings.Contains(out, "deleted 5") {
		t.Fatalf("dlq delete --all:\n%s", out)
	}
	var page struct {
		Entries []struct {
			ID int64 `json:"id"`
		} `json:"entries"`
	}
	if err := json.Unmarshal([]byte(run("", "dlq", "list", "-q", "bulk", "--json")), &page); err != nil || len(page.Entries) != 5 {
		t.Fatalf("dlq list after the delete: %v %+v", err, page)
	}
	if out := run("", "dlq", "delete", "--yes", fmt.Sprint(page.Entries[0].ID), fmt.Sprint(page.Entries[1].ID)); !strings.Contains(out, "deleted 2") {
		t.Fatalf("dlq delete ids:\n%s", out)
	}

	for _, bad := range [][]string{
		{"dlq", "replay", "--all"},
		{"dlq", "delete", "--all", "--yes"},
		{"dlq", "delete", "--yes"},
		{"dlq", "replay", "--all", "-q", "bulk", "--since", "yesterday"},
		{"dlq", "replay", "--all", "-q", "bulk", "--batch", "5000"},
	} {
		if out, err := runCLI(t, bin, dir, "", bad...); err == nil {
			t.Errorf("%v succeeded:\n%s", bad, out)
		}
	}
}
