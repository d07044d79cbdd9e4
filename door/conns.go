package door

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Conns bounds the connections the data ports hold open, both doors'
// together: each costs buffers, a goroutine and its state whatever it
// sends (about 40 KiB an idle HTTP connection, more for gRPC), so that an
// unbounded number of them, idle or not, is memory the budget of requests
// never sees. A connection past a bound is accepted, to be refused in its
// own protocol (the HTTP door answers 503 with Retry-After, the gRPC door
// refuses its calls with RESOURCE_EXHAUSTED), then closed; it is not
// counted. The zero Conns, and a nil one, bound nothing.
type Conns struct {
	// Max bounds the connections of every client together; 0: none.
	Max int
	// PerClient bounds one client's (one IP address's); 0: none.
	PerClient int

	mu     sync.Mutex
	total  int
	client map[string]int
}

// Listener counts the connections ln accepts (an open one until its
// Close) and marks those past a bound (Refused reads the mark).
func (c *Conns) Listener(ln net.Listener) net.Listener {
	if c == nil || c.Max <= 0 && c.PerClient <= 0 {
		return ln
	}
	return &connListener{Listener: ln, c: c}
}

type connListener struct {
	net.Listener
	c *Conns
}

func (l *connListener) Accept() (net.Conn, error) {
	nc, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	ip := hostOf(nc.RemoteAddr())
	cc := &countedConn{Conn: nc, c: l.c, ip: ip}
	cc.addr = connAddr{Addr: nc.RemoteAddr(), conn: cc} // boxed once, not at each RemoteAddr
	cc.refused = l.c.admit(ip)
	return cc, nil
}

// admit counts a new connection from ip, or says why it is refused.
func (c *Conns) admit(ip string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.Max > 0 && c.total >= c.Max:
		return fmt.Sprintf("the proxy holds its most connections (%d, limits.max_connections); retry later", c.Max)
	case c.PerClient > 0 && c.client[ip] >= c.PerClient:
		return fmt.Sprintf("this client holds its most connections (%d, limits.max_connections_per_client); retry later", c.PerClient)
	}
	c.total++
	if c.PerClient > 0 {
		if c.client == nil {
			c.client = map[string]int{}
		}
		c.client[ip]++
	}
	return ""
}

func (c *Conns) release(ip string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.total--
	if c.PerClient > 0 {
		if c.client[ip]--; c.client[ip] <= 0 {
			delete(c.client, ip)
		}
	}
}

// Open is the number of connections counted.
func (c *Conns) Open() int {
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.total
}

func hostOf(a net.Addr) string {
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.IP.String()
	}
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return host
}

// countedConn is a connection Conns counts, or one it refused.
type countedConn struct {
	net.Conn
	c       *Conns
	ip      string
	addr    net.Addr // a connAddr
	refused string   // why it is past a bound; "": counted
	closing atomic.Bool
	closed  atomic.Bool
}

// RemoteAddr carries the connection's verdict to its door, which reads
// it where a request or call names its peer's address (ConnRefused).
func (cc *countedConn) RemoteAddr() net.Addr { return cc.addr }

func (cc *countedConn) Close() error {
	if !cc.closed.Swap(true) && cc.refused == "" {
		cc.c.release(cc.ip)
	}
	return cc.Conn.Close()
}

// SyscallConn gives the wrapped connection's: a door peeks at its socket
// (a client's hang-up) through it.
func (cc *countedConn) SyscallConn() (syscall.RawConn, error) {
	sc, ok := cc.Conn.(syscall.Conn)
	if !ok {
		return nil, errors.ErrUnsupported
	}
	return sc.SyscallConn()
}

// PaceWrites gives the wrapped connection's (rawconn.Conn.PaceWrites), so
// that a streamed answer's writes are each bounded through the count.
func (cc *countedConn) PaceWrites() {
	if p, ok := cc.Conn.(interface{ PaceWrites() }); ok {
		p.PaceWrites()
	}
}

// CloseWrite gives the wrapped connection's, so that a lingering close
// (package linger) half-closes through the count.
func (cc *countedConn) CloseWrite() error {
	if cw, ok := cc.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported
}

// connAddr is a counted connection's remote address, with the way back
// to its verdict.
type connAddr struct {
	net.Addr
	conn *countedConn
}

// Unwrap is the address it wraps (WrappedAddr).
func (a connAddr) Unwrap() net.Addr { return a.Addr }

// WrappedAddr is a connection's remote address that carries more than the
// address, from a listener that wraps the connection (Conns', the gRPC
// door's receive meter); Unwrap gives the address it wraps.
type WrappedAddr interface {
	net.Addr
	Unwrap() net.Addr
}

// FindAddr returns the first address of type A in addr's wrappings
// (WrappedAddr), addr itself first.
func FindAddr[A net.Addr](addr net.Addr) (A, bool) {
	for {
		if a, ok := addr.(A); ok {
			return a, true
		}
		w, ok := addr.(WrappedAddr)
		if !ok {
			var zero A
			return zero, false
		}
		addr = w.Unwrap()
	}
}

// ConnRefused reports, for the remote address of a connection a Conns
// listener accepted, whether it is past a bound: the refusal to answer
// its requests with, and the connection is closed after closeAfter, time
// for its door to send the refusal. nil for any other connection.
func ConnRefused(addr net.Addr, closeAfter time.Duration) *Refusal {
	a, ok := FindAddr[connAddr](addr)
	if !ok || a.conn.refused == "" {
		return nil
	}
	if !a.conn.closing.Swap(true) {
		time.AfterFunc(closeAfter, func() { a.conn.Close() })
	}
	return &Refusal{Reason: "connections", Msg: a.conn.refused}
}

// TCPAddr is the TCP address behind addr (a wrapped one's included), nil
// for any other transport.
func TCPAddr(addr net.Addr) *net.TCPAddr {
	ta, _ := FindAddr[*net.TCPAddr](addr)
	return ta
}
