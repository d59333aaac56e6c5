package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/queenside/queenside/protocol"
)

func healthCommand() *cli.Command {
	return &cli.Command{
		Name:  "health",
		Usage: "ask the sidecar for a real database round trip; exits 0 when ok, 1 otherwise",
		Flags: clientFlags(),
		Action: func(c *cli.Context) error {
			cl, ctx, done, err := connect(c)
			if err != nil {
				return exitError("%v", err)
			}
			defer done()
			h, err := cl.Health(ctx)
			if err != nil {
				return exitError("health: %v", err)
			}
			if c.Bool("json") {
				if err := printJSON(h); err != nil {
					return err
				}
			} else {
				db := "ok"
				if !h.Database.OK {
					db = "unreachable: " + h.Database.Error
				}
				spooled := fmt.Sprintf("%d records, %d bytes", h.Spool.Records, h.Spool.Bytes)
				if h.Spool.OldestAt != nil {
					spooled += ", oldest " + h.Spool.OldestAt.Format(time.RFC3339)
				}
				if h.Spool.Replaying {
					spooled += ", replaying"
				}
				fmt.Printf("status     %s\ndatabase   %s (%.2f ms)\nspool      %s\nversion    %s\nuptime     %.0f s\n",
					h.Status, db, h.Database.LatencyMs, spooled, h.Version, h.UptimeSeconds)
				if why := spoolCauses[h.Spool.Cause]; why != "" {
					fmt.Printf("spooling   %s\n", why)
				}
				if len(h.Spool.Spooled) > 0 {
					fmt.Printf("spooled    %s since start\n", spooledCounts(h.Spool.Spooled))
				}
				for _, w := range h.Spool.Warnings {
					fmt.Printf("warning    %s\n", w)
				}
			}
			if h.Status != protocol.HealthOK {
				return cli.Exit("", 1)
			}
			return nil
		},
	}
}

// spoolCauses says in words why pushes go to the spool.
var spoolCauses = map[string]string{
	protocol.SpoolCauseTimeout:     "pushes go to the spool: PostgreSQL did not answer within --database-timeout (a frozen host or a network partition)",
	protocol.SpoolCauseRefused:     "pushes go to the spool: PostgreSQL refused or reset the connection",
	protocol.SpoolCauseMaintenance: "pushes go to the spool: push maintenance is on",
}

// spooledCounts lists the items spooled by cause, in a fixed order.
func spooledCounts(byCause map[string]uint64) string {
	var parts []string
	for _, c := range protocol.SpoolCauses {
		if n := byCause[c]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d (%s)", n, c))
		}
	}
	return strings.Join(parts, ", ")
}
