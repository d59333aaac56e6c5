package pgserver

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/hashicorp/go-hclog"
)

// fallbackRoot is where the cluster goes when, running as root, the postgres
// user cannot reach Options.Dir. /var/tmp survives reboots (like the dev
// cluster is meant to) and is world-searchable.
const fallbackRoot = "/var/tmp"

// baseDir returns the directory that holds pgdata and postgres.log.
//
// Normally that is dir itself. But as root the server runs as postgres,
// and dir is often somewhere postgres cannot even traverse (a checkout
// under /root, whose mode is 0700, or a 0700 temporary directory). Rather
// than loosening permissions on the user's directories, the cluster then
// lives in /var/tmp/queenside-<hash of the absolute dir>: the name is
// stable, so the next run with the same dir finds and reuses the same
// cluster. The choice is logged so a developer can find the files.
func baseDir(dir string, ra *runAs, log hclog.Logger) (string, error) {
	if ra.canReach(dir) {
		return dir, nil
	}
	sum := sha256.Sum256([]byte(dir))
	alt := filepath.Join(fallbackRoot, "queenside-"+hex.EncodeToString(sum[:])[:12])
	if err := os.MkdirAll(alt, 0o700); err != nil {
		return "", fmt.Errorf("user %s cannot reach %s, and creating fallback %s failed: %w", ra.user, dir, alt, err)
	}
	if err := ra.chown(alt); err != nil {
		return "", err
	}
	log.Info("postgres user cannot reach the working directory; keeping the cluster elsewhere",
		"dir", dir, "cluster_dir", alt)
	return alt, nil
}

// socketParent picks where to create the socket directory. The full socket
// path (dir + "/.s.PGSQL.5432") must fit in sun_path (107 bytes), and the
// server user must be able to reach it, so a long or private $TMPDIR is
// passed over for /tmp.
func socketParent(ra *runAs) string {
	tmp := os.TempDir()
	// MkdirTemp adds "/qspg" and up to 20 digits; the socket file adds 15.
	if len(tmp)+len("/qspg")+20+len("/.s.PGSQL.65535") > 107 || !ra.canReach(tmp) {
		return "/tmp"
	}
	return tmp
}

// makeSocketDir creates a fresh, short, private socket directory owned by
// the server user. Private is fine for the client: trust authentication
// makes anyone who can reach the socket a superuser, so only we (and root)
// should.
func makeSocketDir(ra *runAs) (string, error) {
	d, err := os.MkdirTemp(socketParent(ra), "qspg")
	if err != nil {
		return "", fmt.Errorf("creating socket directory: %w", err)
	}
	if err := ra.chown(d); err != nil {
		os.Remove(d)
		return "", fmt.Errorf("creating socket directory: %w", err)
	}
	return d, nil
}

// ensureSocketDir recreates a socket directory that Stop removed, keeping
// its name so URLs handed out before a restart stay valid.
func ensureSocketDir(ra *runAs, d string) error {
	if err := os.Mkdir(d, 0o700); err != nil && !os.IsExist(err) {
		return fmt.Errorf("recreating socket directory: %w", err)
	}
	return ra.chown(d)
}

// isOurSocketDir tells whether d looks like a socket directory this package
// made, so that tidying up after a previous run cannot touch anything else.
func isOurSocketDir(d string) bool {
	parent := filepath.Dir(d)
	return strings.HasPrefix(filepath.Base(d), "qspg") && (parent == "/tmp" || parent == filepath.Clean(os.TempDir()))
}
