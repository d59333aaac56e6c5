// Package spool is queenside's disk spool: append-only segment files of
// opaque records, fsynced before Append returns, read back by a replayer
// once the database answers, and retired when replayed.
//
// README.md in this directory specifies the on-disk format, the recovery
// procedure Open runs, how operators adopt a dead pod's spool, the limits
// and the guarantees. The code does what it says.
package spool
