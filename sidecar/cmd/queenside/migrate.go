package main

import (
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/urfave/cli/v2"

	"github.com/queenside/queenside/schema"
)

func migrateCommand() *cli.Command {
	return &cli.Command{
		Name:  "migrate",
		Usage: "apply the schema migrations to a database and exit (serve also applies them at start)",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "database-url", Usage: "PostgreSQL connection string", EnvVars: []string{"QUEENSIDE_DATABASE_URL"}, Required: true},
		},
		Action: func(c *cli.Context) error {
			conn, err := pgx.Connect(c.Context, c.String("database-url"))
			if err != nil {
				return fmt.Errorf("connect: %w", err)
			}
			defer conn.Close(c.Context)
			applied, err := schema.MigrateVersions(c.Context, conn)
			if err != nil {
				return err
			}
			if len(applied) == 0 {
				fmt.Println("schema already up to date")
				return nil
			}
			fmt.Println("applied migrations", applied)
			return nil
		},
	}
}
