package main

import (
	"encoding/json"
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"
	"github.com/vmihailenco/msgpack/v5"

	queenside "github.com/queenside/queenside/clients/go"
	"github.com/queenside/queenside/protocol"
	"github.com/queenside/queenside/sidecar"
)

func popCommand() *cli.Command {
	return &cli.Command{
		Name:      "pop",
		Usage:     "take messages from a queue: leased (ack them with --ack or `queenside ack`) or auto-acked",
		ArgsUsage: " ",
		Flags: append(clientFlags(),
			&cli.StringFlag{Name: "queue", Aliases: []string{"q"}, Required: true, Usage: "queue name"},
			&cli.StringFlag{Name: "group", Aliases: []string{"g"}, Usage: "consumer group (default: queue mode, one shared group)"},
			&cli.StringFlag{Name: "partition", Aliases: []string{"p"}, Usage: "only this partition (default: any)"},
			&cli.IntFlag{Name: "batch", Aliases: []string{"n"}, Value: 10, Usage: "most messages to take"},
			&cli.IntFlag{Name: "partitions", Value: 1, Usage: "most partitions to lease"},
			&cli.DurationFlag{Name: "wait", Usage: "wait this long for a message when none is ready (at most 60s)"},
			&cli.IntFlag{Name: "lease-seconds", Usage: "lease time (default: the queue's)"},
			&cli.BoolFlag{Name: "ack", Usage: "ack what was printed, once printed"},
			&cli.BoolFlag{Name: "auto-ack", Usage: "move the cursor as the messages are read: no lease, at-most-once"},
			&cli.StringFlag{Name: "subscription", Value: protocol.SubscribeAll, Usage: "where a new group starts: all, new, or from (with --from)"},
			&cli.TimestampFlag{Name: "from", Layout: time.RFC3339, Usage: "with --subscription from: the first commit time to deliver (RFC 3339)"},
		),
		Action: runPop,
	}
}

func runPop(c *cli.Context) error {
	if c.Bool("ack") && c.Bool("auto-ack") {
		return exitError("--ack and --auto-ack exclude each other")
	}
	if c.Duration("wait") > protocol.MaxWaitMs*time.Millisecond {
		return exitError("--wait %v: at most 60s", c.Duration("wait"))
	}
	cl, ctx, done, err := connect(c)
	if err != nil {
		return exitError("%v", err)
	}
	defer done()
	args := protocol.PopArgs{
		Queue: c.String("queue"), Group: c.String("group"), Partition: c.String("partition"),
		Batch: c.Int("batch"), Partitions: c.Int("partitions"), WaitMs: int(c.Duration("wait").Milliseconds()),
		LeaseSeconds: c.Int("lease-seconds"), AutoAck: c.Bool("auto-ack"), SubscriptionMode: c.String("subscription"),
		SubscriptionFrom: c.Timestamp("from"),
	}
	res, err := cl.Pop(ctx, args)
	if err != nil {
		return exitError("pop: %v", err)
	}
	if c.Bool("json") {
		if err := printJSON(res); err != nil {
			return err
		}
	} else {
		printMessages(res)
	}
	if !c.Bool("ack") || len(res.Messages) == 0 {
		return nil
	}
	items := make([]protocol.AckItem, len(res.Messages))
	for i, m := range res.Messages {
		items[i] = queenside.Completed(m)
	}
	ar, err := cl.Ack(ctx, items...)
	if err != nil {
		return exitError("ack: %v", err)
	}
	return reportAck(ar, !c.Bool("json"))
}

func printMessages(res protocol.PopResult) {
	if len(res.Messages) == 0 {
		fmt.Println("no messages")
		return
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PARTITION\tOFFSET\tTRANSACTION ID\tREDELIVERED\tPAYLOAD")
	for _, m := range res.Messages {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%t\t%s\n", m.Partition, m.Offset, m.TransactionID, m.Redelivered, payloadText(m.Payload))
	}
	tw.Flush()
	for _, l := range res.Leases {
		fmt.Printf("lease %s on %s offsets %d..%d until %s (%s)\n",
			l.LeaseID, l.Partition, l.FromOffset, l.ToOffset, l.ExpiresAt.Local().Format(time.TimeOnly), headDeliveries(l))
	}
}

// payloadText renders a payload for people: as JSON when it can be, as
// hex when it is not one msgpack value or nests too deep to show.
func payloadText(raw []byte) string {
	if deep, err := protocol.NestsDeeperThan(raw, sidecar.ShownNesting); err == nil && deep {
		return fmt.Sprintf("%x (nested more than %d levels deep)", raw, sidecar.ShownNesting)
	}
	var v any
	if err := msgpack.Unmarshal(raw, &v); err != nil {
		return fmt.Sprintf("%x", raw)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// headDeliveries says how often the lease's first message has been
// delivered to the group, this time included (headAttempts).
func headDeliveries(l protocol.Lease) string {
	if l.HeadAttempts <= 1 {
		return fmt.Sprintf("offset %d delivered for the first time", l.FromOffset)
	}
	return fmt.Sprintf("offset %d delivered %d times, this one included", l.FromOffset, l.HeadAttempts)
}
