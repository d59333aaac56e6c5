package sidecar

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/go-hclog"

	"github.com/queenside/queenside/schema"
	"github.com/queenside/queenside/sidecar/buffer"
	"github.com/queenside/queenside/sidecar/crypt"
	"github.com/queenside/queenside/sidecar/janitor"
	"github.com/queenside/queenside/sidecar/store"
	"github.com/queenside/queenside/sidecar/telemetry"
	"github.com/queenside/queenside/spool"
)

// DefaultShutdownGrace is how long a drain waits for requests in flight.
const DefaultShutdownGrace = 25 * time.Second

// DefaultRetentionInterval is the time between two retention rounds.
const DefaultRetentionInterval = janitor.DefaultInterval

// Config is everything `queenside serve` is told.
type Config struct {
	SocketPath  string
	SocketMode  os.FileMode
	DatabaseURL string
	// Database says how else to reach PostgreSQL (its URL is DatabaseURL):
	// a session URL past a pooler, the listener, the connection bound.
	Database      store.Options
	SpoolDir      string
	SpoolMaxBytes int64 // 0: the spool's default, 1 GiB
	HTTPAddr      string
	MaxFrameBytes int
	// MaxFrameMemory bounds what the frames in flight hold together (the
	// Options field of the same name).
	MaxFrameMemory int64
	AllowUIDs      []uint32
	ShutdownGrace  time.Duration
	// RetentionInterval is the time between two rounds of the janitor,
	// which deletes what retention allows; 0 runs no janitor here.
	RetentionInterval time.Duration
	// Profiling serves Go's pprof endpoints under /debug/pprof/ on the HTTP
	// side port, for finding where the time goes.
	Profiling bool
	// AdminTokenFile holds the tokens the dashboard's writes need, one
	// `<name>:<token>` a line or one bare token; "" refuses every write.
	AdminTokenFile string
	// ReadTokenFile holds tokens that may only read, in the same form;
	// when set, the dashboard's reads need a token too.
	ReadTokenFile string
	// EncryptionKeysFile holds the keys that seal the payloads of queues
	// with encryptPayloads: one `<id>:<base64 of 32 bytes>` a line, the
	// first one writing. Read again on SIGHUP. "" gives no key.
	EncryptionKeysFile string
	Logger             hclog.Logger
	// OnReady, when set, is called once the socket accepts connections.
	OnReady func(srv *Server)
	// HistoryInterval is the time between two samples of the dashboard's
	// history (0: 5 s; below 0: no history).
	HistoryInterval time.Duration
}

// Run serves until ctx ends, then drains within the grace period. The
// socket is served even while PostgreSQL is unreachable: migrations are
// retried in the background, and operations answer unavailable meanwhile,
// so a pod restarted during a database outage does not crash-loop.
func Run(ctx context.Context, cfg Config) error {
	log := cfg.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	if cfg.ShutdownGrace <= 0 {
		cfg.ShutdownGrace = DefaultShutdownGrace
	}
	// Deferred first, so it runs last: the spans of the drain are flushed.
	stopTracing := telemetry.Setup(ctx, Version, log.Named("tracing"))
	defer stopTracing()
	tokens, err := readTokens(cfg.AdminTokenFile, cfg.ReadTokenFile)
	if err != nil {
		return err
	}
	var keys *crypt.Keyring
	if cfg.EncryptionKeysFile != "" {
		if keys, err = crypt.Load(cfg.EncryptionKeysFile); err != nil {
			return fmt.Errorf("--encryption-keys: %w", err)
		}
		log.Info("encryption keys", "ids", keys.IDs(), "writing", keys.WriterID())
		go reloadKeysOnHangup(ctx, keys, cfg.EncryptionKeysFile, log)
	}
	id := uuid.NewString()
	dbOpts := cfg.Database
	dbOpts.URL = cfg.DatabaseURL
	dbOpts.ApplicationName = "queenside/" + id
	st, err := store.OpenWith(ctx, dbOpts, log.Named("store"))
	if err != nil {
		return err
	}
	log.Info("database", "pool_connections", st.PoolSize(), "query_exec_mode", st.QueryExecMode(), "listener", st.Listening())
	defer st.Close()
	var buf *buffer.Buffer
	if cfg.SpoolDir != "" {
		sp, err := spool.Open(cfg.SpoolDir, spool.Options{MaxBytes: cfg.SpoolMaxBytes, Logger: log.Named("spool")})
		if err != nil {
			return fmt.Errorf("open the spool: %w", err)
		}
		defer func() {
			if err := sp.Close(); err != nil {
				log.Error("closing the spool", "error", err)
			}
		}()
		if buf, err = buffer.New(sp, st, log.Named("spool")); err != nil {
			return err
		}
	}
	ln, err := ListenSocket(cfg.SocketPath, cfg.SocketMode)
	if err != nil {
		return err
	}
	srv := New(st, Options{MaxFrameBytes: cfg.MaxFrameBytes, MaxFrameMemory: cfg.MaxFrameMemory, AllowUIDs: cfg.AllowUIDs, Buffer: buf, Logger: log,
		ID: id, Tokens: tokens, Keys: keys, HistoryInterval: cfg.HistoryInterval})
	errc := make(chan error, 3)
	go func() { errc <- srv.Serve(ln) }()
	replayCtx, stopReplay := context.WithCancel(context.Background())
	replayDone := make(chan struct{})
	go func() {
		defer close(replayDone)
		if buf != nil {
			// Replay waits for the schema, and for push maintenance to end.
			buf.Run(replayCtx, func() bool { return srv.Ready() && !srv.control.pushMaintenance() })
		}
	}()
	// Migrating, then the janitor, which needs the migrated schema. Both
	// end with the drain, or with a fatal error of another part.
	background, stopBackground := context.WithCancel(ctx)
	defer stopBackground()
	backgroundDone := make(chan struct{})
	go func() {
		defer close(backgroundDone)
		if err := migrateUntilDone(background, st, log, srv.noteStartupError, migrateAttempt); err != nil {
			errc <- explainPooler(err, cfg)
			return
		}
		// The control state is read before the first push reaches the
		// database: a sidecar started during push maintenance spools.
		if err := readControlUntilDone(background, srv, log); err != nil {
			return
		}
		srv.SetReady()
		if cfg.RetentionInterval > 0 && background.Err() == nil {
			janitor.New(st, janitor.Options{Interval: cfg.RetentionInterval, Logger: log.Named("janitor")}).Run(background)
		}
	}()
	var hs *http.Server
	if cfg.HTTPAddr != "" {
		handler := srv.HTTPHandler()
		if cfg.Profiling {
			handler = srv.withProfiling(handler)
		}
		hs = &http.Server{Addr: cfg.HTTPAddr, Handler: handler, ReadHeaderTimeout: 5 * time.Second}
		go func() {
			if err := hs.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("http side port: %w", err)
			}
		}()
	}
	log.Info("serving", "socket", cfg.SocketPath, "sidecarId", srv.ID(), "version", Version, "http", cfg.HTTPAddr)
	if cfg.OnReady != nil {
		cfg.OnReady(srv)
	}

	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-errc:
		log.Error("stopping", "error", runErr)
	}
	log.Info("draining", "grace", cfg.ShutdownGrace)
	sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownGrace)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		log.Warn("grace period over; closing the remaining connections", "error", err)
	}
	srv.Close() // ends what still runs: the notification listener, late connections
	// Replay stops at a batch boundary; the spool is closed (fsynced) after.
	stopReplay()
	<-replayDone
	// A retention round in progress is cancelled: what it left is still due
	// for the next janitor.
	stopBackground()
	<-backgroundDone
	if hs != nil {
		hs.Shutdown(sctx) //nolint:errcheck // best effort on the way out
	}
	log.Info("stopped")
	return runErr
}

// migrateAttempt bounds one attempt to migrate: a database that stalls
// under it (a frozen host, a Citus worker that stops answering) ends the
// attempt, which is then made again, as when the database refuses.
const migrateAttempt = 30 * time.Second

// ownerPoll is how often a sidecar whose role may not migrate the schema
// looks again whether its owner has.
const ownerPoll = 2 * time.Second

// migrateUntilDone applies migrations, retrying while the database cannot
// be reached or an attempt does not finish within attempt (a stalled
// database, or the migration lock held that long by another sidecar). Any
// other failure is fatal: the schema is wrong. Each attempt's outcome goes
// to note, so that requests waiting meanwhile can say why.
func migrateUntilDone(ctx context.Context, st *store.Store, log hclog.Logger, note func(error), attempt time.Duration) error {
	backoff := 250 * time.Millisecond
	waitingForOwner := false
	for {
		mctx, cancel := context.WithTimeoutCause(ctx, attempt, &store.TimeoutError{After: attempt, By: "the bound on an attempt to migrate"})
		applied, err := st.Migrate(mctx)
		err = store.TimedOut(mctx, err) // cut by attempt: unavailable, retried below
		cancel()
		note(err)
		if err == nil {
			if len(applied) > 0 {
				log.Info("migrated the schema", "applied", applied)
			}
			return nil
		}
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, schema.ErrNotOwner) {
			// Said once; the owner's migration is watched for.
			if !waitingForOwner {
				log.Warn("waiting for the schema's owner to migrate it; serving meanwhile (pushes are spooled)", "reason", err)
				waitingForOwner = true
			}
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(ownerPoll):
			}
			continue
		}
		if errors.Is(err, schema.ErrYielded) {
			log.Info("a migration gave way to running transactions; trying again", "error", err)
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		if !store.IsUnavailable(err) {
			return err // already says it is about migrating
		}
		log.Warn("database unreachable; will migrate once it answers", "error", err, "retry_in", backoff)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 10*time.Second)
	}
}

// explainPooler turns a refusal to migrate through a connection pooler
// into what to do about it, naming the flag to set.
func explainPooler(err error, cfg Config) error {
	var pe *schema.PoolerError
	if !errors.As(err, &pe) {
		return err
	}
	const why = "migrations, the janitor's lock and LISTEN need a session, which a pooler in transaction mode does not keep"
	if s := cfg.Database.SessionURL; s != "" && s != cfg.DatabaseURL {
		return fmt.Errorf("--session-database-url leads to a connection pooler, not to PostgreSQL itself %s; %s: set it to PostgreSQL itself",
			pe.Evidence(), why)
	}
	return fmt.Errorf("--database-url leads to a connection pooler, not to PostgreSQL itself %s; %s: "+
		"set --session-database-url to PostgreSQL itself (the pooler stays right for --database-url)", pe.Evidence(), why)
}

// readControlUntilDone reads the control state, retrying while the
// database cannot be reached, until ctx ends.
func readControlUntilDone(ctx context.Context, srv *Server, log hclog.Logger) error {
	backoff := 250 * time.Millisecond
	for {
		rctx, cancel := srv.store.Bound(ctx)
		err := srv.refreshControl(rctx)
		cancel()
		if err == nil || ctx.Err() != nil {
			return ctx.Err()
		}
		log.Warn("could not read the maintenance state; retrying", "error", err, "in", backoff)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// reloadKeysOnHangup reads the key file again at each SIGHUP: a key added
// at its front becomes the writing key. A file that does not parse leaves
// the keys as they were.
func reloadKeysOnHangup(ctx context.Context, keys *crypt.Keyring, path string, log hclog.Logger) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			if err := keys.Reload(path); err != nil {
				log.Error("SIGHUP: the encryption keys were not reloaded; the previous ones stay", "error", err)
				continue
			}
			log.Info("SIGHUP: encryption keys reloaded", "ids", keys.IDs(), "writing", keys.WriterID())
		}
	}
}
