package netns_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/queenside/queenside/sidecar/netns"
	"github.com/queenside/queenside/sidecar/pgserver"
)

// A cut link drops what crosses it without an error: a query and a new
// connection wait for their deadline, while the server's Unix socket,
// which is no part of the network, still answers. Healed, the link carries
// a new connection at once.
func TestCutLinkIsSilentAndHeals(t *testing.T) {
	if err := netns.Available(); err != nil {
		t.Skipf("skipped: %v", err)
	}
	n, err := netns.New()
	if err != nil {
		t.Fatal(err)
	}
	link, err := n.Link()
	if err != nil {
		n.Close()
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, p := range []string{dir, filepath.Dir(dir)} {
		os.Chmod(p, 0o755) //nolint:errcheck // the root fallback copes
	}
	ctx := context.Background()
	pg, err := pgserver.Start(ctx, pgserver.Options{Dir: dir, Fast: true, NetNS: n.Name(), ListenAddress: link.ServerAddr})
	if err != nil {
		n.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		pg.Stop("immediate") //nolint:errcheck // cleanup
		if err := n.Close(); err != nil {
			t.Error(err)
		}
	})
	tcp := pg.URLAt(link.ServerAddr, "postgres")
	conn, err := pgx.Connect(ctx, tcp)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)

	if err := link.Cut(); err != nil {
		t.Fatal(err)
	}
	qctx, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
	start := time.Now()
	_, err = conn.Exec(qctx, "SELECT 1")
	cancel()
	if err == nil || time.Since(start) < 1400*time.Millisecond {
		t.Fatalf("a query over a cut link ended after %v with %v; want silence until the deadline", time.Since(start), err)
	}
	cctx, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
	start = time.Now()
	_, err = pgx.Connect(cctx, tcp)
	cancel()
	if err == nil || time.Since(start) < 1400*time.Millisecond {
		t.Fatalf("a connection over a cut link ended after %v with %v; want silence until the deadline", time.Since(start), err)
	}
	local, err := pgx.Connect(ctx, pg.URL("postgres"))
	if err != nil {
		t.Fatalf("the Unix socket is cut too: %v", err)
	}
	local.Close(ctx)

	if err := link.Heal(); err != nil {
		t.Fatal(err)
	}
	hctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	c2, err := pgx.Connect(hctx, tcp)
	if err != nil {
		t.Fatalf("after healing: %v", err)
	}
	c2.Close(ctx)
}

// A second server address on a link is on the server's end of it, in the
// namespace, on the link's network: a standby listens there beside its
// primary, on the same port.
func TestAddServerAddr(t *testing.T) {
	if err := netns.Available(); err != nil {
		t.Skipf("skipped: %v", err)
	}
	n, err := netns.New()
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	link, err := n.Link()
	if err != nil {
		t.Fatal(err)
	}
	addr, err := link.AddServerAddr()
	if err != nil {
		t.Fatal(err)
	}
	if want := strings.TrimSuffix(link.ServerAddr, ".2") + ".3"; addr != want {
		t.Errorf("second server address %s, want %s", addr, want)
	}
	out, err := exec.Command("ip", "-n", n.Name(), "-o", "addr", "show", "to", addr).Output()
	if err != nil || !strings.Contains(string(out), addr+"/24") {
		t.Errorf("%s is not in the namespace: %v %s", addr, err, out)
	}
}
