package sidecar

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	queenside "github.com/queenside/queenside/clients/go"
	"github.com/queenside/queenside/protocol"
	"github.com/queenside/queenside/schema"
	"github.com/queenside/queenside/sidecar/pgtest"
)

// previousRelease builds the sidecar as it was just before this build's
// newest migration was added: the release a rolling upgrade replaces, with
// migrations 1 to the one before, as this build has them. It returns the
// binary and that release's newest migration version.
func previousRelease(t *testing.T) (string, int) {
	t.Helper()
	ms, err := schema.Migrations()
	if err != nil || len(ms) < 2 {
		t.Fatalf("migrations: %v", err)
	}
	newest, prev := ms[len(ms)-1], ms[len(ms)-2]
	need := func(what string, err error, out []byte) {
		t.Helper()
		if err == nil {
			return
		}
		msg := fmt.Sprintf("%s: %v\n%s", what, err, out)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg + "\nthe upgrade test needs the repository's git history")
		}
		t.Skip(msg + "\n(the upgrade test needs the repository's git history)")
	}
	out, err := exec.Command("git", "log", "--diff-filter=A", "--format=%H", "-1", "--",
		"../schema/migrations/"+newest.Name).Output()
	commit := strings.TrimSpace(string(out))
	if err == nil && commit == "" {
		err = fmt.Errorf("no commit adds %s", newest.Name)
	}
	commit += "^" // the commit before it
	need("find the previous release", err, out)
	src := t.TempDir()
	archive := exec.Command("sh", "-c", fmt.Sprintf("git archive %s | tar -x -C %s", commit, src))
	archive.Dir = ".."
	out, err = archive.CombinedOutput()
	need("git archive "+commit, err, out)
	bin := filepath.Join(t.TempDir(), "queenside-previous")
	build := exec.Command("go", "build", "-o", bin, "./sidecar/cmd/queenside")
	build.Dir = src
	out, err = build.CombinedOutput()
	if err != nil {
		t.Fatalf("build the previous release (%s): %v\n%s", commit, err, out)
	}
	t.Logf("previous release: %s, migrations up to %d", commit, prev.Version)
	return bin, prev.Version
}

// A rolling upgrade: a sidecar of the previous release serves traffic,
// a sidecar of this build starts beside it and migrates the schema under
// it, both serve traffic on the new schema, and the old one restarts on
// it. Every message is stored and delivered once, in order.
func TestRollingUpgradeAcrossAMigration(t *testing.T) {
	pgtest.SkipOnCitus(t, "the release before does not run on Citus (its pops that name no partition lock across shards)")
	oldBin, oldVersion := previousRelease(t)
	pg := startPrivatePostgres(t)
	old := launchSidecarBinary(t, oldBin, pg.url, t.TempDir())
	old.waitReplayed(t)
	pool := pg.pool(t)
	schemaVersion := func() int {
		var v int
		if err := pool.QueryRow(context.Background(), "SELECT max(version) FROM queenside.schema_migrations").Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	if v := schemaVersion(); v != oldVersion {
		t.Fatalf("the previous release migrated to %d, want %d", v, oldVersion)
	}

	tr := startTraffic(t, "up-old", []*sidecarProcess{old})
	tr.push(10)

	// This build starts while the old one pushes and consumes, and
	// migrates under it.
	var migrating sync.WaitGroup
	migrating.Go(func() { tr.push(20) })
	fresh := launchSidecar(t, pg.url, t.TempDir())
	fresh.waitReplayed(t)
	migrating.Wait()
	ms, _ := schema.Migrations()
	if v := schemaVersion(); v != ms[len(ms)-1].Version {
		t.Fatalf("schema at %d after this build started, want %d", v, ms[len(ms)-1].Version)
	}

	// Both serve on the new schema: each queue consumed through the other
	// sidecar too, and a transaction through the old one.
	tr.add("up-new", fresh, old)
	tr.push(10)
	oc := dialClient(t, old.socket)
	mustPush(t, oc, item(t, "tx-in", "p", "in-1", "x"))
	in := mustPop(t, oc, protocol.PopArgs{Queue: "tx-in", Partition: "p", Group: "g"})
	txr, err := oc.Transaction(testContext(t), []queenside.AckItem{queenside.Completed(in.Messages[0])},
		[]queenside.PushItem{item(t, "tx-out", "p", "out-1", "y")})
	if err != nil || !txr.Acks[0].Success || txr.Pushes[0].Status != protocol.StatusQueued {
		t.Fatalf("a transaction through the previous release on the new schema: %+v %v", txr, err)
	}

	// The old one restarts on the new schema, and serves again. Its
	// consumers move to this build's sidecar meanwhile.
	for _, c := range tr.consumers {
		c.use(dialClient(t, fresh.socket))
	}
	old.terminate(t)
	old = launchSidecarBinary(t, oldBin, pg.url, old.spoolDir)
	old.waitReplayed(t)
	tr.producers[0].c = dialClient(t, old.socket)
	tr.consumers[1].use(dialClient(t, old.socket))
	tr.push(10)

	for _, sc := range []*sidecarProcess{old, fresh} {
		sc.waitReplayed(t)
	}
	tr.finish(pool)
}
