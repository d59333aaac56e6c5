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
		Usage: "apply the schema migrations to a database and exit (serve also applies them at start); --citus distributes the schema over a Citus cluster",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "database-url", Usage: "PostgreSQL connection string (on Citus: the coordinator)", EnvVars: []string{"QUEENSIDE_DATABASE_URL"}, Required: true},
			&cli.BoolFlag{Name: "citus", Usage: "then distribute the schema over the Citus cluster whose coordinator the database is (SCALING.md); safe to run again"},
			&cli.IntFlag{Name: "shard-count", Value: schema.DefaultShardCount, Usage: "with --citus, the shards the partitions are spread over (fixed once distributed)"},
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
			} else {
				fmt.Println("applied migrations", applied)
			}
			if c.Bool("citus") {
				if err := schema.Distribute(c.Context, conn, c.Int("shard-count")); err != nil {
					return err
				}
				fmt.Println("schema distributed over the Citus cluster")
			}
			return nil
		},
	}
}
