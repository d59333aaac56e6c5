package main

import (
	"fmt"
	"time"

	"github.com/urfave/cli/v2"
)

// maintenanceCommand reads the cluster-wide maintenance state; its on and
// off subcommands change it.
func maintenanceCommand() *cli.Command {
	change := func(on bool) *cli.Command {
		name, verb := "off", "turn off"
		if on {
			name, verb = "on", "turn on"
		}
		return &cli.Command{
			Name:      name,
			Usage:     verb + " maintenance of pushes (--push), pops (--pop), or both when neither is given",
			ArgsUsage: " ",
			Flags: append(clientFlags(),
				&cli.BoolFlag{Name: "push", Usage: "pushes: spooled by every sidecar instead of stored"},
				&cli.BoolFlag{Name: "pop", Usage: "pops: deliver nothing"}),
			Action: func(c *cli.Context) error {
				var push, pop *bool
				both := !c.Bool("push") && !c.Bool("pop")
				if both || c.Bool("push") {
					push = &on
				}
				if both || c.Bool("pop") {
					pop = &on
				}
				return runMaintenance(c, push, pop)
			},
		}
	}
	return &cli.Command{
		Name:  "maintenance",
		Usage: "print the maintenance state; `maintenance on|off [--push] [--pop]` changes it for every sidecar on the database",
		Description: `With push maintenance on, every sidecar on the database spools the pushes it
receives (answered buffered) instead of storing them, so that PostgreSQL can be
upgraded, vacuumed or moved; turning it off replays every spool. With pop
maintenance on, pops deliver nothing while acks, renews and releases keep
working. Every sidecar applies a change within 2 s.`,
		ArgsUsage:   " ",
		Flags:       clientFlags(),
		Subcommands: []*cli.Command{change(true), change(false)},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return exitError("maintenance: %q: want on or off", c.Args().First())
			}
			return runMaintenance(c, nil, nil)
		},
	}
}

func runMaintenance(c *cli.Context, push, pop *bool) error {
	cl, ctx, done, err := connect(c)
	if err != nil {
		return exitError("%v", err)
	}
	defer done()
	m, err := cl.Maintenance(ctx, push, pop)
	if err != nil {
		return exitError("maintenance: %v", err)
	}
	if c.Bool("json") {
		return printJSON(m)
	}
	fmt.Printf("push  %s\npop   %s\n", maintenanceLine(m.Push, m.PushSince, "pushes are spooled, not stored"),
		maintenanceLine(m.Pop, m.PopSince, "pops deliver nothing"))
	return nil
}

func maintenanceLine(on bool, since *time.Time, what string) string {
	if !on {
		return "off"
	}
	s := "on"
	if since != nil {
		s += " since " + since.UTC().Format(time.RFC3339)
	}
	return s + " (" + what + ")"
}
