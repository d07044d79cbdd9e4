package door

import (
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ratebatch/ratebatch/internal/testpoll"
)

// acceptOne dials ln from local (nil: any address) and returns the
// connection ln accepted.
func acceptOne(t *testing.T, ln net.Listener, local net.Addr) (server, client net.Conn) {
	t.Helper()
	type accepted struct {
		c   net.Conn
		err error
	}
	ch := make(chan accepted, 1)
	go func() { c, err := ln.Accept(); ch <- accepted{c, err} }()
	d := net.Dialer{LocalAddr: local, Timeout: 5 * time.Second}
	client, err := d.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	a := <-ch
	if a.err != nil {
		t.Fatal(a.err)
	}
	t.Cleanup(func() { a.c.Close() })
	return a.c, client
}

// Connections past a bound are accepted, marked and not counted; closing
// one counted makes room; the per-client bound counts each address apart.
func TestConnsBoundsConnections(t *testing.T) {
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tcp.Close()
	c := &Conns{Max: 3, PerClient: 2}
	ln := c.Listener(tcp)
	a1, _ := acceptOne(t, ln, nil)
	a2, _ := acceptOne(t, ln, nil)
	over, _ := acceptOne(t, ln, nil) // a third from 127.0.0.1
	if ConnRefused(a1.RemoteAddr(), time.Hour) != nil || ConnRefused(a2.RemoteAddr(), time.Hour) != nil {
		t.Fatal("a connection within the bounds refused")
	}
	r := ConnRefused(over.RemoteAddr(), 10*time.Millisecond)
	if r == nil || !strings.Contains(r.Msg, "limits.max_connections_per_client") || KindOf(r) != Refused {
		t.Fatalf("the client's third connection: %v, want a refusal naming limits.max_connections_per_client", r)
	}
	other := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}
	b1, _ := acceptOne(t, ln, other) // another client: within its own bound
	if ConnRefused(b1.RemoteAddr(), time.Hour) != nil || c.Open() != 3 {
		t.Fatalf("another client's first connection refused, or %d counted, want 3", c.Open())
	}
	b2, _ := acceptOne(t, ln, other)
	if r := ConnRefused(b2.RemoteAddr(), time.Hour); r == nil || !strings.Contains(r.Msg, "limits.max_connections)") {
		t.Fatalf("a fourth connection: %v, want a refusal naming limits.max_connections", r)
	}
	// The refused one closes itself; a closed one gives its room back,
	// once however often it is closed.
	testpoll.Until(t, "the refused connection to close", func() bool {
		over.SetReadDeadline(time.Now())
		_, err := over.Read(make([]byte, 1))
		return err != nil && !strings.Contains(err.Error(), "timeout")
	})
	a1.Close()
	a1.Close()
	if c.Open() != 2 {
		t.Fatalf("%d counted after a close, want 2", c.Open())
	}
	a3, _ := acceptOne(t, ln, nil)
	if ConnRefused(a3.RemoteAddr(), time.Hour) != nil {
		t.Fatal("a connection refused after another closed")
	}
	if TCPAddr(a3.RemoteAddr()) == nil || GRPCSource(a3.RemoteAddr()) == 0 {
		t.Fatal("a counted connection's address is not its TCP address")
	}
}

// Without a bound nothing is wrapped.
func TestConnsUnbounded(t *testing.T) {
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tcp.Close()
	var nilConns *Conns
	if nilConns.Listener(tcp) != tcp || (&Conns{}).Listener(tcp) != tcp {
		t.Fatal("an unbounded Conns wrapped its listener")
	}
}

// pacedConn records PaceWrites, as rawconn.Conn has it, beside a TCP
// connection's CloseWrite and SyscallConn.
type pacedConn struct {
	*net.TCPConn
	paced bool
}

func (p *pacedConn) PaceWrites() { p.paced = true }

// pacedListener wraps each accepted connection in a pacedConn.
type pacedListener struct {
	net.Listener
	last *pacedConn
}

func (l *pacedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.last = &pacedConn{TCPConn: c.(*net.TCPConn)}
	return l.last, nil
}

// A counted connection is seen through as the one it wraps: a streamed
// answer's pacing (rawconn.Conn.PaceWrites), a lingering close's half
// close (CloseWrite) and a hang-up watch's socket (SyscallConn) reach the
// connection underneath, or the stream is cut at the write timeout and
// the lingering close resets its client.
func TestCountedConnSeesThrough(t *testing.T) {
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tcp.Close()
	pl := &pacedListener{Listener: tcp}
	ln := (&Conns{Max: 4}).Listener(pl)
	c, client := acceptOne(t, ln, nil)
	p, ok := c.(interface{ PaceWrites() })
	if !ok {
		t.Fatal("a counted connection has no PaceWrites")
	}
	p.PaceWrites()
	if !pl.last.paced {
		t.Fatal("PaceWrites did not reach the connection underneath")
	}
	cw, ok := c.(interface{ CloseWrite() error })
	if !ok {
		t.Fatal("a counted connection has no CloseWrite")
	}
	if err := cw.CloseWrite(); err != nil {
		t.Fatalf("CloseWrite: %v", err)
	}
	client.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := client.Read(make([]byte, 1)); n != 0 || err == nil || strings.Contains(err.Error(), "timeout") {
		t.Fatalf("after the half close the client read %d, %v; want EOF", n, err)
	}
	if _, ok := c.(interface {
		SyscallConn() (syscall.RawConn, error)
	}); !ok {
		t.Fatal("a counted connection has no SyscallConn")
	}
}
