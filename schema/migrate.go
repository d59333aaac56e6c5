package schema

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Name is the PostgreSQL schema that holds every queenside table.
const Name = "queenside"

// migrateLockKey is the advisory lock that serialises migrations across
// sidecars sharing a database ("queenside" in ASCII).
const migrateLockKey int64 = 0x717565656e73

// Migration is one numbered, embedded SQL file.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// Migrations returns the embedded migrations in version order.
func Migrations() ([]Migration, error) {
	entries, err := fs.ReadDir(migrationFiles, "migrations")
	if err != nil {
		return nil, fmt.Errorf("read migrations: %w", err)
	}
	var out []Migration
	for _, e := range entries {
		num, _, ok := strings.Cut(e.Name(), "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil {
			return nil, fmt.Errorf("read migrations: %s is not named NNNN_name.sql", e.Name())
		}
		sql, err := migrationFiles.ReadFile("migrations/" + e.Name())
		if err != nil {
			return nil, fmt.Errorf("read migrations: %w", err)
		}
		out = append(out, Migration{Version: v, Name: e.Name(), SQL: string(sql)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	return out, nil
}

// Fingerprint is a digest of every migration, naming a schema state (test
// harnesses key their template databases on it).
func Fingerprint() string {
	ms, err := Migrations()
	if err != nil {
		panic(err) // the files are embedded at build time
	}
	h := sha256.New()
	for _, m := range ms {
		fmt.Fprintf(h, "%s\x00%s\x00", m.Name, m.SQL)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Migrate applies every embedded migration not yet applied, each in its own
// transaction, under an advisory lock so that sidecars starting together on
// one database do not race.
func Migrate(ctx context.Context, conn *pgx.Conn) error {
	_, err := MigrateVersions(ctx, conn)
	return err
}

// MigrateVersions is Migrate, returning the versions it applied.
func MigrateVersions(ctx context.Context, conn *pgx.Conn) ([]int, error) {
	ms, err := Migrations()
	if err != nil {
		return nil, err
	}
	if err := CheckSession(ctx, conn); err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}
	// Sidecars starting together on a migrated database, the usual case,
	// find it so without queueing on the lock, each holding a connection.
	if upToDate(ctx, conn, ms) {
		return nil, checkNotTooOld(ctx, conn, ms[len(ms)-1].Version)
	}
	if err := checkMayMigrate(ctx, conn, ms[len(ms)-1].Version); err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", migrateLockKey); err != nil {
		return nil, fmt.Errorf("migrate: take lock: %w", err)
	}
	defer conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", migrateLockKey) //nolint:errcheck // the session ends the lock anyway

	if _, err := conn.Exec(ctx, `
		CREATE SCHEMA IF NOT EXISTS queenside;
		CREATE TABLE IF NOT EXISTS queenside.schema_migrations (
			version    integer PRIMARY KEY,
			name       text NOT NULL,
			checksum   text,
			applied_at timestamptz NOT NULL DEFAULT now()
		);
		ALTER TABLE queenside.schema_migrations ADD COLUMN IF NOT EXISTS checksum text;
		ALTER TABLE queenside.schema_migrations ADD COLUMN IF NOT EXISTS oldest_compatible integer`); err != nil {
		return nil, fmt.Errorf("migrate: create bookkeeping: %w", err)
	}
	if err := checkNotTooOld(ctx, conn, ms[len(ms)-1].Version); err != nil {
		return nil, err
	}
	applied, err := appliedChecksums(ctx, conn)
	if err != nil {
		return nil, err
	}
	var done []int
	for _, m := range ms {
		if sum, ok := applied[m.Version]; ok {
			if sum != m.Checksum() {
				return done, fmt.Errorf("%w: %s as applied to this database is not the one in this build; "+
					"the database was set up by another version of queenside", ErrSchemaMismatch, m.Name)
			}
			continue
		}
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			// Sidecars of the release before keep serving while this runs
			// (see the upgrade rule above). A lock the migration cannot
			// have within LockTimeout, shorter than PostgreSQL's deadlock
			// check (1 s), fails the migration rather than one of theirs:
			// it rolls back, their transactions go on, and it is tried
			// again (ErrYielded).
			if _, err := tx.Exec(ctx, fmt.Sprintf("SET LOCAL lock_timeout = %d", LockTimeout.Milliseconds())); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, m.SQL); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "INSERT INTO queenside.schema_migrations (version, name, checksum, oldest_compatible) VALUES ($1, $2, $3, $4)",
				m.Version, m.Name, m.Checksum(), m.Version-1)
			return err
		})
		if err != nil {
			if yielded(err) {
				err = fmt.Errorf("%w: %w", ErrYielded, err)
			}
			return done, fmt.Errorf("migrate: apply %s: %w", m.Name, err)
		}
		done = append(done, m.Version)
	}
	// On a distributed schema, what the migrations created or replaced is
	// laid out and set for Citus as the rest is.
	if len(done) > 0 {
		if distributed, err := IsDistributed(ctx, conn); err != nil {
			return done, err
		} else if distributed {
			if err := Distribute(ctx, conn, 0); err != nil {
				return done, fmt.Errorf("migrate: %w", err)
			}
		}
	}
	return done, nil
}

// The upgrade rule: sidecars of two releases share a database while pods
// are upgraded one at a time, and the newer migrates the schema under the
// older. So a migration keeps every SQL call of the release before it
// working (old function signatures stay until the release after), and
// records the oldest schema whose sidecars may still run on it: the one
// before it. A sidecar whose newest migration is older than that refuses to
// start, rather than call functions that may be gone. The SQL API that
// applications call (queenside.send, send_json, send_batch,
// send_json_batch, ack_message, msgpack, send_max_message_bytes) is
// kept for good, not for one release: appapi_test.go holds its contract.

// LockTimeout bounds the wait of a migration for each lock it takes.
const LockTimeout = 500 * time.Millisecond

// ErrYielded means a migration gave way to running transactions (a lock it
// could not have in time, or a deadlock with them) and is to be tried
// again.
var ErrYielded = errors.New("migrate: gave way to running transactions")

func yielded(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "55P03" || pgErr.Code == "40P01")
}

// ErrNotOwner means the schema needs migrating and the session's role may
// not: only the schema's owner (or a superuser) migrates it, and only a
// role that may create schemas in the database creates it.
var ErrNotOwner = errors.New("migrate: this role may not migrate the schema")

// checkMayMigrate refuses, with ErrNotOwner, a session whose role may not
// migrate the schema; newest is this build's newest migration.
func checkMayMigrate(ctx context.Context, conn *pgx.Conn, newest int) error {
	var role, owner string
	var may bool
	err := conn.QueryRow(ctx, `
		SELECT session_user::text,
		       coalesce((SELECT nspowner::regrole::text FROM pg_namespace WHERE nspname = $1), ''),
		       coalesce((SELECT pg_has_role(session_user, nspowner, 'MEMBER') FROM pg_namespace WHERE nspname = $1),
		                has_database_privilege(current_database(), 'CREATE'))
		       OR (SELECT rolsuper FROM pg_roles WHERE rolname = session_user)`, Name).Scan(&role, &owner, &may)
	if err != nil {
		return fmt.Errorf("migrate: read who owns the schema: %w", err)
	}
	if may {
		return nil
	}
	if owner == "" {
		return fmt.Errorf("%w: schema %s does not exist and role %s may not create it; run `queenside migrate` as a role that may (it becomes the schema's owner)",
			ErrNotOwner, Name, role)
	}
	at := "not at this build's version"
	var version *int32
	if err := conn.QueryRow(ctx, "SELECT max(version) FROM "+Name+".schema_migrations").Scan(&version); err == nil && version != nil {
		at = fmt.Sprintf("at version %d", *version)
	}
	return fmt.Errorf("%w: schema %s is %s and this build needs %d; role %s may not migrate it: its owner %s does (`queenside migrate`, or a sidecar logged in as %s)",
		ErrNotOwner, Name, at, newest, role, owner, owner)
}

// ErrSchemaTooNew means the database's schema is more than one release
// ahead of this build.
var ErrSchemaTooNew = errors.New("migrate: the database's schema is too new for this build")

// checkNotTooOld refuses a build whose newest migration is below what the
// newest applied migration allows.
func checkNotTooOld(ctx context.Context, conn *pgx.Conn, newest int) error {
	var version, oldest int32
	err := conn.QueryRow(ctx, `SELECT version, coalesce(oldest_compatible, version - 1)
		FROM queenside.schema_migrations ORDER BY version DESC LIMIT 1`).Scan(&version, &oldest)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("migrate: read the schema version: %w", err)
	}
	if int(oldest) > newest {
		return fmt.Errorf("%w: the database is at schema version %d, which sidecars knowing version %d or later may use; "+
			"this build knows versions up to %d: run a newer queenside (a downgrade across more than one release is not supported)",
			ErrSchemaTooNew, version, oldest, newest)
	}
	return nil
}

// ErrSchemaMismatch means a migration was applied in a form other than
// the one embedded in this build: the schema is not what the code expects.
var ErrSchemaMismatch = errors.New("migrate: schema mismatch")

// upToDate tells whether every migration of ms is applied as it is here
// and the bookkeeping is this build's. Any doubt (no table yet, an older
// bookkeeping, an error) answers false: the caller then migrates under the
// lock, which checks everything again.
func upToDate(ctx context.Context, conn *pgx.Conn, ms []Migration) bool {
	var columns int
	err := conn.QueryRow(ctx, `SELECT count(*) FROM information_schema.columns
		WHERE table_schema = 'queenside' AND table_name = 'schema_migrations'
		  AND column_name IN ('checksum', 'oldest_compatible')`).Scan(&columns)
	if err != nil || columns != 2 {
		return false
	}
	applied, err := appliedChecksums(ctx, conn)
	if err != nil {
		return false
	}
	for _, m := range ms {
		if applied[m.Version] != m.Checksum() {
			return false
		}
	}
	return true
}

// Checksum identifies a migration's exact text.
func (m Migration) Checksum() string {
	sum := sha256.Sum256([]byte(m.SQL))
	return hex.EncodeToString(sum[:])
}

// appliedChecksums maps each applied version to the checksum recorded
// with it ("" when none was).
func appliedChecksums(ctx context.Context, conn *pgx.Conn) (map[int]string, error) {
	rows, err := conn.Query(ctx, "SELECT version, coalesce(checksum, '') FROM queenside.schema_migrations")
	if err != nil {
		return nil, fmt.Errorf("migrate: list applied: %w", err)
	}
	applied := map[int]string{}
	var version int32
	var sum string
	_, err = pgx.ForEachRow(rows, []any{&version, &sum}, func() error {
		applied[int(version)] = sum
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("migrate: list applied: %w", err)
	}
	return applied, nil
}
