// Command queenside is the queenside sidecar and its command-line client.
// Each command lives in a file of its own.
package main

import (
	"fmt"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/queenside/queenside/sidecar"
)

func main() {
	app := &cli.App{
		Name:    "queenside",
		Usage:   "ordered, partitioned queues on PostgreSQL, served from a sidecar",
		Version: sidecar.Version,
		Commands: []*cli.Command{
			serveCommand(),
			devCommand(),
			migrateCommand(),
			grantCommand(),
			revokeCommand(),
			grantsCommand(),
			pushCommand(),
			popCommand(),
			ackCommand(),
			statsCommand(),
			queuesCommand(),
			configureCommand(),
			groupsCommand(),
			seekCommand(),
			dlqCommand(),
			healthCommand(),
			maintenanceCommand(),
			keygenCommand(),
			benchCommand(),
			verifyCommand(),
		},
	}
	// A usage error is one line with a pointer to --help, as go, git and
	// kubectl give it, not the whole usage text followed by the error.
	app.CommandNotFound = func(c *cli.Context, name string) {
		fmt.Fprintf(os.Stderr, "queenside: no command %q (see queenside --help)\n", name)
		os.Exit(2)
	}
	oneLineUsageErrors(app.Commands)
	if err := app.Run(os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "queenside:", err)
		os.Exit(1)
	}
}

// oneLineUsageErrors makes every command, and every command under it,
// answer a usage error in one line.
func oneLineUsageErrors(cmds []*cli.Command) {
	for _, cmd := range cmds {
		cmd.OnUsageError = func(c *cli.Context, err error, _ bool) error {
			name := c.Command.HelpName // "queenside dlq replay"
			return cli.Exit(fmt.Sprintf("%s: %v (see %s --help)", name, err, name), 2)
		}
		oneLineUsageErrors(cmd.Subcommands)
	}
}
