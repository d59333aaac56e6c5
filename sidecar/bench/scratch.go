package bench

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// openScratch makes the schema of plain tables a scenario writes without
// the sidecar (insert, floor), named after the scenario and the run and
// filled by create, and returns it with the function that drops it.
func (b *bench) openScratch(ctx context.Context, scenario string,
	create func(context.Context, *pgx.Conn, string) error) (schema string, drop func() error, err error) {
	if b.dbURL == "" {
		return "", nil, fmt.Errorf("%s writes to the database: give --database-url with --socket", scenario)
	}
	schema = "bench_" + scenario + "_" + strings.ReplaceAll(strings.ToLower(b.runID), "-", "_")
	admin, err := pgx.Connect(ctx, b.dbURL)
	if err != nil {
		return "", nil, fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	drop = func() error {
		defer admin.Close(context.Background())
		return dropScratch(admin, schema)
	}
	if err := create(ctx, admin, schema); err != nil {
		drop() //nolint:errcheck // the creation's error is the one to report
		return "", nil, err
	}
	return schema, drop, nil
}

func dropScratch(db *pgx.Conn, schema string) error {
	if _, err := db.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+schema+" CASCADE"); err != nil {
		return fmt.Errorf("drop the scratch schema %s: %w", schema, err)
	}
	return nil
}
