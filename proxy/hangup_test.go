//go:build unix

// The watch peeks at sockets only on unix (hangup_unix.go); elsewhere no
// call is watched and there is nothing to test.

package proxy

import (
	"errors"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ratebatch/ratebatch/internal/testpoll"
)

// longAgo is an arrival old enough that a watched call is due for a check
// at once: the tests poll by hand (pollNow) instead of sleeping until the
// timer has.
var longAgo = time.Now().Add(-time.Hour)

// pollNow makes every watched call due and runs one poll on the test's
// goroutine: when it returns, every watched socket has been peeked at. The
// timer may poll concurrently; all watched calls stay due together.
func pollNow(h *hangUps) {
	h.mu.Lock()
	for _, w := range h.waiting {
		w.next = time.Time{}
	}
	h.mu.Unlock()
	h.poll()
}

// pending reports whether conn has bytes to read, without reading them.
func pending(t *testing.T, conn net.Conn) bool {
	t.Helper()
	rc, err := conn.(syscall.Conn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	rc.Read(func(fd uintptr) bool {
		var b [1]byte
		var err error
		n, _, err = syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		if errors.Is(err, syscall.EAGAIN) {
			n = 0
		}
		return true
	})
	return n > 0
}

// tcpPair returns both ends of a loopback TCP connection.
func tcpPair(t *testing.T) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server, err = ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

func TestWatchHangUp(t *testing.T) {
	for _, tc := range []struct {
		name      string
		client    func(net.Conn)
		wantGone  bool
		pipelined string // sent by the client and still unread after the watch
	}{
		{"client closes", func(c net.Conn) { c.Close() }, true, ""},
		{"client resets", func(c net.Conn) { c.(*net.TCPConn).SetLinger(0); c.Close() }, true, ""},
		{"client pipelines its next request", func(c net.Conn) { c.Write([]byte("GET / HTTP/1.1\r\n")) }, false, "GET / HTTP/1.1\r\n"},
		{"client waits", func(net.Conn) {}, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client, server := tcpPair(t)
			var h hangUps
			ctx, w := h.watch(server, longAgo)
			defer h.stop(w)
			ctx.Done() // the call waits: the watch starts
			tc.client(client)
			if tc.wantGone {
				testpoll.Until(t, "hang-up not seen", func() bool { pollNow(&h); return ctx.Err() != nil })
				<-ctx.Done()
			} else {
				// What the client sent has arrived before the socket is
				// peeked at, so a watch that took data for a hang-up fails.
				if tc.pipelined != "" {
					testpoll.Until(t, "the pipelined bytes never arrived", func() bool { return pending(t, server) })
				}
				pollNow(&h)
				if ctx.Err() != nil {
					t.Fatal("watch ended for a client that is still there")
				}
			}
			if tc.pipelined != "" {
				buf := make([]byte, 32)
				server.SetReadDeadline(time.Now().Add(time.Second))
				n, err := server.Read(buf)
				if err != nil || string(buf[:n]) != tc.pipelined {
					t.Fatalf("the watch consumed the pipelined request: read %q, %v", buf[:n], err)
				}
			}
		})
	}
}

// TestHangUpsWatchesEachCallApart: one timer watches many calls; only the
// call whose client hung up ends, a stopped call leaves the watch (its
// client's later hang-up ends nothing), and the timer stops once nothing
// waits.
func TestHangUpsWatchesEachCallApart(t *testing.T) {
	var h hangUps
	const n = 8
	clients, servers := make([]net.Conn, n), make([]net.Conn, n)
	ctxs := make([]interface{ Err() error }, n)
	waits := make([]*hangUpWait, n)
	for i := range n {
		c, s := tcpPair(t)
		clients[i] = c
		servers[i] = s
		ctx, w := h.watch(s, longAgo)
		ctx.Done() // the call waits, as Submit does when its answer is not there
		ctxs[i], waits[i] = ctx, w
	}
	h.stop(waits[5]) // answered early
	clients[3].Close()
	clients[5].Close() // hangs up after its answer: not watched any more
	// Both hang-ups are visible on the proxy's side before the last poll,
	// which peeks at every watched call: a watch that still held call 5,
	// or ended a connected call, fails below.
	testpoll.Until(t, "call 5's hang-up never reached its socket", func() bool { return peerClosed(servers[5]) })
	testpoll.Until(t, "call 3's hang-up not seen", func() bool { pollNow(&h); return ctxs[3].Err() != nil })
	pollNow(&h)
	for i := range n {
		gone := ctxs[i].Err() != nil
		if want := i == 3; gone != want {
			t.Errorf("call %d: ended %v, want %v", i, gone, want)
		}
	}
	for i, w := range waits {
		if i != 5 {
			h.stop(w)
		}
	}
	h.mu.Lock()
	left := len(h.waiting)
	h.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d calls still watched after every stop", left)
	}
	// A poll that finds nothing waiting leaves the timer unarmed.
	h.poll()
	h.mu.Lock()
	armed := h.armed
	h.mu.Unlock()
	if armed {
		t.Error("the timer still runs with nothing waiting")
	}
}

// TestHangUpsConcurrent watches and stops from many goroutines while the
// timer polls (run with -race).
func TestHangUpsConcurrent(t *testing.T) {
	var h hangUps
	_, s := tcpPair(t)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 200 {
				ctx, w := h.watch(s, time.Now().Add(-hangUpPoll))
				if j%2 == 0 {
					ctx.Done()
				}
				if j%50 == 0 {
					h.poll() // as the timer does, beside it
				}
				h.stop(w)
				if ctx.Err() != nil {
					t.Error("a watch ended while its client stayed connected")
					return
				}
			}
		}()
	}
	wg.Wait()
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.waiting) != 0 {
		t.Fatalf("%d calls still watched", len(h.waiting))
	}
}

// A call joins the watch only once it waits: one answered before it asked
// for Done costs no slot and arms no timer, and a Done after stop (a
// context kept past its call) starts nothing.
func TestHangUpsWatchOnlyWaitingCalls(t *testing.T) {
	tests := []struct {
		name        string
		use         func(ctx interface{ Done() <-chan struct{} }, stop func())
		wantWatched int
	}{
		{"answered without waiting", func(_ interface{ Done() <-chan struct{} }, stop func()) { stop() }, 0},
		{"waiting", func(ctx interface{ Done() <-chan struct{} }, _ func()) { ctx.Done(); ctx.Done() }, 1},
		{"asked after stop", func(ctx interface{ Done() <-chan struct{} }, stop func()) { stop(); ctx.Done() }, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var h hangUps
			_, s := tcpPair(t)
			ctx, w := h.watch(s, time.Now())
			tt.use(ctx, func() { h.stop(w) })
			h.mu.Lock()
			watched, armed := len(h.waiting), h.armed
			h.mu.Unlock()
			if watched != tt.wantWatched || armed != (tt.wantWatched > 0) {
				t.Fatalf("%d calls watched, timer armed %v; want %d", watched, armed, tt.wantWatched)
			}
			h.stop(w)
			h.mu.Lock()
			if h.timer != nil {
				h.timer.Stop()
			}
			h.mu.Unlock()
		})
	}
}
