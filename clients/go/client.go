// Package queenside is the Go client of the queenside sidecar. One Client is
// one connection; requests are pipelined on it and may be issued from many
// goroutines at once.
package queenside

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/queenside/queenside/protocol"
)

// DefaultSocket is where a sidecar listens unless told otherwise; the
// QUEENSIDE_SOCKET environment variable overrides it.
const DefaultSocket = "/var/run/queenside/queenside.sock"

// DevSocket is where `queenside dev` (`make run`) serves, relative to the
// directory it runs in.
const DevSocket = ".queenside/queenside.sock"

// ErrClosed is returned by calls on a closed client, or after the connection broke.
var ErrClosed = errors.New("queenside: client closed")

// Error is an error answered by the sidecar; branch on Code.
type Error = protocol.Error

// SocketPath returns QUEENSIDE_SOCKET when set, else DevSocket when it
// exists (so programs run beside `make run` find it), else DefaultSocket.
func SocketPath() string {
	if p := os.Getenv("QUEENSIDE_SOCKET"); p != "" {
		return p
	}
	if _, err := os.Stat(DevSocket); err == nil {
		return DevSocket
	}
	return DefaultSocket
}

// Client is one connection to a sidecar.
type Client struct {
	nc     net.Conn
	nextID atomic.Uint64

	wmu sync.Mutex
	w   *bufio.Writer

	mu      sync.Mutex
	pending map[uint64]chan protocol.Response
	err     error // set once the connection is gone
	done    chan struct{}

	draining atomic.Bool // set by the sidecar's drain notice
	// maxFrame is the sidecar's largest frame body, learnt from hello; 0
	// until then (see checkFrame).
	maxFrame atomic.Int64

	retry RetryPolicy
}

// Dial connects to the sidecar's socket at path ("" means SocketPath()).
// Without options, calls are retried by DefaultRetryPolicy (see Call).
func Dial(ctx context.Context, path string, opts ...Option) (*Client, error) {
	if path == "" {
		path = SocketPath()
	}
	o := dialOptions{retry: DefaultRetryPolicy}
	for _, opt := range opts {
		opt(&o)
	}
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, fmt.Errorf("queenside: dial %s: %w", path, err)
	}
	c := &Client{
		nc:      nc,
		w:       bufio.NewWriterSize(nc, 32<<10),
		pending: make(map[uint64]chan protocol.Response),
		done:    make(chan struct{}),
		retry:   o.retry,
	}
	go c.readLoop()
	return c, nil
}

// Close closes the connection; calls in flight fail with ErrClosed.
func (c *Client) Close() error {
	err := c.nc.Close()
	<-c.done
	return err
}

// requestBuffers holds encoding buffers for requests: a push of 100
// messages would otherwise grow a fresh one from nothing every call. send
// copies the body out before Call returns, so a buffer is free again then.
var requestBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 32<<10); return &b }}

const maxPooledRequest = 1 << 20

// Draining reports whether the sidecar announced that it is shutting down.
func (c *Client) Draining() bool { return c.draining.Load() }

// call is one attempt of Call: one request, one answer.
func (c *Client) call(ctx context.Context, op string, args any, result any) error {
	id := c.nextID.Add(1)
	var timeoutMs uint64
	if dl, ok := ctx.Deadline(); ok {
		ms := time.Until(dl).Milliseconds()
		if ms <= 0 {
			return context.DeadlineExceeded
		}
		timeoutMs = uint64(ms)
	}
	buf := requestBuffers.Get().(*[]byte)
	body, err := protocol.AppendRequest((*buf)[:0], id, op, args, timeoutMs)
	if err != nil {
		requestBuffers.Put(buf)
		return fmt.Errorf("queenside: encode %s: %w", op, err)
	}
	defer func() {
		if cap(body) <= maxPooledRequest { // a rare huge request is not kept
			*buf = body[:0]
			requestBuffers.Put(buf)
		}
	}()
	if err := c.checkFrame(ctx, op, len(body)); err != nil {
		return err
	}
	ch := make(chan protocol.Response, 1)
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return c.err
	}
	c.pending[id] = ch
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.pending, id)
		c.mu.Unlock()
	}()

	if err := c.send(body); err != nil {
		return err
	}
	select {
	case resp := <-ch:
		if resp.Error != nil {
			return resp.Error
		}
		if result == nil {
			return nil
		}
		if err := protocol.Unmarshal(resp.Result, result); err != nil {
			return fmt.Errorf("queenside: decode %s result: %w", op, err)
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-c.done:
		return c.closedErr()
	}
}

func (c *Client) send(body []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	err := protocol.WriteFrame(c.w, body)
	if err == nil {
		err = c.w.Flush()
	}
	if err != nil {
		// The sidecar may have closed the connection over this very frame,
		// having said why (frame_too_large): the answer waits in the
		// socket, unread. It is read, and told, before the connection is
		// let go.
		select {
		case <-c.done:
		case <-time.After(time.Second):
		}
		c.nc.Close()
		var perr *protocol.Error
		if errors.As(c.closedErr(), &perr) {
			return perr
		}
		return fmt.Errorf("queenside: send: %w", err)
	}
	return nil
}

// learnLimitAbove is the size above which a request is held against the
// sidecar's frame limit, asking hello for it first if need be: a smaller
// one fits any sidecar's limit but a tiny one, and costs no round trip.
const learnLimitAbove = 64 << 10

// checkFrame refuses, before it is sent, a request of size bytes that the
// sidecar's frame limit cannot take: sent, it would make the sidecar close
// the connection, failing every call in flight on it.
func (c *Client) checkFrame(ctx context.Context, op string, size int) error {
	if size <= learnLimitAbove || op == protocol.OpHello {
		return nil
	}
	if c.maxFrame.Load() == 0 {
		c.Hello(ctx, "queenside-go") //nolint:errcheck // without the limit, the sidecar's own answer says it
	}
	limit := c.maxFrame.Load()
	if limit == 0 || int64(size) <= limit {
		return nil
	}
	e := protocol.Errorf(protocol.CodeFrameTooLarge,
		"%s: a request of %d bytes is above the sidecar's frame limit of %d bytes (its --max-frame-bytes): send fewer items a request, or raise the limit",
		op, size, limit)
	e.Details = map[string]any{"local": true, "bytes": size, "maxFrameBytes": limit}
	return e
}

// MaxFrameBytes is the sidecar's largest frame body, as hello said; 0 before
// a hello.
func (c *Client) MaxFrameBytes() int { return int(c.maxFrame.Load()) }

func (c *Client) closedErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// readLoop hands each response to the call waiting for its id.
func (c *Client) readLoop() {
	r := bufio.NewReaderSize(c.nc, 64<<10)
	var fatal error = ErrClosed
	for {
		body, err := protocol.ReadFrame(r, nil, 1<<31-1)
		if err != nil {
			break
		}
		resp, err := protocol.DecodeResponse(body) // body is this frame's own: Result may point into it
		if err != nil {
			fatal = fmt.Errorf("queenside: malformed response: %w", err)
			break
		}
		if resp.ID == 0 {
			if resp.Notice == protocol.NoticeDraining {
				c.draining.Store(true)
			}
			// frame_too_large and unauthorized close the connection; say why.
			// Other errors without an id concern a frame that could not be
			// read, and the connection goes on.
			if resp.Error != nil && (resp.Error.Code == protocol.CodeFrameTooLarge || resp.Error.Code == protocol.CodeUnauthorized) {
				fatal = resp.Error
			}
			continue
		}
		c.mu.Lock()
		ch := c.pending[resp.ID]
		c.mu.Unlock()
		if ch != nil {
			ch <- resp
		}
	}
	c.nc.Close()
	c.mu.Lock()
	c.err = fatal
	c.mu.Unlock()
	close(c.done)
}
