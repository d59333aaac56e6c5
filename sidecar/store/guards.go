package store

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"golang.org/x/sys/unix"
)

// Guards on every connection, so that a peer that vanished without a word
// (a frozen host, a partition dropping packets) is found and let go of on
// both ends within a bound derived from the database timeout T:
//
//   - here, connecting takes at most T; TCP keepalive probes an idle
//     connection after T and gives up after five unanswered probes T/5
//     apart (2T in all); and TCP_USER_TIMEOUT ends a connection whose sent
//     data stays unacknowledged for T. A call in flight is ended sooner,
//     by Bound: its statement is cancelled, and its connection closed
//     unless PostgreSQL confirms the cancel within CancelGrace.
//   - on PostgreSQL, the same keepalive and user timeout on its end of the
//     socket, so that the session of a sidecar partitioned away ends within
//     2T and frees its locks (the janitor's advisory lock among them);
//     idle_in_transaction_session_timeout ends a transaction left open
//     between two statements for T/5, freeing its partition and cursor row
//     locks (the sidecar sends a transaction's next statement as soon as
//     it has the last one's answer, or all of them at once, so only a
//     vanished sidecar leaves one idle that long: every other sidecar's
//     pushes to those partitions wait behind it); and
//     client_connection_check_interval makes a statement that
//     runs on (say, waiting for a lock) notice within T/5 that its client
//     has hung up, rather than finish for no one.
//
// The server's settings go as startup parameters, which a connection
// pooler refuses (PgBouncer: "unsupported startup parameter"): they are
// sent on the pool's connections only when no pooler is in the path (no
// session URL set apart), and on the session and listener connections,
// which should reach PostgreSQL itself; where a pooler stands there all
// the same (a session pooler for the listener, or a mistake the session's
// check will name), they connect again without them (connect). Behind a
// pooler, its own settings play that part (README, Operations).
type guards struct {
	timeout time.Duration
}

// keepaliveProbes is how many unanswered keepalive probes end a connection.
const keepaliveProbes = 5

// probeInterval is the time between two keepalive probes, and between two
// looks of a running statement at its client: T/5, at least a second (the
// unit of PostgreSQL's keepalive settings).
func (g guards) probeInterval() time.Duration {
	return max(g.timeout/keepaliveProbes, time.Second).Truncate(time.Second)
}

// DeadPeerBound is how long a connection whose peer vanished lives on at
// most, on either end: the keepalive's idle time and its probes.
func DeadPeerBound(timeout time.Duration) time.Duration {
	g := guards{timeout}
	return g.timeout.Truncate(time.Second) + keepaliveProbes*g.probeInterval()
}

// IdleTransactionTimeout is how long PostgreSQL lets a session of the
// sidecar's sit idle inside a transaction, holding its locks, before it
// ends the session (idle_in_transaction_session_timeout).
func IdleTransactionTimeout(timeout time.Duration) time.Duration {
	return guards{timeout}.probeInterval()
}

// apply sets the client-side guards on cfg, and the server-side ones when
// serverSide (the connection reaches PostgreSQL itself). Settings the URL
// gives are kept.
func (g guards) apply(cfg *pgconn.Config, serverSide bool) {
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = g.timeout
	}
	dialer := &net.Dialer{
		Timeout: cfg.ConnectTimeout,
		KeepAliveConfig: net.KeepAliveConfig{
			Enable: true, Idle: g.timeout, Interval: g.probeInterval(), Count: keepaliveProbes,
		},
		Control: g.control,
	}
	cfg.DialFunc = dialer.DialContext // the multi-host fallbacks' too
	if !serverSide {
		return
	}
	for _, sg := range serverGuards {
		if _, given := cfg.RuntimeParams[sg.name]; !given {
			cfg.RuntimeParams[sg.name] = sg.value(g)
		}
	}
}

// serverGuards are the server's settings the guards set, and their values
// in PostgreSQL's units.
var serverGuards = []struct {
	name  string
	value func(guards) string
}{
	{"idle_in_transaction_session_timeout", func(g guards) string { return millis(IdleTransactionTimeout(g.timeout)) }},
	{"tcp_keepalives_idle", func(g guards) string { return secs(max(g.timeout, time.Second)) }},
	{"tcp_keepalives_interval", func(g guards) string { return secs(g.probeInterval()) }},
	{"tcp_keepalives_count", func(guards) string { return strconv.Itoa(keepaliveProbes) }},
	{"tcp_user_timeout", func(g guards) string { return millis(g.timeout) }},
	{"client_connection_check_interval", func(g guards) string { return millis(g.probeInterval()) }},
}

func secs(d time.Duration) string   { return strconv.Itoa(int(d / time.Second)) }
func millis(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }

// control sets TCP_USER_TIMEOUT on a TCP socket before it connects: sent
// data unacknowledged for the timeout ends the connection, where Linux
// would otherwise retransmit for about fifteen minutes.
func (g guards) control(network, _ string, rc syscall.RawConn) error {
	switch network {
	case "tcp", "tcp4", "tcp6":
	default:
		return nil // a Unix socket has no peer to lose
	}
	var serr error
	err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, int(g.timeout.Milliseconds()))
	})
	if err != nil {
		return err
	}
	return serr
}

// cancelFirst has a call cut short ask PostgreSQL to cancel its statement
// and wait CancelGrace for the confirmation before the connection is
// given up (pgx's default gives it up at once): see CancelGrace. Not for
// the listener, whose waits for a notification are cut short by design
// and run no statement to cancel.
func (g guards) cancelFirst(cfg *pgconn.Config) {
	grace := CancelGrace(g.timeout)
	// pgx pauses after a cancel request before the call returns (so that
	// the cancel cannot reach the connection's next statement): the
	// pause is part of the grace.
	wait := max(grace-cancelPause, grace/2)
	cfg.BuildContextWatcherHandler = func(c *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.CancelRequestContextWatcherHandler{Conn: c, DeadlineDelay: wait}
	}
}

// cancelPause is pgx's pause after a cancel request
// (CancelRequestContextWatcherHandler).
const cancelPause = 100 * time.Millisecond

// connect opens a connection of its own with cfg, guards included; a
// pooler that refuses them is connected to again without them.
func (s *Store) connect(ctx context.Context, cfg *pgx.ConnConfig) (*pgx.Conn, error) {
	conn, err := pgx.ConnectConfig(ctx, cfg.Copy())
	var pgErr *pgconn.PgError
	if err == nil || !errors.As(err, &pgErr) || pgErr.Code != "08P01" || !strings.Contains(pgErr.Message, "unsupported startup parameter") {
		return conn, err
	}
	s.log.Info("a connection pooler refused PostgreSQL's settings that end a vanished client's session; connected without them: set the pooler's own", "host", cfg.Host, "refused", pgErr.Message)
	bare := cfg.Copy()
	for _, sg := range serverGuards {
		delete(bare.RuntimeParams, sg.name)
	}
	return pgx.ConnectConfig(ctx, bare)
}
