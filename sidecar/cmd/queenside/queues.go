package main

import (
	"fmt"
	"os"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	queenside "github.com/queenside/queenside/clients/go"
)

func queuesCommand() *cli.Command {
	return &cli.Command{
		Name:      "queues",
		Usage:     "list the queues with their partitions and options",
		ArgsUsage: " ",
		Flags:     clientFlags(),
		Action: func(c *cli.Context) error {
			cl, ctx, done, err := connect(c)
			if err != nil {
				return exitError("%v", err)
			}
			defer done()
			qs, err := cl.Queues(ctx)
			if err != nil {
				return exitError("queues: %v", err)
			}
			if c.Bool("json") {
				return printJSON(map[string]any{"queues": qs})
			}
			tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "QUEUE\tPARTITIONS\tLEASE S\tRETRIES\tDEDUP S\tRETENTION S\tCOMPLETED RETENTION S\tDELAY S")
			for _, q := range qs {
				o := q.Options
				fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\n", q.Queue, q.Partitions, o.LeaseSeconds, o.RetryLimit,
					o.DedupWindowSeconds, o.RetentionSeconds, o.CompletedRetentionSeconds, o.DelaySeconds)
			}
			return tw.Flush()
		},
	}
}

// configureCommand sets a queue's options. The protocol's configure replaces
// every option; this command changes only the flags given, keeping the
// others as they are (or at their defaults for a new queue).
func configureCommand() *cli.Command {
	options := []string{"lease-seconds", "retry-limit", "dedup-window-seconds", "retention-seconds",
		"completed-retention-seconds", "delay-seconds"}
	flags := append(clientFlags(), &cli.StringFlag{Name: "queue", Aliases: []string{"q"}, Required: true, Usage: "queue name"})
	for _, o := range options {
		flags = append(flags, &cli.IntFlag{Name: o, Usage: "set " + o + " (unchanged when not given)"})
	}
	return &cli.Command{
		Name:      "configure",
		Usage:     "set a queue's options, creating the queue if needed; options not given keep their value",
		ArgsUsage: " ",
		Flags:     flags,
		Action: func(c *cli.Context) error {
			cl, ctx, done, err := connect(c)
			if err != nil {
				return exitError("%v", err)
			}
			defer done()
			queue := c.String("queue")
			opts := queenside.DefaultQueueOptions()
			qs, err := cl.Queues(ctx)
			if err != nil {
				return exitError("configure: %v", err)
			}
			for _, q := range qs {
				if q.Queue == queue {
					opts = q.Options
				}
			}
			for name, dst := range map[string]*int{
				"lease-seconds": &opts.LeaseSeconds, "retry-limit": &opts.RetryLimit,
				"dedup-window-seconds": &opts.DedupWindowSeconds, "retention-seconds": &opts.RetentionSeconds,
				"completed-retention-seconds": &opts.CompletedRetentionSeconds, "delay-seconds": &opts.DelaySeconds,
			} {
				if c.IsSet(name) {
					*dst = c.Int(name)
				}
			}
			got, err := cl.Configure(ctx, queue, opts)
			if err != nil {
				return exitError("configure: %v", err)
			}
			if c.Bool("json") {
				return printJSON(map[string]any{"queue": queue, "options": got})
			}
			fmt.Printf("queue %s: lease %d s, %d retries, dedup window %d s, retention %d s, completed retention %d s, delay %d s\n",
				queue, got.LeaseSeconds, got.RetryLimit, got.DedupWindowSeconds, got.RetentionSeconds,
				got.CompletedRetentionSeconds, got.DelaySeconds)
			return nil
		},
	}
}
