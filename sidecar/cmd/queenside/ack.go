package main

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/queenside/queenside/protocol"
)

func ackCommand() *cli.Command {
	return &cli.Command{
		Name:      "ack",
		Usage:     "acknowledge messages of a lease as completed or failed",
		ArgsUsage: " ",
		Flags: append(clientFlags(),
			&cli.StringFlag{Name: "lease", Required: true, Usage: "lease id, as pop printed it"},
			&cli.Int64SliceFlag{Name: "offset", Usage: "offset of a message (repeatable)"},
			&cli.StringSliceFlag{Name: "transaction-id", Usage: "transaction id of a message (repeatable)"},
			&cli.BoolFlag{Name: "failed", Usage: "report the messages failed: they are delivered again and their retry budget is charged"},
			&cli.StringFlag{Name: "error", Usage: "with --failed: why (kept with a dead letter)"},
		),
		Action: func(c *cli.Context) error {
			status := protocol.AckCompleted
			if c.Bool("failed") {
				status = protocol.AckFailed
			}
			var items []protocol.AckItem
			for _, off := range c.Int64Slice("offset") {
				items = append(items, protocol.AckItem{LeaseID: c.String("lease"), Offset: &off, Status: status, Error: c.String("error")})
			}
			for _, tx := range c.StringSlice("transaction-id") {
				items = append(items, protocol.AckItem{LeaseID: c.String("lease"), TransactionID: tx, Status: status, Error: c.String("error")})
			}
			if len(items) == 0 {
				return exitError("name the messages with --offset or --transaction-id")
			}
			cl, ctx, done, err := connect(c)
			if err != nil {
				return exitError("%v", err)
			}
			defer done()
			ar, err := cl.Ack(ctx, items...)
			if err != nil {
				return exitError("ack: %v", err)
			}
			if c.Bool("json") {
				if err := printJSON(ar); err != nil {
					return err
				}
			}
			return reportAck(ar, !c.Bool("json"))
		},
	}
}

// reportAck prints an ack's outcome for people (when human) and exits
// non-zero when any item did not succeed.
func reportAck(ar protocol.AckResult, human bool) error {
	failed := 0
	for _, r := range ar.Results {
		if !r.Success {
			failed++
			if human {
				fmt.Printf("item %d not acked: %s\n", r.Index, r.Code)
			}
		} else if r.DeadLettered && human {
			fmt.Printf("item %d dead-lettered\n", r.Index)
		}
	}
	if human {
		for _, l := range ar.Leases {
			fmt.Printf("lease %s: cursor %d, released %t\n", l.LeaseID, l.Cursor, l.Released)
		}
	}
	if failed > 0 {
		return cli.Exit("", 1)
	}
	return nil
}
