package grpcproxy

import (
	"context"
	"net"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/peer"

	"github.com/ratebatch/ratebatch/door"
	"github.com/ratebatch/ratebatch/internal/membudget"
	"github.com/ratebatch/ratebatch/kserve/grpcwire"
)

// grpc-go reads a message whole before the door sees it or its size: it
// opens the stream's window to the message's length as soon as the door
// asks for the message. What a connection has read and no call has taken
// yet (partial messages, data sent ahead of a read) is memory the calls'
// holds cannot see. The receive meter charges it to the memory budget as
// it is read, from the socket, and gives it back as the calls take their
// messages. Reads go on past the budget by at most one message of the
// largest size (MaxRecvBytes, limits.max_body_bytes), so that a message
// that does not fit is still read whole and refused RESOURCE_EXHAUSTED,
// as a call is; past that, a connection that holds bytes no call took
// reads no more (TCP pushes back on its client) until there is room, and
// is closed if none comes within recvWait. A connection holding nothing
// unclaimed reads on, so that a call that completes, a window update or a
// ping still gets through. Each connection reads at most one buffer past
// the bound (grpc-go reads 32 KiB at a time).

// recvWait is how long a connection's reads wait for the budget's room
// before it is closed: a client whose messages cannot be taken in that
// long is shed rather than held.
const recvWait = 10 * time.Second

// frameCost is what a message of n bytes took on the wire beside its
// bytes, at most: its gRPC prefix, the HTTP/2 frames' headers, and a
// share of its stream's headers, window updates and pings. A message
// taken gives this back with it, so that what a busy connection reads
// for its framing does not pile up in the budget; an over-estimate,
// since what stays unclaimed is cleared when the connection has no call.
func frameCost(n int) int64 { return int64(5 + 9*(n/16384+1) + 512) }

type recvListener struct {
	net.Listener
	b *membudget.Budget
	// over is how far past the budget reads may go: one largest message.
	over int64
}

func (l recvListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	rc := &recvConn{Conn: c, b: l.b, over: l.over, wait: recvWait}
	rc.addr = recvAddr{Addr: c.RemoteAddr(), c: rc} // boxed once, not at each RemoteAddr
	return rc, nil
}

// recvConn is a client connection of the gRPC door, metered.
type recvConn struct {
	net.Conn
	b    *membudget.Budget
	over int64
	wait time.Duration // recvWait; tests shorten it
	addr net.Addr      // a recvAddr

	mu      sync.Mutex
	pending int64 // read and not yet taken by a call: charged
	calls   int   // calls open on the connection
}

func (c *recvConn) RemoteAddr() net.Addr { return c.addr }

// SyscallConn gives the wrapped connection's.
func (c *recvConn) SyscallConn() (syscall.RawConn, error) {
	sc, ok := c.Conn.(syscall.Conn)
	if !ok {
		return nil, syscall.EINVAL
	}
	return sc.SyscallConn()
}

func (c *recvConn) Read(p []byte) (int, error) {
	if !c.waitRoom() {
		c.Conn.Close()
	}
	n, err := c.Conn.Read(p)
	c.mu.Lock()
	// Charged while a call is open, whether or not they fit: they are
	// read. What a connection without a call reads is framing (window
	// updates, pings, a stream's end), or the first bytes of a call about
	// to start, which its handler charges once it has them.
	charge := n > 0 && c.calls > 0
	if charge {
		c.pending += int64(n)
	}
	c.mu.Unlock()
	if charge { // given back by took, ended and Close, not by this hold
		h := membudget.Hold{B: c.b}
		h.Force(int64(n))
	}
	return n, err
}

// waitRoom waits, while the budget is spent past the bound and the
// connection holds bytes no call took, for room; false when recvWait
// passed without it.
func (c *recvConn) waitRoom() bool {
	deadline := time.Time{}
	for c.b.Used() >= c.b.Limit()+c.over && c.unclaimed() > 0 {
		now := time.Now()
		if deadline.IsZero() {
			deadline = now.Add(c.wait)
		} else if now.After(deadline) {
			return false
		}
		time.Sleep(time.Millisecond)
	}
	return true
}

func (c *recvConn) unclaimed() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pending
}

// took gives back what a message of n bytes a call took had charged.
func (c *recvConn) took(n int) {
	c.mu.Lock()
	give := min(c.pending, int64(n)+frameCost(n))
	c.pending -= give
	c.mu.Unlock()
	c.b.Release(give)
}

// started and ended count the connection's calls; when none is open,
// what is unclaimed is framing, and is given back.
func (c *recvConn) started() {
	c.mu.Lock()
	c.calls++
	c.mu.Unlock()
}

func (c *recvConn) ended() {
	c.mu.Lock()
	c.calls--
	give := int64(0)
	if c.calls == 0 {
		give, c.pending = c.pending, 0
	}
	c.mu.Unlock()
	c.b.Release(give)
}

func (c *recvConn) Close() error {
	c.mu.Lock()
	give := c.pending
	c.pending = 0
	c.mu.Unlock()
	c.b.Release(give)
	return c.Conn.Close()
}

// recvAddr is a metered connection's remote address, with the way back to
// its meter.
type recvAddr struct {
	net.Addr
	c *recvConn
}

func (a recvAddr) Unwrap() net.Addr { return a.Addr }

// meterOf is the receive meter of a call's connection; nil without one.
func meterOf(ctx context.Context) *recvConn {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return nil
	}
	a, ok := door.FindAddr[recvAddr](p.Addr)
	if !ok {
		return nil
	}
	return a.c
}

// recv receives a call's next message, and gives back to the memory
// budget what its connection's receive meter had charged for it: the
// call's own hold takes it over.
func (s *Server) recv(ss grpc.ServerStream, f *grpcwire.Frame) error {
	err := ss.RecvMsg(f)
	if err == nil {
		if m := meterOf(ss.Context()); m != nil {
			m.took(len(f.B))
		}
	}
	return err
}
