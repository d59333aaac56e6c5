package schema_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/queenside/queenside/schema"
)

// deniedByPostgreSQL tells whether err is PostgreSQL's own refusal of a
// privilege (42501 with no schema named), not queenside's refusal of a
// right, which names schema queenside.
func deniedByPostgreSQL(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42501" && pgErr.SchemaName == ""
}

// An application role, even one granted every right on every queue, has
// no privilege on any of the schema's tables or sequences: a pod that
// connects with its sidecar's credentials reaches them only through the
// functions, which check. The version table alone may be read by every
// role, which a sidecar reads before it knows which functions there are.
func TestTheTablesAreClosedToApplicationRoles(t *testing.T) {
	ctx := context.Background()
	db := emptyDatabase(t)
	owner := connect(t, db)
	if err := schema.Migrate(ctx, owner); err != nil {
		t.Fatal(err)
	}
	role := fmt.Sprintf("qs_app_%x", time.Now().UnixNano())
	app := roleConn(t, owner, db, role)
	if _, err := owner.Exec(ctx, "SELECT queenside.grant($1, '*', ARRAY['produce', 'consume', 'read', 'manage'])", role); err != nil {
		t.Fatal(err)
	}
	rows, err := owner.Query(ctx, `
		SELECT c.relname, c.relkind::text,
		       (SELECT a.attname FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attnum > 0
		          AND a.attidentity = '' AND a.attgenerated = '' ORDER BY a.attnum LIMIT 1)
		  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		 WHERE n.nspname = 'queenside' AND c.relkind IN ('r', 'p', 'S') ORDER BY c.relname`)
	if err != nil {
		t.Fatal(err)
	}
	type relation struct{ Name, Kind, Column string }
	relations, err := pgx.CollectRows(rows, pgx.RowToStructByPos[relation])
	if err != nil {
		t.Fatal(err)
	}
	tables := 0
	for _, r := range relations {
		name := "queenside." + pgx.Identifier{r.Name}.Sanitize()
		var statements []string
		if r.Kind == "S" {
			statements = []string{"SELECT nextval('" + name + "')", "SELECT last_value FROM " + name}
		} else {
			tables++
			col := pgx.Identifier{r.Column}.Sanitize()
			statements = []string{
				"SELECT * FROM " + name + " LIMIT 1",
				"INSERT INTO " + name + " DEFAULT VALUES",
				"UPDATE " + name + " SET " + col + " = " + col + " WHERE false",
				"DELETE FROM " + name + " WHERE false",
			}
		}
		for _, sql := range statements {
			_, err := app.Exec(ctx, sql)
			if r.Name == "schema_migrations" && strings.HasPrefix(sql, "SELECT") {
				if err != nil {
					t.Errorf("%s: %v, want the versions, which every role may read", sql, err)
				}
				continue
			}
			if !deniedByPostgreSQL(err) {
				t.Errorf("%s as an application role: %v, want permission denied", sql, err)
			}
		}
	}
	if tables < 15 {
		t.Fatalf("found %d tables in schema queenside", tables)
	}
}
