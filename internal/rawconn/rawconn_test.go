package rawconn

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// pair returns the two ends of a loopback TCP connection, both wrapped.
func pair(t *testing.T) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := Listener{Listener: ln}.Accept()
		if err != nil {
			t.Error(err)
		}
		accepted <- c
	}()
	client, err = Dialer(func(addr string) (net.Conn, error) { return net.Dial("tcp", addr) })(ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server = <-accepted
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

func TestWrapsTCPOnLinux(t *testing.T) {
	c, s := pair(t)
	for _, conn := range []net.Conn{c, s} {
		_, plain := conn.(*net.TCPConn)
		if raw := !plain; raw != (runtime.GOOS == "linux") {
			t.Errorf("%T: wrapped %v on %s", conn, raw, runtime.GOOS)
		}
		// The hang-up watch and gRPC read the socket through syscall.Conn.
		if _, ok := conn.(syscall.Conn); !ok {
			t.Errorf("%T does not implement syscall.Conn", conn)
		}
	}
	p1, p2 := net.Pipe()
	defer p1.Close()
	defer p2.Close()
	if got := Wrap(p1); got != p1 {
		t.Errorf("Wrap(net.Pipe) = %T, want the pipe itself", got)
	}
}

// TestRoundTrips moves payloads larger than the socket buffers both ways,
// so that writes meet EAGAIN and wait for the poller, and reads see the
// bytes in many pieces.
func TestRoundTrips(t *testing.T) {
	for _, size := range []int{1, 100, 64 << 10, 8 << 20} {
		c, s := pair(t)
		want := make([]byte, size)
		for i := range want {
			want[i] = byte(i * 7)
		}
		errc := make(chan error, 1)
		go func() {
			n, err := c.Write(want)
			if err == nil && n != size {
				err = errors.New("short write")
			}
			errc <- err
		}()
		got := make([]byte, size)
		if _, err := io.ReadFull(s, got); err != nil {
			t.Fatalf("size %d: read: %v", size, err)
		}
		if err := <-errc; err != nil {
			t.Fatalf("size %d: write: %v", size, err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("size %d: the bytes read differ from those written", size)
		}
	}
}

func TestErrorsAsNetConn(t *testing.T) {
	buf := make([]byte, 16)
	tests := []struct {
		name  string
		setup func(c, s net.Conn)
		check func(t *testing.T, n int, err error)
	}{
		{"end of stream", func(c, s net.Conn) { c.Close() }, func(t *testing.T, n int, err error) {
			if n != 0 || err != io.EOF {
				t.Errorf("read after the peer closed = %d, %v; want 0, io.EOF", n, err)
			}
		}},
		{"deadline", func(c, s net.Conn) { s.SetReadDeadline(time.Now().Add(20 * time.Millisecond)) }, func(t *testing.T, n int, err error) {
			var ne net.Error
			if !errors.As(err, &ne) || !ne.Timeout() || !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Errorf("read past the deadline = %v, want a timeout", err)
			}
			var oe *net.OpError
			if !errors.As(err, &oe) || oe.Op != "read" {
				t.Errorf("read past the deadline = %#v, want a *net.OpError for read", err)
			}
			if errors.As(oe.Err, new(*net.OpError)) {
				t.Errorf("%v wraps one OpError in another", err)
			}
		}},
		{"closed here", func(c, s net.Conn) { s.Close() }, func(t *testing.T, n int, err error) {
			if !errors.Is(err, net.ErrClosed) {
				t.Errorf("read on a closed conn = %v, want net.ErrClosed", err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, s := pair(t)
			tt.setup(c, s)
			n, err := s.Read(buf)
			tt.check(t, n, err)
		})
	}
}

func TestWriteAfterPeerReset(t *testing.T) {
	c, s := pair(t)
	// A reset peer: SO_LINGER 0 makes Close send RST.
	if err := c.(interface{ SetLinger(int) error }).SetLinger(0); err != nil {
		t.Fatal(err)
	}
	c.Close()
	var err error
	for i := 0; i < 100 && err == nil; i++ { // the first write may be buffered
		_, err = s.Write(make([]byte, 1024))
		time.Sleep(time.Millisecond)
	}
	var oe *net.OpError
	if !errors.As(err, &oe) || oe.Op != "write" {
		t.Fatalf("write to a reset peer = %v, want a *net.OpError for write", err)
	}
}

func TestZeroLength(t *testing.T) {
	c, s := pair(t)
	if n, err := c.Write(nil); n != 0 || err != nil {
		t.Errorf("Write(nil) = %d, %v", n, err)
	}
	if n, err := s.Read(nil); n != 0 || err != nil {
		t.Errorf("Read(nil) = %d, %v", n, err)
	}
}
