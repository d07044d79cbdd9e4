package linger_test

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"testing"
	"time"

	"github.com/ratebatch/ratebatch/internal/linger"
)

// serveOnce answers the first line-less chunk of every connection with
// answer and closes it, marking it first when mark is set: a server that
// refuses a request before reading its body.
func serveOnce(t *testing.T, o linger.Options, mark bool, answer string) (*linger.Listener, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := linger.NewListener(ln, o)
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				var b [1]byte
				if _, err := c.Read(b[:]); err != nil {
					c.Close()
					return
				}
				if mark && !linger.Mark(c) {
					t.Error("Mark refused a connection of the Listener")
				}
				io.WriteString(c, answer)
				c.Close()
			}()
		}
	}()
	return l, ln.Addr().String()
}

// sendThenRead writes size bytes and then reads the answer, as an HTTP
// client sends a whole body before it reads.
func sendThenRead(addr string, size int) (string, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write(bytes.Repeat([]byte("x"), size)); err != nil {
		return "", err
	}
	return bufio.NewReader(c).ReadString('\n')
}

func TestMarkedCloseLetsTheClientFinishAndRead(t *testing.T) {
	tests := []struct {
		name string
		size int
	}{
		{"fits the socket buffers", 64 << 10},
		{"larger than the buffers", 8 << 20},
	}
	_, addr := serveOnce(t, linger.Options{}, true, "413 refused\n")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for i := range 10 {
				got, err := sendThenRead(addr, tt.size)
				if err != nil || got != "413 refused\n" {
					t.Fatalf("exchange %d: %q, %v; want the answer", i, got, err)
				}
			}
		})
	}
}

// A client that never stops sending is cut off at the timeout, and the
// slot it held comes back.
func TestLingerEndsAtTheTimeout(t *testing.T) {
	l, addr := serveOnce(t, linger.Options{Timeout: 200 * time.Millisecond}, true, "413 refused\n")
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	chunk := bytes.Repeat([]byte("x"), 32<<10)
	start := time.Now()
	var werr error
	for time.Since(start) < 10*time.Second {
		if _, werr = c.Write(chunk); werr != nil {
			break
		}
	}
	if werr == nil {
		t.Fatal("writes never failed: the lingering connection was not closed at its timeout")
	}
	for l.Lingering() != 0 && time.Since(start) < 10*time.Second {
		time.Sleep(10 * time.Millisecond)
	}
	if n := l.Lingering(); n != 0 {
		t.Fatalf("%d connections still lingering after the timeout", n)
	}
}

// Past Max lingering connections a close is immediate: the client keeps
// its connection open and sending, so the slot stays held, and a second
// marked connection is closed outright.
func TestLingerIsBounded(t *testing.T) {
	l, addr := serveOnce(t, linger.Options{Max: 1, Timeout: 5 * time.Second}, true, "413 refused\n")
	first, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	first.Write([]byte("x"))
	deadline := time.Now().Add(5 * time.Second)
	for l.Lingering() != 1 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if n := l.Lingering(); n != 1 {
		t.Fatalf("lingering %d, want the first connection's 1", n)
	}
	second, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	second.Write([]byte("x"))
	second.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, err := io.ReadAll(second)
	if string(got) != "413 refused\n" || err != nil {
		t.Fatalf("second connection read %q, %v; want the answer and the end", got, err)
	}
	if n := l.Lingering(); n != 1 {
		t.Fatalf("lingering %d, want 1 (the second closed at once)", n)
	}
}
