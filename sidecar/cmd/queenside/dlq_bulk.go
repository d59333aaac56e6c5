package main

import (
	"bufio"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	queenside "github.com/queenside/queenside/clients/go"
)

// The bulk actions of `queenside dlq`: replay and delete by filter, a
// batch at a time, and the counts by error.

// dlqFilterFlags select dead letters; --queue is required with --all.
func dlqFilterFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "queue", Aliases: []string{"q"}, Usage: "queue name"},
		&cli.StringFlag{Name: "group", Aliases: []string{"g"}, Usage: "only this group's"},
		&cli.StringFlag{Name: "partition", Aliases: []string{"p"}, Usage: "only this partition's"},
		&cli.StringFlag{Name: "error", Usage: "only those whose error contains this text (case-sensitive)"},
		&cli.StringFlag{Name: "since", Usage: "only those dead at or after this time (RFC 3339, or a duration ago: 2h)"},
		&cli.StringFlag{Name: "until", Usage: "only those dead before this time (RFC 3339, or a duration ago)"},
	}
}

// dlqFilter reads dlqFilterFlags.
func dlqFilter(c *cli.Context) (queenside.DLQFilter, error) {
	f := queenside.DLQFilter{Queue: c.String("queue"), ErrorContains: c.String("error")}
	if c.IsSet("group") {
		g := c.String("group")
		f.Group = &g
	}
	if c.IsSet("partition") {
		p := c.String("partition")
		f.Partition = &p
	}
	var err error
	if f.DeadFrom, err = timeFlag(c, "since"); err != nil {
		return f, err
	}
	f.DeadTo, err = timeFlag(c, "until")
	return f, err
}

// timeFlag reads an RFC 3339 time, or a duration that long ago.
func timeFlag(c *cli.Context, name string) (*time.Time, error) {
	v := c.String(name)
	if v == "" {
		return nil, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return &t, nil
	}
	if d, err := time.ParseDuration(v); err == nil && d >= 0 {
		t := time.Now().Add(-d)
		return &t, nil
	}
	return nil, fmt.Errorf("--%s: want an RFC 3339 time or a duration ago (2h), got %q", name, v)
}

// allFlags are those of a bulk action by filter.
func allFlags(extra ...cli.Flag) []cli.Flag {
	flags := append(clientFlags(), dlqFilterFlags()...)
	flags = append(flags, &cli.BoolFlag{Name: "all", Usage: "every dead letter the filter matches (needs --queue), a batch at a time"},
		&cli.IntFlag{Name: "batch", Value: 500, Usage: "entries a batch (1..1000)"})
	return append(flags, extra...)
}

func dlqReplayAll(c *cli.Context) error {
	f, err := dlqFilter(c)
	if err != nil {
		return exitError("dlq replay: %v", err)
	}
	if f.Queue == "" {
		return exitError("dlq replay --all: --queue is required")
	}
	cl, _, done, err := connect(c)
	if err != nil {
		return exitError("%v", err)
	}
	defer done()
	again := c.Bool("include-replayed")
	args := queenside.DLQReplayArgs{DLQSelection: queenside.DLQSelection{DLQFilter: f, Limit: c.Int("batch")}, IncludeReplayed: &again}
	var total queenside.DLQReplayReply
	for {
		ctx, cancel := perCall(c)
		r, err := cl.DLQReplayBatch(ctx, args)
		cancel()
		if err != nil {
			return exitError("dlq replay: %v (run it again to go on: what was replayed is skipped)", err)
		}
		total.Replayed, total.Skipped, total.Failed = total.Replayed+r.Replayed, total.Skipped+r.Skipped, total.Failed+r.Failed
		for _, res := range r.Results {
			if res.Error != nil {
				fmt.Fprintf(os.Stderr, "%d: %s: %s\n", res.ID, res.Error.Code, res.Error.Message)
			}
		}
		if !c.Bool("json") {
			fmt.Printf("replayed %d, skipped %d as replayed already, failed %d\n", total.Replayed, total.Skipped, total.Failed)
		}
		if r.NextAfterID == nil {
			break
		}
		args.AfterID = *r.NextAfterID
	}
	if c.Bool("json") {
		if err := printJSON(map[string]int{"replayed": total.Replayed, "skipped": total.Skipped, "failed": total.Failed}); err != nil {
			return err
		}
	}
	if total.Failed > 0 {
		return cli.Exit("", 1)
	}
	return nil
}

func dlqDelete(c *cli.Context) error {
	if c.Bool("all") == (c.NArg() > 0) {
		return exitError("dlq delete: name entry ids, or --all with --queue")
	}
	cl, ctx, done, err := connect(c)
	if err != nil {
		return exitError("%v", err)
	}
	defer done()
	var sel queenside.DLQSelection
	var what string
	if c.Bool("all") {
		if sel.DLQFilter, err = dlqFilter(c); err != nil {
			return exitError("dlq delete: %v", err)
		}
		if sel.Queue == "" {
			return exitError("dlq delete --all: --queue is required")
		}
		page, err := cl.DLQ(ctx, queenside.DLQArgs{Queue: sel.Queue, Group: sel.Group, Partition: sel.Partition,
			ErrorContains: sel.ErrorContains, DeadFrom: sel.DeadFrom, DeadTo: sel.DeadTo, Limit: 1, Count: true})
		if err != nil {
			return exitError("dlq delete: %v", err)
		}
		what = fmt.Sprintf("%d dead letters of queue %s matching the filter", *page.Count, sel.Queue)
		sel.Limit = c.Int("batch")
	} else {
		if sel.IDs, err = entryIDs(c, "dlq delete"); err != nil {
			return err
		}
		what = fmt.Sprintf("%d dead letters", len(sel.IDs))
	}
	if !c.Bool("yes") && !confirmed(fmt.Sprintf("Delete %s for good? [y/N] ", what)) {
		return exitError("dlq delete: not confirmed; nothing deleted")
	}
	deleted := 0
	for {
		ctx, cancel := perCall(c)
		r, err := cl.DLQDelete(ctx, sel)
		cancel()
		deleted += r.Deleted
		if err != nil {
			return exitError("dlq delete: %v (%d deleted)", err, deleted)
		}
		if r.NextAfterID == nil {
			break
		}
		sel.AfterID = *r.NextAfterID
	}
	if c.Bool("json") {
		return printJSON(map[string]int{"deleted": deleted})
	}
	fmt.Printf("deleted %d\n", deleted)
	return nil
}

// confirmed asks on the terminal; only y or yes is a yes.
func confirmed(question string) bool {
	fmt.Fprint(os.Stderr, question)
	answer, _ := bufio.NewReader(os.Stdin).ReadString('\n')
	a := strings.ToLower(strings.TrimSpace(answer))
	return a == "y" || a == "yes"
}

func dlqSummary(c *cli.Context) error {
	cl, ctx, done, err := connect(c)
	if err != nil {
		return exitError("%v", err)
	}
	defer done()
	counts, err := cl.DLQSummary(ctx, c.String("queue"), c.Int("limit"))
	if err != nil {
		return exitError("dlq summary: %v", err)
	}
	if c.Bool("json") {
		return printJSON(map[string]any{"errors": counts})
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "QUEUE\tGROUP\tCOUNT\tREPLAYED\tFIRST\tLAST\tERROR")
	for _, e := range counts {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\t%s\n", e.Queue, groupName(e.Group), e.Count, e.Replayed,
			e.FirstDeadAt.UTC().Format(time.RFC3339), e.LastDeadAt.UTC().Format(time.RFC3339), e.Error)
	}
	return tw.Flush()
}
