package sidecar

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/queenside/queenside/protocol"
)

// errTooManyFiles is a transient accept failure worth waiting out.
var errTooManyFiles = syscall.EMFILE

// defaultFrameBodyTimeout bounds how long a frame's body may take to
// arrive once its length was read (Options.FrameBodyTimeout): a peer that
// stops halfway holds memory of the shared budget, and is disconnected
// past it.
const defaultFrameBodyTimeout = 30 * time.Second

// writeTimeout bounds how long a response may wait on a peer that stopped
// reading; past it the connection is dropped rather than left to pin
// handlers forever.
const writeTimeout = 30 * time.Second

// conn is one client connection: a read loop that starts a handler per
// request (up to MaxInFlight), and a writer shared by those handlers.
type conn struct {
	s  *Server
	nc net.Conn
	// ctx ends when the peer goes away; only waits (long-polls) listen to it.
	ctx    context.Context
	cancel context.CancelFunc

	wmu sync.Mutex
	w   *bufio.Writer

	handlers sync.WaitGroup
}

func (s *Server) newConn(nc net.Conn) *conn {
	ctx, cancel := context.WithCancel(s.baseCtx)
	c := &conn{s: s, nc: nc, ctx: ctx, cancel: cancel, w: bufio.NewWriterSize(nc, 32<<10)}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.draining.Load() {
		cancel()
		nc.Close()
		return nil
	}
	s.conns[c] = struct{}{}
	return c
}

func (c *conn) serve() {
	defer c.finish()
	if !c.peerAllowed() {
		return
	}
	r := bufio.NewReaderSize(c.nc, 64<<10)
	slots := make(chan struct{}, c.s.opts.MaxInFlight)
	for {
		n, err := protocol.ReadFrameHeader(r, c.s.opts.MaxFrameBytes)
		if err != nil {
			if errors.Is(err, protocol.ErrFrameTooLarge) {
				// The framing cannot be trusted any more: say why, then close.
				c.refuse(r, protocol.Errorf(protocol.CodeFrameTooLarge, "%v: the limit is this sidecar's --max-frame-bytes", err))
			}
			return
		}
		// The body's memory comes out of what every connection's frames
		// share (--max-frame-memory) until its request is answered: many
		// peers announcing large frames wait here, rather than each
		// holding memory it may never fill.
		if c.s.frameMemory.Acquire(c.ctx, int64(n)) != nil {
			return
		}
		release := func() { c.s.frameMemory.Release(int64(n)) }
		// A fresh body per frame: decoded requests point into it (payloads
		// are never copied) and live on in their handlers. It must arrive
		// within FrameBodyTimeout of its header.
		timeout := c.s.opts.FrameBodyTimeout
		_ = c.nc.SetReadDeadline(time.Now().Add(timeout))
		body, err := protocol.ReadFrameBody(r, nil, n)
		_ = c.nc.SetReadDeadline(time.Time{})
		if err != nil {
			release()
			if errors.Is(err, os.ErrDeadlineExceeded) {
				// The rest of the frame may still come: the stream cannot
				// be read in step again.
				c.s.log.Warn("closed a connection whose frame did not arrive in time", "bytes", n, "timeout", timeout)
				c.refuse(r, protocol.Errorf(protocol.CodeBadRequest, "a frame of %d bytes did not arrive within %v of its length", n, timeout))
			}
			return
		}
		c.s.lastRequest.Store(time.Now().UnixNano())
		req, perr := protocol.DecodeRequest(body)
		if perr != nil {
			release()
			c.writeError(req.ID, perr)
			continue
		}
		// Backpressure: with MaxInFlight requests being served, stop reading.
		select {
		case slots <- struct{}{}:
		case <-c.ctx.Done():
			release()
			return
		}
		c.handlers.Add(1)
		c.s.active.Add(1)
		go func() {
			defer func() {
				release()
				<-slots
				c.s.active.Add(-1)
				c.handlers.Done()
			}()
			res, err := c.s.dispatch(c.ctx, req)
			var perr *protocol.Error
			if err != nil {
				perr = c.s.toProtocolError(err)
			}
			c.s.metrics.served(req.Op, perr, res)
			c.respond(req.ID, res, perr)
		}()
	}
}

// finish runs when the peer stops sending: waits end, requests already
// received are still answered, then the connection closes.
func (c *conn) finish() {
	c.cancel()
	c.handlers.Wait()
	c.nc.Close()
	c.s.mu.Lock()
	delete(c.s.conns, c)
	c.s.mu.Unlock()
}

func (c *conn) peerAllowed() bool {
	allow := c.s.opts.AllowUIDs
	if len(allow) == 0 {
		return true
	}
	uid, err := peerUID(c.nc)
	if err == nil && slices.Contains(allow, uid) {
		return true
	}
	msg := "peer credentials not allowed"
	if err != nil {
		msg = err.Error()
	} else {
		c.s.log.Warn("refused a peer", "uid", uid)
	}
	c.refuse(c.nc, protocol.Errorf(protocol.CodeUnauthorized, "%s", msg))
	return false
}

// lingerOnRefusal bounds how long a refused connection is read (and what is
// read thrown away) after its error, before it closes.
const lingerOnRefusal = time.Second

// refuse sends the error that ends a connection, then stops writing and
// discards what the peer is still sending until it stops or a second
// passes. Closing at once would reset a peer still writing its request, and
// the reset can destroy the error before the peer reads it.
func (c *conn) refuse(r io.Reader, e *protocol.Error) {
	c.writeError(0, e)
	if cw, ok := c.nc.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	_ = c.nc.SetReadDeadline(time.Now().Add(lingerOnRefusal))
	_, _ = io.Copy(io.Discard, r)
}

var bodyPool = sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}

func (c *conn) respond(id uint64, result any, perr *protocol.Error) {
	if perr != nil {
		c.writeError(id, perr)
		return
	}
	bp := bodyPool.Get().(*[]byte)
	defer bodyPool.Put(bp)
	body, encErr := protocol.AppendResult((*bp)[:0], id, result)
	if encErr != nil {
		c.writeError(id, protocol.Errorf(protocol.CodeInternal, "encode result: %v", encErr))
		return
	}
	if len(body) > c.s.opts.MaxFrameBytes {
		c.writeError(id, protocol.Errorf(protocol.CodeOverloaded, "result of %d bytes exceeds the frame limit of %d; ask for less", len(body), c.s.opts.MaxFrameBytes))
		return
	}
	c.writeFrame(body)
	*bp = body[:0]
}

func (c *conn) writeError(id uint64, e *protocol.Error) {
	c.writeFrame(protocol.AppendError(nil, id, e))
}

func (c *conn) notify(notice string) {
	c.writeFrame(protocol.AppendNotice(nil, notice))
}

// writeFrame sends one frame and flushes it: one flush per response.
func (c *conn) writeFrame(body []byte) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_ = c.nc.SetWriteDeadline(time.Now().Add(writeTimeout))
	err := protocol.WriteFrame(c.w, body)
	if err == nil {
		err = c.w.Flush()
	}
	if err != nil {
		// A peer we cannot write to is gone or stuck; closing ends its read
		// loop too. What it asked for was still carried out.
		c.nc.Close()
	}
}
