// Package pgserver manages a throwaway local PostgreSQL server: one cluster
// in a working directory, reachable only over a Unix socket, with trust
// authentication for the postgres user.
//
// It is used by `queenside dev` (which keeps the cluster under ./.queenside
// and reuses it on the next run), by the test harness in sidecar/pgtest, and
// by tools that need to stop and restart a server to inject faults.
//
// The server is started with pg_ctl, which daemonises the postmaster in its
// own session: it outlives the Go process, is not hit by a terminal's SIGINT,
// and can be stopped by any process that knows the data directory.
package pgserver
