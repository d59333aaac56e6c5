package store

import (
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

func TestConnectionPlan(t *testing.T) {
	const direct, bouncer = "postgres://u@db:5432/q", "postgres://u@bouncer:6432/q"
	cases := []struct {
		name    string
		opts    Options
		pool    int
		session string
		listen  string
		mode    pgx.QueryExecMode
		given   bool
		err     string
	}{
		{name: "defaults", opts: Options{URL: direct}, pool: 4, session: direct, listen: direct, mode: pgx.QueryExecModeCacheStatement},
		{name: "behind a pooler", opts: Options{URL: bouncer, SessionURL: direct}, pool: 4, session: direct, listen: direct, mode: pgx.QueryExecModeCacheDescribe},
		{name: "no listener", opts: Options{URL: bouncer, SessionURL: direct, ListenURL: ListenNone, Connections: 3}, pool: 2, session: direct, mode: pgx.QueryExecModeCacheDescribe},
		{name: "listener apart", opts: Options{URL: direct, ListenURL: bouncer, Connections: 3}, pool: 1, session: direct, listen: bouncer, mode: pgx.QueryExecModeCacheStatement},
		{name: "mode in the URL", opts: Options{URL: direct + "?default_query_exec_mode=exec", SessionURL: direct}, pool: 4, session: direct, listen: direct, given: true},
		{name: "mode named", opts: Options{URL: direct, QueryExecMode: "simple_protocol"}, pool: 4, session: direct, listen: direct, mode: pgx.QueryExecModeSimpleProtocol},
		{name: "too few", opts: Options{URL: direct, Connections: 2}, err: "at least 3"},
		{name: "unknown mode", opts: Options{URL: direct, QueryExecMode: "fast"}, err: "query exec mode"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, err := c.opts.plan()
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err %v, want one saying %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p.pool != c.pool || p.sessionURL != c.session || p.listenURL != c.listen || p.modeGiven != c.given || (!c.given && p.mode != c.mode) {
				t.Fatalf("plan %+v", p)
			}
		})
	}
}
