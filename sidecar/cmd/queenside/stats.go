package main

import (
	"fmt"
	"os"
	"text/tabwriter"

	"github.com/urfave/cli/v2"
)

func statsCommand() *cli.Command {
	return &cli.Command{
		Name:      "stats",
		Usage:     "show a queue's partitions: head offset, retained messages, groups",
		ArgsUsage: " ",
		Flags: append(clientFlags(),
			&cli.StringFlag{Name: "queue", Aliases: []string{"q"}, Required: true, Usage: "queue name"},
		),
		Action: func(c *cli.Context) error {
			cl, ctx, done, err := connect(c)
			if err != nil {
				return exitError("%v", err)
			}
			defer done()
			st, err := cl.Stats(ctx, c.String("queue"))
			if err != nil {
				return exitError("stats: %v", err)
			}
			if c.Bool("json") {
				return printJSON(st)
			}
			tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintf(tw, "queue %s: %d partitions\n", st.Queue, len(st.Partitions))
			fmt.Fprintln(tw, "PARTITION\tHEAD OFFSET\tMESSAGES\tGROUP\tCURSOR\tLAG\tLEASED")
			for _, p := range st.Partitions {
				if len(p.Groups) == 0 {
					fmt.Fprintf(tw, "%s\t%d\t%d\t-\t-\t-\t-\n", p.Partition, p.HeadOffset, p.Messages)
				}
				for _, g := range p.Groups {
					group := g.Group
					if group == "" {
						group = "(queue mode)"
					}
					fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%d\t%d\t%t\n", p.Partition, p.HeadOffset, p.Messages, group, g.Cursor, g.Lag, g.Leased)
				}
			}
			return tw.Flush()
		},
	}
}
