package dispatcher

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratebatch/ratebatch/policy"
)

// rawUpstream listens on loopback and answers each request it reads by
// answer, which writes what it likes on the connection, bytes no real
// server would send included, and reports whether the connection may
// carry another request. It returns the address; the listener and every
// connection close when the test ends.
func rawUpstream(t *testing.T, answer func(c net.Conn, body []byte) (keep bool)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		conns = map[net.Conn]bool{}
		wg    sync.WaitGroup
	)
	serve := func(c net.Conn) {
		defer c.Close()
		br := bufio.NewReader(c)
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			body, err := io.ReadAll(req.Body)
			if err != nil || !answer(c, body) {
				return
			}
		}
	}
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns[c] = true
			mu.Unlock()
			wg.Go(func() { serve(c) })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

// hostileDispatcher serves simple through the HTTP client to addr, with
// no retries and the given upstream timeout, logging to the returned
// buffer.
func hostileDispatcher(t *testing.T, addr string, rule policy.Rule, timeout time.Duration, o Outlier) (*Dispatcher, *syncBuffer) {
	t.Helper()
	up, err := NewHTTPUpstream("http://"+addr, 8, timeout)
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	if o.ProbeInterval == 0 {
		o.ProbeInterval = time.Hour
	}
	d := startModel(t, Options{Upstream: up, Outlier: o, Logger: slog.New(slog.NewTextHandler(logs, nil))},
		ModelSpec{Name: "simple", MaxBatch: 8, QueueRows: 64, Planner: newPlanner(rule)})
	return d, logs
}

// The upstream's address is the operator's, not the client's: an upstream
// that refuses connections or drops one gets its callers a 503 or 502
// that says what kind of failure it was and names no address, and the
// readiness the data port answers names none either; the log keeps it.
func TestUpstreamAddressNotInErrors(t *testing.T) {
	refused := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		return ln.Addr().String()
	}()
	reset := rawUpstream(t, func(c net.Conn, _ []byte) bool {
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"outputs\":")
		c.(*net.TCPConn).SetLinger(0) // RST, not FIN: the read fails naming both ends
		return false
	})
	for _, tc := range []struct {
		name, addr string
		status     int
		says       string
	}{
		{"refused", refused, http.StatusServiceUnavailable, "connection refused"},
		{"reset", reset, http.StatusBadGateway, "connection reset"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, logs := hostileDispatcher(t, tc.addr, policy.Fill{Policy: "test", Batch: 1}, 5*time.Second, Outlier{})
			r := d.Submit(context.Background(), "simple", call(t, 1, 1))
			if status(r.Err) != tc.status || !strings.Contains(r.Err.Error(), tc.says) {
				t.Fatalf("%v, want %d saying %q", r.Err, tc.status, tc.says)
			}
			_, port, _ := net.SplitHostPort(tc.addr)
			if msg := r.Err.Error(); strings.Contains(msg, tc.addr) || strings.Contains(msg, ":"+port) {
				t.Errorf("the caller's error names the upstream's address %s: %q", tc.addr, msg)
			}
			if why := d.Unready(); strings.Contains(why, ":"+port) {
				t.Errorf("readiness names the upstream's address %s: %q", tc.addr, why)
			}
			if tc.status == http.StatusBadGateway && !strings.Contains(logs.String(), tc.addr) {
				t.Errorf("the log lacks the upstream's address %s: %q", tc.addr, logs.String())
			}
		})
	}
}
