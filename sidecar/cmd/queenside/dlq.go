package main

import (
	"fmt"
	"os"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	queenside "github.com/queenside/queenside/clients/go"
)

func dlqCommand() *cli.Command {
	return &cli.Command{
		Name:  "dlq",
		Usage: "list, count, replay and delete dead-lettered messages",
		Subcommands: []*cli.Command{
			{
				Name:      "list",
				Usage:     "list a queue's dead letters, oldest first",
				ArgsUsage: " ",
				Flags: append(append(clientFlags(), dlqFilterFlags()...),
					&cli.IntFlag{Name: "limit", Value: 100, Usage: "entries per page (1..1000)"},
					&cli.Int64Flag{Name: "after", Usage: "start after this entry id (the next page)"},
				),
				Action: dlqList,
			},
			{
				Name: "replay",
				Usage: "push dead letters again, each as a new message with a fresh transaction id: those named, " +
					"or with --all every one the filter matches, skipping those replayed already unless --include-replayed",
				ArgsUsage: "ID [ID...] | --all --queue Q",
				Flags:     allFlags(&cli.BoolFlag{Name: "include-replayed", Usage: "with --all, replay again those replayed already"}),
				Action:    dlqReplay,
			},
			{
				Name:      "delete",
				Usage:     "delete dead letters: those named, or with --all every one the filter matches; asks first unless --yes",
				ArgsUsage: "ID [ID...] | --all --queue Q",
				Flags:     allFlags(&cli.BoolFlag{Name: "yes", Aliases: []string{"y"}, Usage: "do not ask for a confirmation"}),
				Action:    dlqDelete,
			},
			{
				Name:      "summary",
				Usage:     "count dead letters by queue, group and error, the most frequent first",
				ArgsUsage: " ",
				Flags: append(clientFlags(),
					&cli.StringFlag{Name: "queue", Aliases: []string{"q"}, Usage: "only this queue's"},
					&cli.IntFlag{Name: "limit", Value: 100, Usage: "rows (1..1000)"}),
				Action: dlqSummary,
			},
		},
	}
}

func dlqList(c *cli.Context) error {
	f, err := dlqFilter(c)
	if err != nil {
		return exitError("dlq list: %v", err)
	}
	if f.Queue == "" {
		return exitError("dlq list: --queue is required")
	}
	args := queenside.DLQArgs{Queue: f.Queue, Group: f.Group, Partition: f.Partition, ErrorContains: f.ErrorContains,
		DeadFrom: f.DeadFrom, DeadTo: f.DeadTo, Limit: c.Int("limit"), AfterID: c.Int64("after")}
	cl, ctx, done, err := connect(c)
	if err != nil {
		return exitError("%v", err)
	}
	defer done()
	page, err := cl.DLQ(ctx, args)
	if err != nil {
		return exitError("dlq: %v", err)
	}
	if c.Bool("json") {
		return printJSON(page)
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tPARTITION\tGROUP\tOFFSET\tTRANSACTION ID\tFAILURES\tDEAD AT\tREPLAYED\tERROR\tPAYLOAD")
	for _, e := range page.Entries {
		replayed := "-"
		if e.ReplayedAt != nil {
			replayed = e.ReplayedAt.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%s\t%d\t%s\t%s\t%s\t%s\n", e.ID, e.Partition, groupName(e.Group), e.Offset,
			e.TransactionID, e.Failures, e.DeadAt.UTC().Format(time.RFC3339), replayed, e.Error, shortPayload(e.Payload))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if page.NextAfterID != nil {
		fmt.Printf("more: --after %d\n", *page.NextAfterID)
	}
	return nil
}

// shortPayload shows a payload as payloadText does, cut to fit a table.
func shortPayload(raw []byte) string {
	t := payloadText(raw)
	if len(t) > 60 {
		return t[:57] + "..."
	}
	return t
}

// entryIDs reads the command's arguments as dead-letter ids.
func entryIDs(c *cli.Context, cmd string) ([]int64, error) {
	if c.NArg() == 0 {
		return nil, exitError("%s: name at least one entry id", cmd)
	}
	ids := make([]int64, c.NArg())
	for i, a := range c.Args().Slice() {
		id, err := strconv.ParseInt(a, 10, 64)
		if err != nil || id < 1 {
			return nil, exitError("%s: %q is not an entry id", cmd, a)
		}
		ids[i] = id
	}
	return ids, nil
}

func dlqReplay(c *cli.Context) error {
	if c.Bool("all") {
		if c.NArg() > 0 {
			return exitError("dlq replay: name entry ids, or --all with --queue, not both")
		}
		return dlqReplayAll(c)
	}
	ids, err := entryIDs(c, "dlq replay")
	if err != nil {
		return err
	}
	cl, ctx, done, err := connect(c)
	if err != nil {
		return exitError("%v", err)
	}
	defer done()
	results, err := cl.DLQReplay(ctx, ids...)
	if err != nil {
		return exitError("dlq replay: %v", err)
	}
	if c.Bool("json") {
		if err := printJSON(map[string]any{"results": results}); err != nil {
			return err
		}
	}
	failed := 0
	for _, r := range results {
		if r.Error != nil {
			failed++
		}
		if c.Bool("json") {
			continue
		}
		if r.Error != nil {
			fmt.Printf("%d: %s: %s\n", r.ID, r.Error.Code, r.Error.Message)
		} else {
			fmt.Printf("%d: %s as offset %d, transaction id %s\n", r.ID, r.Status, *r.Offset, r.TransactionID)
		}
	}
	if failed > 0 {
		return cli.Exit("", 1)
	}
	return nil
}
