package store

import (
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Options say how a sidecar reaches PostgreSQL, and how many connections
// it may open there: each pod runs a sidecar, so the database sees pods
// times that many.
type Options struct {
	// URL is where pushes, pops and acks go: PostgreSQL, or a pooler in
	// transaction mode (PgBouncer) in front of it. libpq's multi-host form
	// (host=a,b and target_session_attrs=read-write) follows a primary.
	URL string
	// SessionURL is PostgreSQL itself, for what keeps a session across
	// transactions: the janitor's advisory lock and migrations, and LISTEN
	// unless ListenURL says otherwise. "" is URL.
	SessionURL string
	// ListenURL is where the notification listener connects; "" is
	// SessionURL, and ListenNone asks for no listener: pops waiting on an
	// empty queue then find new messages by looking every second.
	ListenURL string
	// Connections bounds every connection this sidecar opens to the
	// database: the pool, the session connection and the listener. 0 is
	// DefaultConnections.
	Connections int
	// QueryExecMode is pgx's way of sending statements: QueryModeAuto
	// (""), or one of pgx's names ("cache_statement", "cache_describe",
	// "describe_exec", "exec", "simple_protocol").
	QueryExecMode string
	// ApplicationName names this sidecar's sessions in pg_stat_activity
	// ("queenside/<sidecar id>"), so that an operator, and the dashboard's
	// cluster page, can tell the sidecars apart. "" is "queenside".
	ApplicationName string
	// Timeout bounds every call to the database (Bound) and the time a
	// connection may take to open, and derives the guards that find a
	// vanished peer (guards.go). 0 is DefaultTimeout.
	Timeout time.Duration
	// OnNotice, when set, receives the notices the server sends the
	// pool's connections: diagnostics, such as what a Citus coordinator
	// sends its workers under citus.log_remote_commands.
	OnNotice func(*pgconn.Notice)
}

const (
	// DefaultConnections is four for the pool, one session and one
	// listener.
	DefaultConnections = 6
	// ListenNone as ListenURL turns the listener off.
	ListenNone = "none"
	// QueryModeAuto keeps what the URL's default_query_exec_mode names; or
	// else, with a SessionURL apart from URL (a pooler in the path),
	// describes statements without preparing them by name (cache_describe),
	// which a transaction pooler allows; or else prepares and caches them
	// per connection (cache_statement), pgx's default.
	QueryModeAuto = "auto"
)

// applicationName is the name of sessions not given one in Options; every
// sidecar's name starts with it.
const applicationName = "queenside"

// connPlan is what Options come to.
type connPlan struct {
	name       string // application_name
	pool       int    // connections of the pool
	sessionURL string
	listenURL  string // "" for none
	onNotice   func(*pgconn.Notice)
	mode       pgx.QueryExecMode
	modeGiven  bool // by the options or the URL: leave the URL's alone
	guards     guards
	// pooled: a pooler may stand between the pool and PostgreSQL (a
	// session URL is set apart), so the pool's connections carry no
	// server settings, which a pooler would refuse.
	pooled bool
}

func (o Options) plan() (connPlan, error) {
	p := connPlan{name: o.ApplicationName, sessionURL: o.SessionURL, listenURL: o.ListenURL, onNotice: o.OnNotice,
		guards: guards{timeout: o.Timeout}, pooled: o.SessionURL != "" && o.SessionURL != o.URL}
	if o.Timeout < 0 {
		return p, fmt.Errorf("database timeout %v: want more than 0", o.Timeout)
	}
	if p.guards.timeout == 0 {
		p.guards.timeout = DefaultTimeout
	}
	if p.name == "" {
		p.name = applicationName
	}
	if p.sessionURL == "" {
		p.sessionURL = o.URL
	}
	switch p.listenURL {
	case "":
		p.listenURL = p.sessionURL
	case ListenNone:
		p.listenURL = ""
	}
	total := o.Connections
	if total == 0 {
		total = DefaultConnections
	}
	others := 1 // the session connection
	if p.listenURL != "" {
		others++
	}
	if total < others+1 {
		return p, fmt.Errorf("%d database connections: at least %d are needed (a pool of one, the session connection%s)",
			total, others+1, map[bool]string{true: " and the listener", false: ""}[p.listenURL != ""])
	}
	p.pool = total - others
	switch mode := strings.ToLower(o.QueryExecMode); mode {
	case "", QueryModeAuto:
		switch {
		case strings.Contains(o.URL, "default_query_exec_mode"):
			p.modeGiven = true // pgx reads it from the URL
		case p.pooled:
			p.mode = pgx.QueryExecModeCacheDescribe
		default:
			p.mode = pgx.QueryExecModeCacheStatement
		}
	default:
		m, ok := queryExecModes[mode]
		if !ok {
			return p, fmt.Errorf("query exec mode %q: want auto, cache_statement, cache_describe, describe_exec, exec or simple_protocol", o.QueryExecMode)
		}
		p.mode = m
	}
	return p, nil
}

var queryExecModes = map[string]pgx.QueryExecMode{
	"cache_statement": pgx.QueryExecModeCacheStatement,
	"cache_describe":  pgx.QueryExecModeCacheDescribe,
	"describe_exec":   pgx.QueryExecModeDescribeExec,
	"exec":            pgx.QueryExecModeExec,
	"simple_protocol": pgx.QueryExecModeSimpleProtocol,
}

// apply sets the pool's size, exec mode, application name and guards.
func (p connPlan) apply(cfg *pgxpool.Config) {
	cfg.MaxConns = int32(p.pool)
	p.guards.apply(&cfg.ConnConfig.Config, !p.pooled)
	p.guards.cancelFirst(&cfg.ConnConfig.Config)
	cfg.BeforeClose = dropGivenUp
	if p.onNotice != nil {
		cfg.ConnConfig.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) { p.onNotice(n) }
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = p.name
	if !p.modeGiven {
		cfg.ConnConfig.DefaultQueryExecMode = p.mode
	}
}

// dropGivenUp closes at once the socket of a connection pgx gave up (a
// call cut short whose cancel PostgreSQL did not confirm), rather than
// letting pgx read it until the server closes it. The pool counts the
// connection against its size until pgx is done with it, and a server
// that stopped answering never closes it: pgx then reads for 15 s. On
// Citus, with one worker frozen, the coordinator's sessions waiting on it
// are alive but silent, and every call to that worker that timed out held
// a connection of the pool for those 15 s, until the calls to the other
// workers found none free. The session on the server ends as it finds
// its client gone (client_connection_check_interval, guards.go).
func dropGivenUp(c *pgx.Conn) {
	if c.IsClosed() {
		c.PgConn().Conn().Close() //nolint:errcheck // it is being given up
	}
}

// QueryExecMode is the way the pool sends statements, as the flag names it.
func (s *Store) QueryExecMode() string {
	mode := s.pool.Config().ConnConfig.DefaultQueryExecMode
	for name, m := range queryExecModes {
		if m == mode {
			return name
		}
	}
	return mode.String()
}

// PoolSize is how many connections the pool may hold.
func (s *Store) PoolSize() int { return int(s.pool.Config().MaxConns) }

// Listening tells whether a listener hears other sidecars' pushes.
func (s *Store) Listening() bool { return s.listen != nil }
