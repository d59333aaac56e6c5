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
	if err := app.Run(os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "queenside:", err)
		os.Exit(1)
	}
}
