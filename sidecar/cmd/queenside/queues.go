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
			fmt.Fprintln(tw, "QUEUE\tPARTITIONS\tLEASE S\tRETRIES\tMAX DELIVERIES\tDEDUP S\tRETENTION S\tCOMPLETED RETENTION S\tDELAY S\tCONSUMPTION")
			for _, q := range qs {
				o := q.Options
				consumption := "on"
				if o.ConsumptionPaused {
					consumption = "paused"
				}
				fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\n", q.Queue, q.Partitions, o.LeaseSeconds, o.RetryLimit,
					o.MaxDeliveries, o.DedupWindowSeconds, o.RetentionSeconds, o.CompletedRetentionSeconds, o.DelaySeconds, consumption)
			}
			return tw.Flush()
		},
	}
}

// intOptions are configure's integer flags, each with the option it sets.
var intOptions = []struct {
	flag, usage string
	field       func(*queenside.QueueOptions) *int
}{
	{"lease-seconds", "", func(o *queenside.QueueOptions) *int { return &o.LeaseSeconds }},
	{"retry-limit", "", func(o *queenside.QueueOptions) *int { return &o.RetryLimit }},
	{"dedup-window-seconds", "", func(o *queenside.QueueOptions) *int { return &o.DedupWindowSeconds }},
	{"retention-seconds", "", func(o *queenside.QueueOptions) *int { return &o.RetentionSeconds }},
	{"completed-retention-seconds", "", func(o *queenside.QueueOptions) *int { return &o.CompletedRetentionSeconds }},
	{"delay-seconds", "", func(o *queenside.QueueOptions) *int { return &o.DelaySeconds }},
	{"max-deliveries", "; a message delivered that many times under a lease without an ack is dead-lettered (0: never)",
		func(o *queenside.QueueOptions) *int { return &o.MaxDeliveries }},
}

// configureCommand sets a queue's options. The protocol's configure replaces
// every option; this command changes only the flags given, keeping the
// others as they are (or at their defaults for a new queue).
func configureCommand() *cli.Command {
	flags := append(clientFlags(), &cli.StringFlag{Name: "queue", Aliases: []string{"q"}, Required: true, Usage: "queue name"})
	for _, o := range intOptions {
		flags = append(flags, &cli.IntFlag{Name: o.flag, Usage: "set " + o.flag + " (unchanged when not given)" + o.usage})
	}
	flags = append(flags,
		&cli.BoolFlag{Name: "pause", Usage: "pause the queue's consumption: no group's pop delivers it until --resume"},
		&cli.BoolFlag{Name: "resume", Usage: "resume a paused queue's consumption"},
		&cli.BoolFlag{Name: "encrypt-payloads", Usage: "seal the payloads pushed from now on (--encrypt-payloads=false to stop; the sidecars need --encryption-keys)"})
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
			for _, o := range intOptions {
				if c.IsSet(o.flag) {
					*o.field(&opts) = c.Int(o.flag)
				}
			}
			switch {
			case c.Bool("pause") && c.Bool("resume"):
				return exitError("configure: --pause and --resume say the opposite")
			case c.Bool("pause"):
				opts.ConsumptionPaused = true
			case c.Bool("resume"):
				opts.ConsumptionPaused = false
			}
			if c.IsSet("encrypt-payloads") {
				opts.EncryptPayloads = c.Bool("encrypt-payloads")
			}
			got, err := cl.Configure(ctx, queue, opts)
			if err != nil {
				return exitError("configure: %v", err)
			}
			if c.Bool("json") {
				return printJSON(map[string]any{"queue": queue, "options": got})
			}
			paused := ""
			if got.ConsumptionPaused {
				paused = ", consumption paused"
			}
			if got.EncryptPayloads {
				paused += ", payloads encrypted"
			}
			if got.MaxDeliveries > 0 {
				paused += fmt.Sprintf(", at most %d deliveries", got.MaxDeliveries)
			}
			fmt.Printf("queue %s: lease %d s, %d retries, dedup window %d s, retention %d s, completed retention %d s, delay %d s%s\n",
				queue, got.LeaseSeconds, got.RetryLimit, got.DedupWindowSeconds, got.RetentionSeconds,
				got.CompletedRetentionSeconds, got.DelaySeconds, paused)
			return nil
		},
	}
}
