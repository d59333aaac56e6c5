package pgserver

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// BinDirEnv names an environment variable that, when set, is the directory
// holding initdb and pg_ctl. It exists for machines where PostgreSQL lives
// somewhere the search below does not look.
const BinDirEnv = "QUEENSIDE_PG_BINDIR"

// binaries are the server programs we run. pg_ctl finds the postgres
// executable next to itself, so only these two are needed.
type binaries struct {
	dir    string
	initdb string
	pgCtl  string
	major  int // 0 when unknown
}

// candidateGlobs are the places distributions install server binaries
// without putting them on PATH (Debian/Ubuntu, RHEL/PGDG, source builds).
var candidateGlobs = []string{
	"/usr/lib/postgresql/*/bin",
	"/usr/pgsql-*/bin",
	"/usr/local/pgsql/bin",
	"/opt/homebrew/opt/postgresql@*/bin",
	"/usr/local/opt/postgresql@*/bin",
}

// findBinaries locates initdb and pg_ctl. When wantMajor is non-zero (an
// existing cluster's PG_VERSION) binaries of that major version are
// preferred, because a newer server cannot open an older cluster. Otherwise
// the order is: BinDirEnv, PATH, then the highest version found in the
// usual install locations.
func findBinaries(wantMajor int) (*binaries, error) {
	if dir := os.Getenv(BinDirEnv); dir != "" {
		b, err := binariesIn(dir)
		if err != nil {
			return nil, fmt.Errorf("%s=%s: %w", BinDirEnv, dir, err)
		}
		return b, nil
	}

	var found []*binaries
	if p, err := exec.LookPath("pg_ctl"); err == nil {
		if b, err := binariesIn(filepath.Dir(p)); err == nil {
			found = append(found, b)
		}
	}
	var globbed []*binaries
	for _, g := range candidateGlobs {
		dirs, _ := filepath.Glob(g)
		for _, d := range dirs {
			if b, err := binariesIn(d); err == nil {
				globbed = append(globbed, b)
			}
		}
	}
	sort.SliceStable(globbed, func(i, j int) bool { return globbed[i].major > globbed[j].major })
	found = append(found, globbed...)

	if len(found) == 0 {
		return nil, errors.New("PostgreSQL server binaries (initdb, pg_ctl) not found on PATH or in " +
			strings.Join(candidateGlobs, ", ") + "; install the PostgreSQL server or set " + BinDirEnv)
	}
	if wantMajor != 0 {
		for _, b := range found {
			if b.major == wantMajor {
				return b, nil
			}
		}
	}
	return found[0], nil
}

// binariesIn checks that dir holds both programs and reads their version.
func binariesIn(dir string) (*binaries, error) {
	b := &binaries{
		dir:    dir,
		initdb: filepath.Join(dir, "initdb"),
		pgCtl:  filepath.Join(dir, "pg_ctl"),
	}
	for _, p := range []string{b.initdb, b.pgCtl} {
		fi, err := os.Stat(p)
		if err != nil {
			return nil, err
		}
		if fi.IsDir() || fi.Mode()&0o111 == 0 {
			return nil, fmt.Errorf("%s is not executable", p)
		}
	}
	b.major = versionOf(b.pgCtl)
	return b, nil
}

// versionOf returns the major version printed by `pg_ctl --version`
// ("pg_ctl (PostgreSQL) 15.6 (Debian 15.6-0+deb12u1)"), or 0.
func versionOf(pgCtl string) int {
	out, err := exec.Command(pgCtl, "--version").Output()
	if err != nil {
		return 0
	}
	return parseMajor(string(out))
}

// parseMajor extracts the major version from pg_ctl --version output or
// from a PG_VERSION file ("15", or "9.6" for old releases).
func parseMajor(s string) int {
	s = strings.TrimSpace(s)
	if i := strings.Index(s, ")"); i >= 0 {
		s = strings.TrimSpace(s[i+1:])
	}
	if f := strings.Fields(s); len(f) > 0 {
		s = f[0]
	}
	// Keep the leading digits: "15.6", "16beta1" and "17devel" all count.
	end := 0
	for end < len(s) && s[end] >= '0' && s[end] <= '9' {
		end++
	}
	n, err := strconv.Atoi(s[:end])
	if err != nil {
		return 0
	}
	return n
}

// LibraryDir is where extensions' shared libraries go for the server
// binaries Start would use (pg_config --pkglibdir beside them, else the
// lib directory next to their bin), so a test can tell whether an
// extension such as Citus is installed before asking a server to load it.
func LibraryDir() (string, error) {
	b, err := findBinaries(0)
	if err != nil {
		return "", err
	}
	// pg_ctl on PATH may be a link into the installation (/usr/local/bin
	// on some machines): the installation is where it leads.
	dir := b.dir
	if real, err := filepath.EvalSymlinks(b.pgCtl); err == nil {
		dir = filepath.Dir(real)
	}
	if out, err := exec.Command(filepath.Join(dir, "pg_config"), "--pkglibdir").Output(); err == nil {
		return strings.TrimSpace(string(out)), nil
	}
	return filepath.Join(filepath.Dir(dir), "lib"), nil
}
