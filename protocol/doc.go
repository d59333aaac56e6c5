// Package protocol is queenside's wire contract: length-prefixed msgpack
// frames, request and response envelopes, the error codes, and the argument
// and result shapes of every operation.
//
// It depends on the standard library and msgpack only, so that the sidecar,
// the Go client and the tests all speak exactly the same bytes. PROTOCOL.md
// beside this file describes the contract in prose.
package protocol

// The clients' tables of codes and queue options are generated from this
// package (see internal/clientgen).
//go:generate go run ./internal/gen

// Version is the protocol version spoken by this package.
const Version = 1

// DefaultMaxFrameBytes is the frame body limit unless a flag changes it.
const DefaultMaxFrameBytes = 16 << 20

// MaxTimeoutMs is the largest timeoutMs a request may carry: a day, far
// beyond any call's use, and far below where milliseconds stop fitting in
// a deadline (about 292 years of nanoseconds). A larger one is
// invalid_argument.
const MaxTimeoutMs = 24 * 60 * 60 * 1000

// DefaultMaxInFlight bounds the requests served at once on one connection.
const DefaultMaxInFlight = 256
