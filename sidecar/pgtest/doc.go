// Package pgtest is the PostgreSQL harness for queenside's tests.
//
// A package opts in with
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
//
// and its tests call NewDatabase for a private, fully migrated database.
//
// The server in use is the one TEST_DATABASE_URL points at, if set (any
// database on a server where the user may CREATE DATABASE); otherwise Main
// starts a throwaway server (sidecar/pgserver, durability off) in a
// temporary directory and removes it after the run. PostgreSQL being
// unavailable fails the run: tests are never silently skipped.
//
// Databases are cloned from a template that has every migration applied,
// named after schema.Fingerprint, so migrations run once per schema state
// rather than once per test, even across test binaries sharing a server.
package pgtest
