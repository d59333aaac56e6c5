package sidecar

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/queenside/queenside/protocol"
)

func TestSocketModeDefaultsTo0660(t *testing.T) {
	ts := startSidecar(t, "", Options{})
	fi, err := os.Stat(ts.socket)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o660 || fi.Mode()&os.ModeSocket == 0 {
		t.Fatalf("socket mode %v, want a socket with 0660", fi.Mode())
	}
}

func TestStaleSocketIsReplaced(t *testing.T) {
	path := filepath.Join(shortTempDir(t), "stale.sock")
	old, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	old.SetUnlinkOnClose(false)
	old.Close() // the file stays, as after a crash
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("stale file missing: %v", err)
	}
	ln, err := ListenSocket(path, 0o600)
	if err != nil {
		t.Fatalf("stale socket not replaced: %v", err)
	}
	defer ln.Close()
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, want 0600", fi.Mode().Perm())
	}
}

func TestLiveSocketIsRefused(t *testing.T) {
	ts := startSidecar(t, "", Options{})
	_, err := ListenSocket(ts.socket, 0o660)
	if !errors.Is(err, ErrSocketInUse) {
		t.Fatalf("listening on a live socket: %v, want ErrSocketInUse", err)
	}
	stillServes(t, ts)
}

func TestNonSocketFileIsRefused(t *testing.T) {
	path := filepath.Join(shortTempDir(t), "file")
	if err := os.WriteFile(path, []byte("keep me"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ListenSocket(path, 0o660); err == nil {
		t.Fatal("a regular file was replaced by a socket")
	}
	if b, _ := os.ReadFile(path); string(b) != "keep me" {
		t.Fatal("the file was touched")
	}
}

func TestAllowUIDRestrictsPeers(t *testing.T) {
	me := uint32(os.Getuid())
	refused := startSidecar(t, "", Options{AllowUIDs: []uint32{me + 1}})
	r := dialRaw(t, refused.socket)
	wantError(t, r.read(), 0, protocol.CodeUnauthorized)
	r.closed()

	allowed := startSidecar(t, "", Options{AllowUIDs: []uint32{me + 1, me}})
	stillServes(t, allowed)
}

func TestHelloDescribesTheSidecar(t *testing.T) {
	ts := startSidecar(t, "", Options{MaxFrameBytes: 4096})
	h, err := ts.client(t).Hello(testContext(t), "test")
	if err != nil {
		t.Fatal(err)
	}
	if h.Protocol != 1 || h.Server != "queenside" || h.Version != Version || h.SidecarID != ts.srv.ID() || h.MaxFrameBytes != 4096 {
		t.Fatalf("hello: %+v", h)
	}
}

func TestHealthIsARealRoundTrip(t *testing.T) {
	ts := startSidecar(t, "", Options{})
	h, err := ts.client(t).Health(testContext(t))
	if err != nil {
		t.Fatal(err)
	}
	if h.Status != protocol.HealthOK || !h.Database.OK || h.Database.LatencyMs <= 0 || h.Version != Version {
		t.Fatalf("health: %+v", h)
	}
	// Terminate the sidecar's database sessions and forbid new ones: the
	// next health check must notice, since it really asks PostgreSQL.
	ctx := testContext(t)
	var db string
	if err := ts.pool.QueryRow(ctx, "SELECT current_database()").Scan(&db); err != nil {
		t.Fatal(err)
	}
	admin := dialAdmin(t)
	if _, err := admin.Exec(ctx, "ALTER DATABASE "+quoteIdent(db)+" ALLOW_CONNECTIONS false"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Exec(ctx, "ALTER DATABASE "+quoteIdent(db)+" ALLOW_CONNECTIONS true") }) //nolint:errcheck
	if _, err := admin.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND application_name LIKE 'queenside%'", db); err != nil {
		t.Fatal(err)
	}
	h, err = ts.client(t).Health(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if h.Status != protocol.HealthUnavailable || h.Database.OK || h.Database.Error == "" {
		t.Fatalf("health with the database refusing connections: %+v", h)
	}
}

func TestShutdownDrains(t *testing.T) {
	ts := startSidecar(t, "", Options{})
	release := make(chan struct{})
	started := make(chan struct{})
	ts.srv.ops["block"] = opSpec{fn: func(ctx context.Context, _ []byte) (any, error) {
		close(started)
		<-release
		return map[string]any{"done": true}, nil
	}, local: true}
	r := dialRaw(t, ts.socket)
	r.sendRequest(1, "block", nil)
	<-started
	shutdownDone := make(chan error, 1)
	go func() { shutdownDone <- ts.srv.Shutdown(context.Background()) }()
	notice := r.read()
	if notice.ID != 0 || notice.Notice != protocol.NoticeDraining {
		t.Fatalf("want the draining notice first, got %+v", notice)
	}
	r.sendRequest(2, protocol.OpPush, protocol.PushArgs{Items: []protocol.PushItem{item(t, "q", "", "", 1)}})
	wantError(t, r.read(), 2, protocol.CodeDraining)
	r.sendRequest(3, protocol.OpHealth, nil)
	var h protocol.HealthResult
	if resp := r.read(); resp.Error != nil || protocol.Unmarshal(resp.Result, &h) != nil || h.Status != protocol.HealthDraining {
		t.Fatalf("health while draining: %+v %+v", resp, h)
	}
	select {
	case err := <-shutdownDone:
		t.Fatalf("shutdown returned (%v) while a request was in flight", err)
	default:
	}
	close(release)
	if resp := r.read(); resp.ID != 1 || resp.Error != nil {
		t.Fatalf("the request in flight was not answered: %+v", resp)
	}
	if err := <-shutdownDone; err != nil {
		t.Fatal(err)
	}
	r.closed()
	if _, err := net.Dial("unix", ts.socket); err == nil {
		t.Fatal("still accepting after shutdown")
	}
}
