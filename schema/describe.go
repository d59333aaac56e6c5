package schema

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// CurrentFile is the file, beside the migrations, that holds what Describe
// gives for a freshly migrated database: the tables and functions as they
// stand after every migration, in one place, where the migrations hold
// each function once per version of it. It is generated (make generate),
// and a test checks it against a database migrated from nothing.
const CurrentFile = "current.sql"

// Describe renders the queenside schema of the database conn is on: each
// table with its columns, constraints, storage settings and indexes, then
// each function as PostgreSQL gives its definition back. The order is by
// name, so the text changes only where the schema does. It renders the
// kinds of object queenside's migrations create, and refuses a schema that
// holds another kind (a type, a trigger) rather than leave it out.
func Describe(ctx context.Context, conn *pgx.Conn) (string, error) {
	if err := refuseUnrendered(ctx, conn); err != nil {
		return "", err
	}
	var b strings.Builder
	tables, err := describeTables(ctx, conn)
	if err != nil {
		return "", fmt.Errorf("describe tables: %w", err)
	}
	b.WriteString(tables)
	sequences, err := describeSequences(ctx, conn)
	if err != nil {
		return "", fmt.Errorf("describe sequences: %w", err)
	}
	b.WriteString(sequences)
	views, err := describeViews(ctx, conn)
	if err != nil {
		return "", fmt.Errorf("describe views: %w", err)
	}
	b.WriteString(views)
	functions, err := describeFunctions(ctx, conn)
	if err != nil {
		return "", fmt.Errorf("describe functions: %w", err)
	}
	b.WriteString(functions)
	return b.String(), nil
}

// refuseUnrendered counts the objects of the schema that Describe has no
// rendering for.
func refuseUnrendered(ctx context.Context, conn *pgx.Conn) error {
	var others []string
	err := conn.QueryRow(ctx, `
		SELECT coalesce(array_agg(what ORDER BY what), '{}') FROM (
			SELECT 'relation ' || c.relname || ' (relkind ' || c.relkind::text || ')' AS what
			  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
			 WHERE n.nspname = $1 AND c.relkind NOT IN ('r', 'i', 'S', 'v')
			UNION ALL
			SELECT 'trigger ' || t.tgname FROM pg_trigger t
			  JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace
			 WHERE n.nspname = $1 AND NOT t.tgisinternal
			UNION ALL
			SELECT 'type ' || t.typname FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
			 WHERE n.nspname = $1 AND t.typtype <> 'c' AND t.typelem = 0 AND t.typrelid = 0
			UNION ALL
			SELECT 'policy ' || p.polname FROM pg_policy p
			  JOIN pg_class c ON c.oid = p.polrelid JOIN pg_namespace n ON n.oid = c.relnamespace
			 WHERE n.nspname = $1) o`, Name).Scan(&others)
	if err != nil {
		return fmt.Errorf("describe: list the schema's objects: %w", err)
	}
	if len(others) > 0 {
		return fmt.Errorf("describe: the schema holds objects Describe does not render: %s", strings.Join(others, ", "))
	}
	return nil
}

func describeTables(ctx context.Context, conn *pgx.Conn) (string, error) {
	rows, err := conn.Query(ctx, `
		SELECT c.oid, c.relname, coalesce(array_to_string(c.reloptions, ', '), '')
		  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		 WHERE n.nspname = $1 AND c.relkind = 'r'
		 ORDER BY c.relname`, Name)
	if err != nil {
		return "", err
	}
	type table struct {
		oid              uint32
		name, reloptions string
	}
	tables, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (table, error) {
		var t table
		return t, r.Scan(&t.oid, &t.name, &t.reloptions)
	})
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, t := range tables {
		lines, settings, err := tableBody(ctx, conn, t.oid)
		if err != nil {
			return "", fmt.Errorf("%s: %w", t.name, err)
		}
		fmt.Fprintf(&b, "CREATE TABLE %s.%s (\n    %s\n)", Name, t.name, strings.Join(lines, ",\n    "))
		if t.reloptions != "" {
			fmt.Fprintf(&b, " WITH (%s)", t.reloptions)
		}
		b.WriteString(";\n")
		for _, s := range settings {
			fmt.Fprintf(&b, "ALTER TABLE %s.%s %s;\n", Name, t.name, s)
		}
		// Each index, with the statistics target of its expressions where
		// one is set.
		indexes, err := strings1(ctx, conn, `
			SELECT pg_get_indexdef(i.indexrelid) || ';' ||
			       coalesce((SELECT string_agg(format(E'\nALTER INDEX %I.%I ALTER COLUMN %s SET STATISTICS %s;',
			                                          $2::text, ic.relname, a.attnum, a.attstattarget), '' ORDER BY a.attnum)
			                   FROM pg_attribute a WHERE a.attrelid = i.indexrelid AND a.attstattarget >= 0), '')
			  FROM pg_index i JOIN pg_class ic ON ic.oid = i.indexrelid
			 WHERE i.indrelid = $1
			   AND NOT EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conindid = i.indexrelid AND k.conrelid = i.indrelid)
			 ORDER BY ic.relname`, t.oid, Name)
		if err != nil {
			return "", fmt.Errorf("%s: indexes: %w", t.name, err)
		}
		for _, ix := range indexes {
			b.WriteString(ix + "\n")
		}
		b.WriteString("\n")
	}
	return b.String(), nil
}

// tableBody gives a table's column and constraint lines, and the settings
// its columns have that their types do not: storage, statistics target.
func tableBody(ctx context.Context, conn *pgx.Conn, oid uint32) (lines, settings []string, err error) {
	rows, err := conn.Query(ctx, `
		SELECT a.attname, format_type(a.atttypid, a.atttypmod),
		       a.attnotnull, a.attidentity::text, a.attgenerated::text,
		       coalesce(pg_get_expr(d.adbin, d.adrelid), ''),
		       CASE WHEN a.attstorage <> t.typstorage THEN
		            CASE a.attstorage WHEN 'p' THEN 'PLAIN' WHEN 'e' THEN 'EXTERNAL'
		                              WHEN 'm' THEN 'MAIN' ELSE 'EXTENDED' END
		       ELSE '' END,
		       a.attstattarget
		  FROM pg_attribute a
		  JOIN pg_type t ON t.oid = a.atttypid
		  LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
		 WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped
		 ORDER BY a.attnum`, oid)
	if err != nil {
		return nil, nil, err
	}
	for rows.Next() {
		var name, typ, identity, generated, def, store string
		var notNull bool
		var statistics int
		if err := rows.Scan(&name, &typ, &notNull, &identity, &generated, &def, &store, &statistics); err != nil {
			return nil, nil, err
		}
		line := name + " " + typ
		switch {
		case identity == "a":
			line += " GENERATED ALWAYS AS IDENTITY"
		case identity == "d":
			line += " GENERATED BY DEFAULT AS IDENTITY"
		case generated == "s":
			line += " GENERATED ALWAYS AS (" + def + ") STORED"
		case def != "":
			line += " DEFAULT " + def
		}
		if notNull && identity == "" {
			line += " NOT NULL"
		}
		lines = append(lines, line)
		if store != "" {
			settings = append(settings, "ALTER COLUMN "+name+" SET STORAGE "+store)
		}
		if statistics >= 0 { // -1: the default_statistics_target
			settings = append(settings, fmt.Sprintf("ALTER COLUMN %s SET STATISTICS %d", name, statistics))
		}
	}
	if err := rows.Err(); err != nil {
		return nil, nil, err
	}
	// Primary key first, then the rest by kind and name; NOT NULL is on
	// the columns already.
	constraints, err := strings1(ctx, conn, `
		SELECT 'CONSTRAINT ' || quote_ident(conname) || ' ' || pg_get_constraintdef(oid)
		  FROM pg_constraint WHERE conrelid = $1
		 ORDER BY contype <> 'p', contype, conname`, oid)
	if err != nil {
		return nil, nil, err
	}
	return append(lines, constraints...), settings, nil
}

// describeSequences renders the sequences no identity column owns.
func describeSequences(ctx context.Context, conn *pgx.Conn) (string, error) {
	seqs, err := strings1(ctx, conn, `
		SELECT format('CREATE SEQUENCE %I.%I AS %s START %s INCREMENT %s;', n.nspname, c.relname,
		              format_type(s.seqtypid, NULL), s.seqstart, s.seqincrement)
		  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		  JOIN pg_sequence s ON s.seqrelid = c.oid
		 WHERE n.nspname = $1 AND c.relkind = 'S'
		   AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.objid = c.oid AND d.deptype = 'i')
		 ORDER BY c.relname`, Name)
	if err != nil || len(seqs) == 0 {
		return "", err
	}
	return strings.Join(seqs, "\n") + "\n\n", nil
}

// describeViews gives each view's query as PostgreSQL keeps it.
func describeViews(ctx context.Context, conn *pgx.Conn) (string, error) {
	views, err := strings1(ctx, conn, `
		SELECT format(E'CREATE VIEW %I.%I AS\n%s', n.nspname, c.relname, rtrim(pg_get_viewdef(c.oid, true), E'\n'))
		  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		 WHERE n.nspname = $1 AND c.relkind = 'v'
		 ORDER BY c.relname`, Name)
	if err != nil || len(views) == 0 {
		return "", err
	}
	return strings.Join(views, "\n\n") + "\n\n", nil
}

// describeFunctions gives each function's definition as PostgreSQL keeps
// it (pg_get_functiondef: the signature, its attributes and settings, and
// the body as written), ordered by name and arguments.
func describeFunctions(ctx context.Context, conn *pgx.Conn) (string, error) {
	defs, err := strings1(ctx, conn, `
		SELECT rtrim(pg_get_functiondef(p.oid), E'\n') || E'\n;'
		  FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
		 WHERE n.nspname = $1
		 ORDER BY p.proname, pg_get_function_identity_arguments(p.oid)`, Name)
	if err != nil {
		return "", err
	}
	return strings.Join(defs, "\n\n") + "\n", nil
}

// strings1 runs a query of one text column.
func strings1(ctx context.Context, conn *pgx.Conn, sql string, args ...any) ([]string, error) {
	rows, err := conn.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}
