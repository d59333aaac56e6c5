package main

import (
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	queenside "github.com/queenside/queenside/clients/go"
)

func groupsCommand() *cli.Command {
	return &cli.Command{
		Name:      "groups",
		Usage:     "list consumer groups with their lag; --delete removes one",
		ArgsUsage: " ",
		Flags: append(clientFlags(),
			&cli.StringFlag{Name: "queue", Aliases: []string{"q"}, Usage: "only this queue's groups"},
			&cli.StringFlag{Name: "delete", Usage: "delete this group of --queue (its cursors; dead letters stay)"},
		),
		Action: func(c *cli.Context) error {
			cl, ctx, done, err := connect(c)
			if err != nil {
				return exitError("%v", err)
			}
			defer done()
			if c.IsSet("delete") {
				if c.String("queue") == "" {
					return exitError("groups --delete needs --queue")
				}
				deleted, err := cl.DeleteGroup(ctx, c.String("queue"), c.String("delete"))
				if err != nil {
					return exitError("delete group: %v", err)
				}
				if c.Bool("json") {
					return printJSON(map[string]any{"deleted": deleted})
				}
				if !deleted {
					return exitError("no group %q in queue %s", c.String("delete"), c.String("queue"))
				}
				fmt.Printf("deleted group %q of %s\n", c.String("delete"), c.String("queue"))
				return nil
			}
			gs, err := cl.Groups(ctx, c.String("queue"))
			if err != nil {
				return exitError("groups: %v", err)
			}
			if c.Bool("json") {
				return printJSON(map[string]any{"groups": gs})
			}
			tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "QUEUE\tGROUP\tLAG\tLEASED PARTITIONS\tOLDEST UNACKED")
			for _, g := range gs {
				oldest := "-"
				if g.OldestUnackedAt != nil {
					oldest = fmt.Sprintf("%s (%s ago)", g.OldestUnackedAt.UTC().Format(time.RFC3339), time.Since(*g.OldestUnackedAt).Round(time.Second))
				}
				fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\n", g.Queue, groupName(g.Group), g.Lag, g.LeasedPartitions, oldest)
			}
			return tw.Flush()
		},
	}
}

func groupName(g string) string {
	if g == "" {
		return "(queue mode)"
	}
	return g
}

func seekCommand() *cli.Command {
	return &cli.Command{
		Name:      "seek",
		Usage:     "move a group's cursors to the beginning, the end, or a time; releases its leases there",
		ArgsUsage: " ",
		Flags: append(clientFlags(),
			&cli.StringFlag{Name: "queue", Aliases: []string{"q"}, Required: true, Usage: "queue name"},
			&cli.StringFlag{Name: "group", Aliases: []string{"g"}, Usage: "group name (default: queue mode)"},
			&cli.StringFlag{Name: "partition", Aliases: []string{"p"}, Usage: "only this partition (default: every one)"},
			&cli.StringFlag{Name: "to", Required: true, Usage: "beginning, end, or an RFC 3339 time (each partition's first message committed at or after it)"},
		),
		Action: func(c *cli.Context) error {
			to, err := seekTarget(c.String("to"))
			if err != nil {
				return exitError("%v", err)
			}
			cl, ctx, done, err := connect(c)
			if err != nil {
				return exitError("%v", err)
			}
			defer done()
			cursors, err := cl.Seek(ctx, c.String("queue"), c.String("group"), c.String("partition"), to)
			if err != nil {
				return exitError("seek: %v", err)
			}
			if c.Bool("json") {
				return printJSON(map[string]any{"cursors": cursors})
			}
			tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "PARTITION\tCURSOR")
			for _, cur := range cursors {
				fmt.Fprintf(tw, "%s\t%d\n", cur.Partition, cur.Cursor)
			}
			return tw.Flush()
		},
	}
}

func seekTarget(s string) (queenside.SeekTo, error) {
	switch s {
	case "beginning":
		return queenside.SeekBeginning, nil
	case "end":
		return queenside.SeekEnd, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return queenside.SeekTo{}, fmt.Errorf("--to %q: want beginning, end or an RFC 3339 time", s)
	}
	return queenside.SeekAt(t), nil
}
