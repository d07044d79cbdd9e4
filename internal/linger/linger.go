// Package linger closes a server's connection gently when the peer may
// still be sending: the lingering close of nginx and of net/http.
//
// A server that answers before it has read the whole request (a 413 for a
// body declared over the limit, an error halfway through a streamed body)
// and then closes the socket leaves bytes unread in it, and the kernel
// answers a close with unread data by a reset. The reset reaches a client
// that is still writing its body; its write fails with "broken pipe" or
// "connection reset", and the answer the server sent, already in the
// client's receive buffer, is lost with the connection. Go's net/http
// client, tritonclient and curl all send the whole body before they read.
//
// A connection marked with Mark closes its writing half instead (the
// client reads the answer and then end-of-stream) and reads and discards
// what the client still sends, until the client closes, for at most
// Options.Timeout and Options.MaxBytes, before it closes for good. At most
// Options.Max connections linger at once; beyond that a close is immediate,
// as it would have been without this package, so no load can make lingering
// hold an unbounded number of sockets.
package linger

import (
	"errors"
	"io"
	"net"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ratebatch/ratebatch/internal/guard"
)

// Options bound the lingering. Zero values take the defaults.
type Options struct {
	// Timeout is how long a closed connection may go on reading what the
	// client sends (default 2 s: a body sent at 100 MB/s of 200 MB).
	Timeout time.Duration
	// MaxBytes is how much it reads and discards at most (default 256 MiB).
	MaxBytes int64
	// Max is how many connections may linger at once (default 64).
	Max int
}

const (
	defaultTimeout  = 2 * time.Second
	defaultMaxBytes = 256 << 20
	defaultMax      = 64
)

// Listener wraps the connections it accepts so that Mark can make their
// Close linger.
type Listener struct {
	net.Listener
	o     Options
	slots chan struct{}
}

// NewListener wraps ln.
func NewListener(ln net.Listener, o Options) *Listener {
	if o.Timeout <= 0 {
		o.Timeout = defaultTimeout
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = defaultMaxBytes
	}
	if o.Max <= 0 {
		o.Max = defaultMax
	}
	return &Listener{Listener: ln, o: o, slots: make(chan struct{}, o.Max)}
}

// Accept waits for the next connection and wraps it.
func (l *Listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &conn{Conn: c, l: l}, nil
}

// Lingering reports how many closed connections are still reading.
func (l *Listener) Lingering() int { return len(l.slots) }

// Mark makes the next Close of c linger, if c came from a Listener, and
// reports whether it will.
func Mark(c net.Conn) bool {
	lc, ok := c.(*conn)
	if ok {
		lc.marked.Store(true)
	}
	return ok
}

type conn struct {
	net.Conn
	l      *Listener
	marked atomic.Bool
	closed atomic.Bool
}

// SyscallConn gives the wrapped connection's, so that a caller that peeks
// at the socket (a hang-up watch) sees through the wrapper.
func (c *conn) SyscallConn() (syscall.RawConn, error) {
	sc, ok := c.Conn.(syscall.Conn)
	if !ok {
		return nil, errors.ErrUnsupported
	}
	return sc.SyscallConn()
}

// PaceWrites gives the wrapped connection's (rawconn.Conn.PaceWrites),
// when it has one, so that a handler streaming an answer sees through the
// wrapper.
func (c *conn) PaceWrites() {
	if p, ok := c.Conn.(interface{ PaceWrites() }); ok {
		p.PaceWrites()
	}
}

type closeWriter interface{ CloseWrite() error }

// Close closes c, lingering if it was marked and a slot is free.
func (c *conn) Close() error {
	if !c.closed.CompareAndSwap(false, true) {
		return net.ErrClosed
	}
	cw, ok := c.Conn.(closeWriter)
	if !c.marked.Load() || !ok {
		return c.Conn.Close()
	}
	select {
	case c.l.slots <- struct{}{}:
	default:
		return c.Conn.Close()
	}
	if err := cw.CloseWrite(); err != nil {
		<-c.l.slots
		return c.Conn.Close()
	}
	go c.drain()
	return nil
}

// drain runs on its own goroutine, after the request that closed the
// connection was answered: a panic in it is counted and logged
// (internal/guard, site "linger"), never the process's end.
func (c *conn) drain() {
	defer func() { <-c.l.slots }()
	defer func() {
		if v := recover(); v != nil {
			guard.Recovered(nil, "linger", v)
			c.Conn.Close()
		}
	}()
	if c.Conn.SetReadDeadline(time.Now().Add(c.l.o.Timeout)) == nil {
		// It ends at the client's close, the deadline or the bound; which
		// one makes no difference to what follows.
		_, _ = io.CopyN(io.Discard, c.Conn, c.l.o.MaxBytes)
	}
	c.Conn.Close()
}
