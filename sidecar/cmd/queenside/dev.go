package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/urfave/cli/v2"

	queenside "github.com/queenside/queenside/clients/go"
	"github.com/queenside/queenside/schema"
	"github.com/queenside/queenside/sidecar"
	"github.com/queenside/queenside/sidecar/pgserver"
)

// devDatabase is the database `queenside dev` creates in its own server.
const devDatabase = "queenside"

func devCommand() *cli.Command {
	return &cli.Command{
		Name:  "dev",
		Usage: "run a sidecar for development, with a throwaway PostgreSQL under --dir unless --database-url is given",
		Flags: append(daemonFlags(queenside.DevSocket, ".queenside/spool"),
			&cli.StringFlag{Name: "dir", Value: ".queenside", Usage: "working directory for the PostgreSQL cluster (reused across runs); the socket and the spool go there too unless --socket and --spool-dir say otherwise"},
			&cli.StringFlag{Name: "database-url", Usage: "use this database instead of starting one", EnvVars: []string{"QUEENSIDE_DATABASE_URL"}},
			&cli.BoolFlag{Name: "reset", Usage: "drop the development database first, with all its queues and messages"},
		),
		Action: runDev,
	}
}

func runDev(c *cli.Context) error {
	cfg, err := daemonConfig(c)
	if err != nil {
		return err
	}
	// Everything of one dev sidecar lives under --dir, so that several can
	// run side by side (each in a directory of its own).
	if dir := c.String("dir"); c.IsSet("dir") {
		if !c.IsSet("socket") {
			cfg.SocketPath = filepath.Join(dir, "queenside.sock")
		}
		if !c.IsSet("spool-dir") {
			cfg.SpoolDir = filepath.Join(dir, "spool")
		}
	}
	dir, err := filepath.Abs(c.String("dir"))
	if err != nil {
		return err
	}
	socket, err := filepath.Abs(cfg.SocketPath)
	if err != nil {
		return err
	}
	dashboard := ""
	if cfg.HTTPAddr != "" {
		dashboard = fmt.Sprintf("http://%s/", dashboardHost(cfg.HTTPAddr))
	}
	// Before anything is touched: a second dev on a directory in use would
	// stop the first one's PostgreSQL.
	lock, err := lockDevDir(dir, socket, dashboard)
	if err != nil {
		return err
	}
	defer lock.release()
	signIn := dashboard
	if dashboard != "" && cfg.AdminTokenFile == "" {
		var token string
		if cfg.AdminTokenFile, token, err = devAdminToken(dir); err != nil {
			return err
		}
		signIn = dashboard + "#token=" + token
	}
	tuneGC()
	ctx, stop := signalContext()
	defer stop()
	cfg.DatabaseURL = c.String("database-url")
	if cfg.DatabaseURL == "" {
		cfg.Logger.Info("starting PostgreSQL", "dir", dir)
		pg, err := pgserver.Start(ctx, pgserver.Options{Dir: dir, Logger: cfg.Logger.Named("postgres")})
		if err != nil {
			return fmt.Errorf("start PostgreSQL: %w", err)
		}
		defer func() {
			cfg.Logger.Info("stopping PostgreSQL")
			if err := pg.Stop("fast"); err != nil {
				cfg.Logger.Error("stop PostgreSQL", "error", err)
			}
		}()
		if err := createDatabase(ctx, pg.URL("postgres"), devDatabase, c.Bool("reset")); err != nil {
			return err
		}
		cfg.DatabaseURL = pg.URL(devDatabase)
	}
	cfg.OnReady = func(*sidecar.Server) {
		board := ""
		if signIn != "" {
			board = "  dashboard: " + signIn + "\n"
			if signIn != dashboard {
				board += "             (signs you in with the admin token in " + filepath.Join(c.String("dir"), devTokenFile) + ")\n"
			}
		}
		self := invokedAs()
		fmt.Fprintf(os.Stderr, `
queenside is serving on %s
  database: %s
%s  try:      %s push --queue hello --payload '{"hi": 1}'
            %s stats --queue hello
  %s
Ctrl-C stops the sidecar and PostgreSQL.

`, socket, cfg.DatabaseURL, board, self, self, socketHint(socket))
	}
	err = sidecar.Run(ctx, cfg)
	if errors.Is(err, schema.ErrSchemaMismatch) && c.String("database-url") == "" {
		return fmt.Errorf("%w\nThe development database was made by another version: `queenside dev --reset` recreates it", err)
	}
	return err
}

// socketHint tells how the CLI finds the socket: on its own from this
// directory when the socket is where it looks, else by QUEENSIDE_SOCKET.
func socketHint(socket string) string {
	if found, err := filepath.Abs(queenside.DevSocket); err == nil && found == socket {
		return fmt.Sprintf("(the CLI finds ./%s from this directory; elsewhere export QUEENSIDE_SOCKET=%s)", queenside.DevSocket, socket)
	}
	return "(the CLI needs: export QUEENSIDE_SOCKET=" + socket + ")"
}

// createDatabase creates name unless it exists: a second run reuses it.
// With reset, an existing one is dropped first.
func createDatabase(ctx context.Context, adminURL, name string, reset bool) error {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	defer conn.Close(ctx)
	if reset {
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			return fmt.Errorf("drop database %s: %w", name, err)
		}
	}
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		return fmt.Errorf("look for database %s: %w", name, err)
	}
	if exists {
		return nil
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return fmt.Errorf("create database %s: %w", name, err)
	}
	return nil
}

// invokedAs is how to run this binary again from where it was started: as
// it was invoked when that named a path (bin/queenside after make run),
// else by its name, found on the PATH.
func invokedAs() string {
	if strings.Contains(os.Args[0], string(os.PathSeparator)) {
		return filepath.Clean(os.Args[0])
	}
	return filepath.Base(os.Args[0])
}

// dashboardHost is where a browser on this machine reaches addr: ":8080"
// listens on every interface, and localhost is one of them.
func dashboardHost(addr string) string {
	if strings.HasPrefix(addr, ":") {
		return "localhost" + addr
	}
	return addr
}
