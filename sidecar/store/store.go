// Package store runs queenside's transactions against PostgreSQL. Every
// guarantee lives in SQL and row locks (see schema/migrations); the sidecar's
// memory holds nothing that decides a verdict.
package store

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/queenside/queenside/schema"
	"github.com/queenside/queenside/sidecar/groupcommit"
)

// Store is a pool of connections to the shared database.
type Store struct {
	pool *pgxpool.Pool
	// session is how to reach PostgreSQL itself for the janitor's lock and
	// migrations, on a connection made for the purpose and closed after it,
	// so that a hundred idle sidecars hold none; listen is where LISTEN
	// goes (nil for nowhere: waiting pops then look every second).
	session   *pgx.ConnConfig
	listen    *pgx.ConnConfig
	localWake func(queue string) // see OnLocalPush
	log       hclog.Logger
	timeout   time.Duration // see Bound
	timeouts  atomic.Uint64 // calls Bound ended
	dedup     dedupStates   // see Deduplicates
	parts     idCache[partitionKey, int64]
	groups    idCache[groupKey, groupIDs]
	layout    layout
	hung      hungWorkers // of pushes, on Citus
	wakes     *wakeSender // of calls routed to a worker
	trips     *roundTrips
	pushes    *groupcommit.Scheduler[*pushJob]  // group commit of pushes
	rounds    *groupcommit.Scheduler[*roundJob] // of pops and acks
	stop      context.CancelFunc
}

// Open connects to the database at url with the default Options.
func Open(ctx context.Context, url string, log hclog.Logger) (*Store, error) {
	return OpenWith(ctx, Options{URL: url}, log)
}

// OpenWith connects as opts says. It does not migrate; call Migrate.
func OpenWith(ctx context.Context, opts Options, log hclog.Logger) (*Store, error) {
	if log == nil {
		log = hclog.NewNullLogger()
	}
	plan, err := opts.plan()
	if err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	cfg, err := pgxpool.ParseConfig(opts.URL)
	if err != nil {
		return nil, fmt.Errorf("open store: parse database url: %w", err)
	}
	plan.apply(cfg)
	trips := &roundTrips{}
	cfg.ConnConfig.Tracer = trips
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	session, err := plan.connConfig(plan.sessionURL, true)
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("open store: parse session database url: %w", err)
	}
	var listen *pgx.ConnConfig
	if plan.listenURL != "" {
		if listen, err = plan.connConfig(plan.listenURL, false); err != nil {
			pool.Close()
			return nil, fmt.Errorf("open store: parse listen database url: %w", err)
		}
	}
	workers, stop := context.WithCancel(context.Background())
	s := &Store{pool: pool, session: session, listen: listen, log: log, timeout: plan.guards.timeout,
		trips: trips, stop: stop, wakes: newWakeSender()}
	s.pushes, s.rounds = s.newPushScheduler(), s.newRoundScheduler()
	s.pushes.Start(workers)
	s.rounds.Start(workers)
	go s.sendWakes(workers)
	return s, nil
}

// Close stops the push and round workers and releases every connection.
func (s *Store) Close() {
	s.stop()
	s.pool.Close()
}

// Migrate applies pending migrations under the shared advisory lock.
func (s *Store) Migrate(ctx context.Context) ([]int, error) {
	conn, err := s.connectSession(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}
	defer closeQuietly(conn)
	return schema.MigrateVersions(ctx, conn)
}

// connConfig is url's configuration for a connection of its own, to
// PostgreSQL itself; with statements, for one that runs them (the session,
// not the listener: see cancelFirst).
func (p connPlan) connConfig(url string, statements bool) (*pgx.ConnConfig, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	cfg.RuntimeParams["application_name"] = p.name
	p.guards.apply(&cfg.Config, true)
	if statements {
		p.guards.cancelFirst(&cfg.Config)
	}
	return cfg, nil
}

// connectSession opens a connection to PostgreSQL itself, for one job.
func (s *Store) connectSession(ctx context.Context) (*pgx.Conn, error) {
	return s.connect(ctx, s.session)
}

// MissingPrivileges names the privileges the sidecar's role lacks to
// reach the schema ("EXECUTE on queenside.push(...), ..."), "" when it has
// them all. A role that is not the owner reaches the tables only through
// the schema's SECURITY DEFINER functions, which check its grants; one
// whose EXECUTE on them was revoked serves nothing, however healthy the
// database is, and what it was not granted is refused call by call.
func (s *Store) MissingPrivileges(ctx context.Context) (string, error) {
	var missing *string
	err := s.pool.QueryRow(ctx, `
		SELECT CASE WHEN NOT has_schema_privilege($1, 'USAGE') THEN format('USAGE on schema %I', $1::text)
		            ELSE (SELECT string_agg(format('EXECUTE on %s', p.oid::regprocedure), ', ' ORDER BY p.proname, p.oid)
		                    FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
		                   WHERE n.nspname = $1 AND p.prosecdef AND NOT has_function_privilege(p.oid, 'EXECUTE')) END`,
		schema.Name).Scan(&missing)
	if err != nil || missing == nil {
		return "", err
	}
	return *missing, nil
}

// Ping performs a real round trip and returns how long it took.
func (s *Store) Ping(ctx context.Context) (time.Duration, error) {
	start := time.Now()
	var one int
	if err := s.pool.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
		return 0, fmt.Errorf("ping database: %w", err)
	}
	return time.Since(start), nil
}
