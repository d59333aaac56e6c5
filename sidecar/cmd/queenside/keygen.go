package main

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/queenside/queenside/sidecar/crypt"
)

// keygenCommand prints a new key line for --encryption-keys.
func keygenCommand() *cli.Command {
	return &cli.Command{
		Name:      "keygen",
		Usage:     "print a new encryption key line, <id>:<base64 of 32 random bytes>, for the --encryption-keys file",
		ArgsUsage: "ID",
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return exitError("keygen: give the new key's id, e.g. queenside keygen 2026-12")
			}
			line, err := crypt.NewKeyLine(c.Args().First())
			if err != nil {
				return exitError("keygen: %v", err)
			}
			fmt.Println(line)
			return nil
		},
	}
}
