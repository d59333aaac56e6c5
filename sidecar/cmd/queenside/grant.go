package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/urfave/cli/v2"
)

// The commands that grant and revoke rights on queues (schema migration
// 21, README "Who may touch which queue"). They talk to PostgreSQL
// directly, as the schema's owner: a sidecar cannot grant.

func ownerURLFlag() cli.Flag {
	return &cli.StringFlag{Name: "database-url", Usage: "PostgreSQL connection string of the role that owns the queenside schema (the one that migrates it)",
		EnvVars: []string{"QUEENSIDE_DATABASE_URL"}, Required: true}
}

func grantCommand() *cli.Command {
	return &cli.Command{
		Name:      "grant",
		Usage:     "give a PostgreSQL role rights on queues: produce, consume, read, manage (run as the schema's owner)",
		UsageText: "queenside grant --database-url URL --role ROLE --queue NAME|PREFIX* --rights produce,consume [--groups NAME|PREFIX*]",
		Flags: []cli.Flag{
			ownerURLFlag(),
			&cli.StringFlag{Name: "role", Usage: "the PostgreSQL role a sidecar logs in as", Required: true},
			&cli.StringFlag{Name: "queue", Usage: "a queue name, or a prefix ending in * (billing.*)", Required: true},
			&cli.StringFlag{Name: "rights", Usage: "comma-separated: produce, consume, read, manage", Required: true},
			&cli.StringFlag{Name: "groups", Usage: "with consume: the groups it may consume as, a name or a prefix ending in * (default: any)"},
		},
		Action: func(c *cli.Context) error {
			return withOwner(c, func(conn *pgx.Conn) error {
				var groups any
				if g := c.String("groups"); g != "" {
					groups = g
				}
				rights := splitList(c.String("rights"))
				if _, err := conn.Exec(c.Context, `SELECT queenside.grant($1, $2, $3, $4)`, c.String("role"), c.String("queue"), rights, groups); err != nil {
					return err
				}
				fmt.Printf("granted %s on %s to %s\n", strings.Join(rights, ", "), c.String("queue"), c.String("role"))
				return nil
			})
		},
	}
}

func revokeCommand() *cli.Command {
	return &cli.Command{
		Name:      "revoke",
		Usage:     "take rights on queues from a PostgreSQL role (run as the schema's owner)",
		UsageText: "queenside revoke --database-url URL --role ROLE --queue NAME|PREFIX* [--rights produce,consume]",
		Flags: []cli.Flag{
			ownerURLFlag(),
			&cli.StringFlag{Name: "role", Usage: "the PostgreSQL role", Required: true},
			&cli.StringFlag{Name: "queue", Usage: "the queue name or prefix, exactly as granted", Required: true},
			&cli.StringFlag{Name: "rights", Usage: "comma-separated rights to take (default: all of them)"},
		},
		Action: func(c *cli.Context) error {
			return withOwner(c, func(conn *pgx.Conn) error {
				var rights any
				if r := c.String("rights"); r != "" {
					rights = splitList(r)
				}
				var had bool
				if err := conn.QueryRow(c.Context, `SELECT queenside.revoke($1, $2, $3)`, c.String("role"), c.String("queue"), rights).Scan(&had); err != nil {
					return err
				}
				if !had {
					return fmt.Errorf("%s had no such right on %s (queenside grants lists them)", c.String("role"), c.String("queue"))
				}
				fmt.Printf("revoked from %s on %s\n", c.String("role"), c.String("queue"))
				return nil
			})
		},
	}
}

func grantsCommand() *cli.Command {
	return &cli.Command{
		Name:      "grants",
		Usage:     "list the rights granted on queues (run as the schema's owner)",
		UsageText: "queenside grants --database-url URL [--role ROLE]",
		Flags: []cli.Flag{
			ownerURLFlag(),
			&cli.StringFlag{Name: "role", Usage: "only this role's"},
		},
		Action: func(c *cli.Context) error {
			return withOwner(c, func(conn *pgx.Conn) error {
				rows, err := conn.Query(c.Context, `SELECT role, queue, rights, coalesce(groups, ''), granted_at FROM queenside.grants
					WHERE $1 = '' OR role = $1 ORDER BY role, queue`, c.String("role"))
				if err != nil {
					return err
				}
				tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
				fmt.Fprintln(tw, "ROLE\tQUEUE\tRIGHTS\tGROUPS\tGRANTED")
				var role, queue, groups string
				var rights []string
				var at time.Time
				_, err = pgx.ForEachRow(rows, []any{&role, &queue, &rights, &groups, &at}, func() error {
					if groups == "" {
						groups = "any"
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", role, queue, strings.Join(rights, ","), groups, at.UTC().Format(time.RFC3339))
					return nil
				})
				if err != nil {
					return err
				}
				return tw.Flush()
			})
		},
	}
}

// ownerTimeout bounds a grant command's work: a database that stops
// answering ends it with an error rather than leaving it waiting.
const ownerTimeout = 30 * time.Second

// withOwner runs fn on a connection to --database-url, within ownerTimeout.
func withOwner(c *cli.Context, fn func(*pgx.Conn) error) error {
	ctx, cancel := context.WithTimeout(c.Context, ownerTimeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.String("database-url"))
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.Background())
	c.Context = ctx
	if err := fn(conn); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("no answer from PostgreSQL within %v: %w", ownerTimeout, err)
		}
		return err
	}
	return nil
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}
