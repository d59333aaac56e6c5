package queenside_test

import (
	"net"
	"sync"
	"testing"

	"github.com/queenside/queenside/protocol"
)

// scripted is a stand-in sidecar on one connection that answers each
// request, in arrival order, with what its script returns, and remembers
// the requests: it provokes unavailable and draining at will, which a real
// sidecar gives only in an outage or a shutdown.
type scripted struct {
	path string

	mu       sync.Mutex
	requests []protocol.Request
}

// reply is what the script sends for one request: frames (notices, say)
// before the answer, then the answer itself.
type reply struct {
	before []protocol.Response
	answer protocol.Response
}

func newScripted(t *testing.T, script func(n int, req protocol.Request) reply) *scripted {
	t.Helper()
	s := &scripted{path: socketPath(t)}
	ln, err := net.Listen("unix", s.path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		defer nc.Close()
		for {
			body, err := protocol.ReadFrame(nc, nil, 1<<20)
			if err != nil {
				return
			}
			req, perr := protocol.DecodeRequest(body)
			if perr != nil {
				return
			}
			s.mu.Lock()
			s.requests = append(s.requests, req)
			n := len(s.requests)
			s.mu.Unlock()
			r := script(n, req)
			for _, f := range append(r.before, r.answer) {
				out, _ := protocol.Marshal(f)
				if protocol.WriteFrame(nc, out) != nil {
					return
				}
			}
		}
	}()
	return s
}

// count is how many requests came, and the ops they named.
func (s *scripted) count() (int, []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ops := make([]string, len(s.requests))
	for i, r := range s.requests {
		ops[i] = r.Op
	}
	return len(s.requests), ops
}

func (s *scripted) request(i int) protocol.Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests[i]
}

func errorReply(req protocol.Request, code protocol.Code) reply {
	return reply{answer: protocol.Response{ID: req.ID, Error: protocol.Errorf(code, "scripted %s", code)}}
}

// resultReply answers with an empty result map, which every result type
// of the client decodes.
func resultReply(req protocol.Request) reply {
	res, _ := protocol.Marshal(map[string]any{})
	return reply{answer: protocol.Response{ID: req.ID, Result: res}}
}

// failFirst answers code to the first n requests, then an empty result.
func failFirst(n int, code protocol.Code) func(int, protocol.Request) reply {
	return func(i int, req protocol.Request) reply {
		if i <= n {
			return errorReply(req, code)
		}
		return resultReply(req)
	}
}
