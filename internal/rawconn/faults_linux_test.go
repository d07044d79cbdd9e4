//go:build linux

package rawconn

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"
)

// A peer that resets the connection in the middle of a body: the reader
// gets the bytes that came, then ECONNRESET as a *net.OpError for read,
// never io.EOF (a truncated body must not read as a complete one).
func TestResetMidBody(t *testing.T) {
	c, s := pair(t)
	body := make([]byte, 256<<10)
	if _, err := c.Write(body[:100<<10]); err != nil {
		t.Fatal(err)
	}
	got := 0
	buf := make([]byte, 16<<10)
	for got < 100<<10 { // read what was sent before the reset
		n, err := s.Read(buf)
		if err != nil {
			t.Fatalf("after %d bytes: %v", got, err)
		}
		got += n
	}
	c.(*Conn).SetLinger(0)
	c.Close() // RST
	var err error
	for err == nil {
		_, err = s.Read(buf)
	}
	if err == io.EOF || !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("read after a reset mid-body = %v, want ECONNRESET", err)
	}
	var oe *net.OpError
	if !errors.As(err, &oe) || oe.Op != "read" {
		t.Fatalf("%#v is not a *net.OpError for read", err)
	}
}

// A peer that stops reading: a write blocks once the socket buffers are
// full, and fails at its deadline with the count of what went; without a
// deadline, closing the connection ends it.
func TestPeerStopsReading(t *testing.T) {
	t.Run("deadline", func(t *testing.T) {
		_, s := pair(t) // the client never reads
		big := make([]byte, 64<<20)
		start := time.Now()
		s.SetWriteDeadline(start.Add(200 * time.Millisecond))
		n, err := s.Write(big)
		assertTimedOut(t, err, time.Since(start), 200*time.Millisecond)
		if n <= 0 || n >= len(big) {
			t.Fatalf("wrote %d of %d bytes; want the socket buffers' worth", n, len(big))
		}
	})
	t.Run("closed", func(t *testing.T) {
		_, s := pair(t)
		errc := make(chan error, 1)
		go func() {
			_, err := s.Write(make([]byte, 64<<20))
			errc <- err
		}()
		// Closing must end the write whatever its state: blocked on the full
		// buffers (most likely by then) or not yet begun.
		time.AfterFunc(50*time.Millisecond, func() { s.Close() })
		select {
		case err := <-errc:
			if !errors.Is(err, net.ErrClosed) {
				t.Fatalf("blocked write after Close = %v, want net.ErrClosed", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("a write blocked on a peer that does not read outlived Close")
		}
	})
}

// Deadlines under load: many connections whose deadlines are pushed later
// at every message, as fasthttp does, while bytes flow on them; then half
// of the peers fall silent. The silent ones time out from their last
// deadline on and within its slack (never early), and the others carry on
// reading every byte.
func TestDeadlinesUnderLoad(t *testing.T) {
	const (
		conns   = 32
		msgs    = 200
		timeout = 150 * time.Millisecond
	)
	type result struct {
		read     int
		err      error
		lastWant time.Time
		failedAt time.Time
	}
	results := make([]result, conns)
	var wg sync.WaitGroup
	for i := range conns {
		c, s := pair(t)
		silent := i%2 == 0
		wg.Go(func() { // the peer: msgs messages, then silence or the end
			for range msgs {
				if _, err := c.Write([]byte("0123456789abcdef")); err != nil {
					return
				}
			}
			if !silent {
				c.Close()
			}
		})
		wg.Go(func() { // the reader: a fresh deadline before every read
			buf := make([]byte, 16)
			r := &results[i]
			for {
				r.lastWant = time.Now().Add(timeout)
				s.SetReadDeadline(r.lastWant)
				n, err := io.ReadFull(s, buf)
				r.read += n
				if err != nil {
					r.err, r.failedAt = err, time.Now()
					return
				}
			}
		})
	}
	wg.Wait()
	for i, r := range results {
		want := msgs * 16
		if r.read != want {
			t.Errorf("conn %d read %d bytes, want %d", i, r.read, want)
		}
		if i%2 == 1 {
			if r.err != io.EOF {
				t.Errorf("conn %d, whose peer closed: %v, want io.EOF", i, r.err)
			}
			continue
		}
		if !errors.Is(r.err, os.ErrDeadlineExceeded) {
			t.Errorf("conn %d, whose peer fell silent: %v, want a timeout", i, r.err)
			continue
		}
		if r.failedAt.Before(r.lastWant) {
			t.Errorf("conn %d timed out %v before its deadline", i, r.lastWant.Sub(r.failedAt))
		}
		if late := r.failedAt.Sub(r.lastWant); late > timeout/slackShare+2*time.Second {
			t.Errorf("conn %d timed out %v after its deadline", i, late)
		}
	}
}
