package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/queenside/queenside/protocol"
	"github.com/queenside/queenside/sidecar"
	"github.com/queenside/queenside/sidecar/history"
	"github.com/queenside/queenside/sidecar/store"
)

func serveCommand() *cli.Command {
	return &cli.Command{
		Name:  "serve",
		Usage: "run the sidecar against a PostgreSQL database",
		Flags: append(daemonFlags("/var/run/queenside/queenside.sock", "/var/lib/queenside/spool"),
			&cli.StringFlag{Name: "database-url", Usage: "PostgreSQL connection string", EnvVars: []string{"QUEENSIDE_DATABASE_URL"}, Required: true},
		),
		Action: func(c *cli.Context) error {
			cfg, err := daemonConfig(c)
			if err != nil {
				return err
			}
			cfg.DatabaseURL = c.String("database-url")
			tuneGC()
			ctx, stop := signalContext()
			defer stop()
			return sidecar.Run(ctx, cfg)
		},
	}
}

// daemonFlags are the flags shared by serve and dev.
func daemonFlags(socket, spool string) []cli.Flag {
	return append([]cli.Flag{
		&cli.StringFlag{Name: "socket", Value: socket, Usage: "Unix socket to serve", EnvVars: []string{"QUEENSIDE_SOCKET"}},
		&cli.StringFlag{Name: "socket-mode", Value: "0660", Usage: "file mode of the socket, in octal"},
		&cli.IntSliceFlag{Name: "allow-uid", Usage: "only serve peers with this user id (repeatable; default: any peer)"},
		&cli.StringFlag{Name: "spool-dir", Value: spool, Usage: "directory of the disk spool, on the pod's volume", EnvVars: []string{"QUEENSIDE_SPOOL_DIR"}},
		&cli.Int64Flag{Name: "spool-max-bytes", Value: 1 << 30, Usage: "bound on the spool's size; pushes then fail with spool_full, and nothing spooled is dropped", EnvVars: []string{"QUEENSIDE_SPOOL_MAX_BYTES"}},
		&cli.StringFlag{Name: "http-addr", Usage: "address of the HTTP probe port, e.g. :8080 (off when empty)", EnvVars: []string{"QUEENSIDE_HTTP_ADDR"}},
		&cli.IntFlag{Name: "max-frame-bytes", Value: protocol.DefaultMaxFrameBytes, Usage: "largest frame body accepted"},
		&cli.Int64Flag{Name: "max-frame-memory", Value: sidecar.DefaultMaxFrameMemory, Usage: "memory the frames read and not yet answered may hold together, over every connection; a frame waits for its share before it is read (at least --max-frame-bytes)"},
		&cli.DurationFlag{Name: "shutdown-grace", Value: sidecar.DefaultShutdownGrace, Usage: "how long SIGTERM waits for requests in flight"},
		&cli.DurationFlag{Name: "retention-interval", Value: sidecar.DefaultRetentionInterval, Usage: "time between two rounds of deleting what retention allows (0: never, on this sidecar)"},
		&cli.StringFlag{Name: "admin-token-file", Usage: "file of the tokens (16 characters or more; one <name>:<token> a line, or one bare token, optionally followed by a scope such as queues=billing.* rights=read,manage) that may read and write the dashboard's API as Authorization: Bearer; without it every write is refused", EnvVars: []string{"QUEENSIDE_ADMIN_TOKEN_FILE"}},
		&cli.StringFlag{Name: "read-token-file", Usage: "file of tokens, in the same form (a scope takes rights=read only), that may only read the dashboard's API; with it, reads need a token too (without it they are open, as /metrics is)", EnvVars: []string{"QUEENSIDE_READ_TOKEN_FILE"}},
		&cli.StringFlag{Name: "encryption-keys", Usage: "file of the keys that seal the payloads of queues with encryptPayloads: one <id>:<base64 of 32 bytes> a line, the first one writing (queenside keygen makes one); read again on SIGHUP", EnvVars: []string{"QUEENSIDE_ENCRYPTION_KEYS"}},
		&cli.BoolFlag{Name: "pprof", Usage: "serve Go's profiling endpoints under /debug/pprof/ on --http-addr, to admin tokens only"},
		&cli.StringFlag{Name: "session-database-url", Usage: "PostgreSQL itself, not a transaction pooler, for the janitor's advisory lock, migrations and LISTEN (default: --database-url)", EnvVars: []string{"QUEENSIDE_SESSION_DATABASE_URL"}},
		&cli.StringFlag{Name: "listen-database-url", Usage: "where the notification listener connects (default: --session-database-url); \"none\": no listener, waiting pops look every second", EnvVars: []string{"QUEENSIDE_LISTEN_DATABASE_URL"}},
		&cli.DurationFlag{Name: "database-timeout", Value: store.DefaultTimeout, Usage: "bound on every call to PostgreSQL and on opening a connection: a push not committed in time is spooled, other calls answer unavailable; derives the guards that find a vanished peer on both ends", EnvVars: []string{"QUEENSIDE_DATABASE_TIMEOUT"}},
		&cli.IntFlag{Name: "database-connections", Value: store.DefaultConnections, Usage: "PostgreSQL connections this sidecar opens at most, all told: the pool gets what the session connection and the listener leave", EnvVars: []string{"QUEENSIDE_DATABASE_CONNECTIONS"}},
		&cli.DurationFlag{Name: "history-interval", Value: history.DefaultInterval, Usage: "time between two samples of the dashboard's history, which needs --http-addr and reads every queue's counters from the database in one statement (0: keep no history)", EnvVars: []string{"QUEENSIDE_HISTORY_INTERVAL"}},
		&cli.StringFlag{Name: "query-exec-mode", Value: store.QueryModeAuto, Usage: "how statements are sent: auto (cache_describe when --session-database-url is set apart, as behind PgBouncer; else cache_statement), cache_statement, cache_describe, describe_exec, exec, simple_protocol", EnvVars: []string{"QUEENSIDE_QUERY_EXEC_MODE"}},
	}, logFlags()...)
}

func daemonConfig(c *cli.Context) (sidecar.Config, error) {
	log, err := newLogger(c)
	if err != nil {
		return sidecar.Config{}, err
	}
	mode, err := strconv.ParseUint(c.String("socket-mode"), 8, 32)
	if err != nil || mode > 0o777 {
		return sidecar.Config{}, fmt.Errorf("--socket-mode %q: want an octal file mode such as 0660", c.String("socket-mode"))
	}
	if n := c.Int("max-frame-bytes"); n < 1024 || n > 1<<30 {
		return sidecar.Config{}, fmt.Errorf("--max-frame-bytes %d: want 1024..%d", n, 1<<30)
	}
	if m, n := c.Int64("max-frame-memory"), c.Int("max-frame-bytes"); m < int64(n) {
		return sidecar.Config{}, fmt.Errorf("--max-frame-memory %d: want at least --max-frame-bytes (%d), or no frame of that size could be read", m, n)
	}
	if d := c.Duration("history-interval"); d < 0 {
		return sidecar.Config{}, fmt.Errorf("--history-interval %v: want 0 (no history) or more", d)
	}
	if d := c.Duration("database-timeout"); d < 100*time.Millisecond {
		return sidecar.Config{}, fmt.Errorf("--database-timeout %v: want 100ms or more", d)
	}
	if d := c.Duration("retention-interval"); d < 0 {
		return sidecar.Config{}, fmt.Errorf("--retention-interval %v: want 0 (off) or more", d)
	}
	for _, flag := range []string{"admin-token-file", "read-token-file"} {
		if c.String(flag) != "" && c.String("http-addr") == "" {
			return sidecar.Config{}, fmt.Errorf("--%s needs --http-addr: the dashboard is served there", flag)
		}
	}
	if c.Bool("pprof") && c.String("http-addr") == "" {
		return sidecar.Config{}, fmt.Errorf("--pprof needs --http-addr")
	}
	var uids []uint32
	for _, u := range c.IntSlice("allow-uid") {
		if u < 0 {
			return sidecar.Config{}, fmt.Errorf("--allow-uid %d: want a user id >= 0", u)
		}
		uids = append(uids, uint32(u))
	}
	return sidecar.Config{
		SocketPath:     c.String("socket"),
		SocketMode:     os.FileMode(mode),
		SpoolDir:       c.String("spool-dir"),
		SpoolMaxBytes:  c.Int64("spool-max-bytes"),
		HTTPAddr:       c.String("http-addr"),
		MaxFrameBytes:  c.Int("max-frame-bytes"),
		MaxFrameMemory: c.Int64("max-frame-memory"),
		AllowUIDs:      uids,
		ShutdownGrace:  c.Duration("shutdown-grace"),
		Profiling:      c.Bool("pprof"),
		Logger:         log,

		AdminTokenFile:     c.String("admin-token-file"),
		ReadTokenFile:      c.String("read-token-file"),
		EncryptionKeysFile: c.String("encryption-keys"),
		RetentionInterval:  c.Duration("retention-interval"),
		HistoryInterval:    historyInterval(c.Duration("history-interval")),
		Database: store.Options{
			SessionURL:    c.String("session-database-url"),
			ListenURL:     c.String("listen-database-url"),
			Connections:   c.Int("database-connections"),
			Timeout:       c.Duration("database-timeout"),
			QueryExecMode: c.String("query-exec-mode"),
		},
	}, nil
}

// signalContext ends on SIGINT or SIGTERM, which start a graceful drain.
func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

// historyInterval maps the flag's 0 (no history) to the sidecar's "below 0".
func historyInterval(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}
