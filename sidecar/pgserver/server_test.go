package pgserver

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// workDir returns a fresh directory the server user can reach. t.TempDir
// makes 0700 directories, which postgres cannot traverse when the test runs
// as root; opening them up keeps these tests off the /var/tmp fallback
// (TestFallbackWhenUnreachable covers that).
func workDir(t *testing.T) string {
	d := t.TempDir()
	for _, p := range []string{d, filepath.Dir(d)} {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

func start(t *testing.T, opts Options) *Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := Start(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Stop("immediate"); err != nil {
			t.Error(err)
		}
	})
	return s
}

func mustExec(t *testing.T, url, sql string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql); err != nil {
		t.Fatal(err)
	}
}

func count(t *testing.T, url, sql string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, sql).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestStartStopRestart(t *testing.T) {
	t.Parallel()
	dir := workDir(t)
	s := start(t, Options{Dir: dir}) // durable settings: a committed row must survive an immediate stop
	if want := filepath.Join(dir, "pgdata"); s.DataDir() != want {
		t.Fatalf("DataDir = %s, want %s", s.DataDir(), want)
	}
	url := s.URL("postgres")
	mustExec(t, url, "CREATE TABLE t (x int); INSERT INTO t VALUES (1)")

	if err := s.Stop("immediate"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if conn, err := pgx.Connect(ctx, url); err == nil {
		conn.Close(ctx)
		t.Fatal("connected to a stopped server")
	}

	if err := s.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if s.URL("postgres") != url {
		t.Fatalf("URL changed across restart: %s -> %s", url, s.URL("postgres"))
	}
	if n := count(t, url, "SELECT count(*) FROM t"); n != 1 {
		t.Fatalf("rows after restart = %d, want 1", n)
	}
	if err := s.Stop("fast"); err != nil {
		t.Fatal(err)
	}
	if err := s.Stop("fast"); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
}

// TestReuse is what `queenside dev` does on its second run: the cluster is
// reused and the server the first run left up is replaced.
func TestReuse(t *testing.T) {
	t.Parallel()
	dir := workDir(t)
	first := start(t, Options{Dir: dir, Fast: true})
	mustExec(t, first.URL("postgres"), "CREATE TABLE marker (x int)")

	second := start(t, Options{Dir: dir, Fast: true})
	if second.SocketDir() == first.SocketDir() {
		t.Fatal("second server reused the first socket directory")
	}
	if _, err := os.Stat(first.SocketDir()); !os.IsNotExist(err) {
		t.Errorf("first socket directory still there: %v", err)
	}
	if n := count(t, second.URL("postgres"), "SELECT count(*) FROM pg_tables WHERE tablename = 'marker'"); n != 1 {
		t.Fatal("cluster was not reused")
	}
}

func TestStartFailureShowsLog(t *testing.T) {
	t.Parallel()
	dir := workDir(t)
	s := start(t, Options{Dir: dir, Fast: true})
	if err := s.Stop("fast"); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(s.DataDir(), "postgresql.conf")
	f, err := os.OpenFile(conf, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("\nshared_buffers = 'lots'\n")
	f.Close()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err = Start(ctx, Options{Dir: dir, Fast: true})
	if err == nil {
		t.Fatal("Start succeeded with a broken configuration")
	}
	t.Logf("expected failure:\n%v", err)
	if !strings.Contains(err.Error(), "shared_buffers") {
		t.Fatalf("error does not show the log: %v", err)
	}
}

func TestFallbackWhenUnreachable(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the fallback applies only when running as root")
	}
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "private") // t.TempDir is 0700: postgres cannot traverse it
	s := start(t, Options{Dir: dir, Fast: true})
	base := filepath.Dir(s.DataDir())
	t.Cleanup(func() {
		// Cleanups run last-registered first, so stop explicitly before removing.
		s.Stop("immediate")
		os.RemoveAll(base)
	})
	if !strings.HasPrefix(base, fallbackRoot+"/queenside-") {
		t.Fatalf("DataDir = %s, want it under %s", s.DataDir(), fallbackRoot)
	}
	mustExec(t, s.URL("postgres"), "SELECT 1")
}

func TestStopBadMode(t *testing.T) {
	if err := (&Server{}).Stop("now"); err == nil {
		t.Fatal("Stop accepted an unknown mode")
	}
}

func TestParseMajor(t *testing.T) {
	for in, want := range map[string]int{
		"pg_ctl (PostgreSQL) 15.6 (Debian 15.6-0+deb12u1)\n": 15,
		"pg_ctl (PostgreSQL) 17devel":                        17,
		"pg_ctl (PostgreSQL) 16beta1":                        16,
		"15\n":                                               15,
		"9.6":                                                9,
		"":                                                   0,
	} {
		if got := parseMajor(in); got != want {
			t.Errorf("parseMajor(%q) = %d, want %d", in, got, want)
		}
	}
}
