package grpcproxy

import (
	"bytes"
	"io"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/ratebatch/ratebatch/internal/membudget"
	"github.com/ratebatch/ratebatch/internal/testpoll"
)

// meteredPipe is a metered connection read from a pipe the test writes.
func meteredPipe(t *testing.T, b *membudget.Budget, over int64) (*recvConn, net.Conn) {
	t.Helper()
	server, client := net.Pipe()
	t.Cleanup(func() { server.Close(); client.Close() })
	return &recvConn{Conn: server, b: b, over: over, wait: recvWait}, client
}

// What a connection reads while a call is open is charged until a call
// takes it; what it reads with no call open is not; the framing left
// unclaimed is given back when its last call ends.
func TestRecvMeterCharges(t *testing.T) {
	b := membudget.New(1 << 20)
	c, client := meteredPipe(t, b, 0)
	go client.Write(make([]byte, 1000))
	buf := make([]byte, 4096)
	if n, _ := c.Read(buf); n != 1000 || b.Used() != 0 {
		t.Fatalf("read %d with no call open: %d charged, want none", n, b.Used())
	}
	c.started()
	go client.Write(make([]byte, 3000))
	if n, _ := c.Read(buf); n != 3000 || b.Used() != 3000 {
		t.Fatalf("read %d with a call open: %d charged, want 3000", n, b.Used())
	}
	c.took(2000) // a 2000-byte message: it, and its framing
	if u, want := b.Used(), 3000-2000-frameCost(2000); u != want {
		t.Fatalf("%d charged after a 2000-byte message was taken, want %d", u, want)
	}
	go client.Write(make([]byte, 500))
	c.Read(buf)
	c.ended()
	if b.Used() != 0 {
		t.Fatalf("%d charged after the last call ended", b.Used())
	}
}

// Past the budget by more than one largest message, a connection holding
// unclaimed bytes reads no more until there is room; one holding none
// reads on.
func TestRecvMeterWaitsForRoom(t *testing.T) {
	b := membudget.New(8 << 10)
	c, client := meteredPipe(t, b, 4<<10)
	c.started()
	go client.Write(make([]byte, 12<<10))
	buf := make([]byte, 12<<10)
	if n, _ := io.ReadFull(c, buf[:12<<10]); n != 12<<10 {
		t.Fatalf("read %d", n)
	}
	if b.Used() != 12<<10 {
		t.Fatalf("%d charged, want %d", b.Used(), 12<<10)
	}
	// Spent past its bound: the next read waits.
	read := make(chan int, 1)
	go client.Write([]byte("more"))
	go func() { n, _ := c.Read(buf); read <- n }()
	testpoll.Until(t, "the read to wait for room", func() bool {
		stacks := make([]byte, 1<<20)
		return bytes.Contains(stacks[:runtime.Stack(stacks, true)], []byte("(*recvConn).waitRoom"))
	})
	select {
	case n := <-read:
		t.Fatalf("read %d bytes past the bound", n)
	default:
	}
	c.took(12 << 10) // a call takes the message: room
	if n := <-read; n != 4 {
		t.Fatalf("read %d once there was room, want 4", n)
	}
	testpoll.Until(t, "what was read to be charged", func() bool { return b.Used() == 4 })
}

// A connection that finds no room within its wait is closed, and gives
// back what it held.
func TestRecvMeterClosesAfterItsWait(t *testing.T) {
	b := membudget.New(8 << 10)
	c, client := meteredPipe(t, b, 0)
	c.wait = 10 * time.Millisecond
	c.started()
	go client.Write(make([]byte, 8<<10))
	buf := make([]byte, 8<<10)
	if n, _ := io.ReadFull(c, buf); n != 8<<10 {
		t.Fatalf("read %d", n)
	}
	if _, err := c.Read(buf); err == nil {
		t.Fatal("a read past the bound with no room coming succeeded")
	}
	c.Close()
	if b.Used() != 0 {
		t.Fatalf("%d still charged after the connection closed", b.Used())
	}
}
