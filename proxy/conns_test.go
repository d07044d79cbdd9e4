package proxy_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ratebatch/ratebatch/door"
	"github.com/ratebatch/ratebatch/internal/testpoll"
	"github.com/ratebatch/ratebatch/proxy"
)

// A connection past the doors' bound is answered 503 with Retry-After and
// a KServe error naming the bound, and closed; the connections within it
// are served; once one closes, a new one is served.
func TestConnectionBound(t *testing.T) {
	conns := &door.Conns{Max: 1}
	front := startFront(t, proxy.Options{Backend: door.Backend{Batcher: echoBatcher{}, Conns: conns},
		Upstream: mustURL("http://127.0.0.1:1"), MaxBodyBytes: 1 << 20, RetryAfter: 2 * time.Second})
	addr := strings.TrimPrefix(front, "http://")
	request := string(post(inferBody(100)))
	first, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	firstR := bufio.NewReader(first)
	ask := func(c net.Conn, r *bufio.Reader) *http.Response {
		t.Helper()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.WriteString(c, request); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(r, nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	if resp := ask(first, firstR); resp.StatusCode != 200 {
		t.Fatalf("the first connection: %d", resp.StatusCode)
	}
	ans := exchange(t, front, []byte(request), false)
	if ans.status != http.StatusServiceUnavailable || ans.header.Get("Retry-After") != "2" || !strings.Contains(string(ans.body), "limits.max_connections") {
		t.Fatalf("a connection past the bound: %d, Retry-After %q, %s; want 503, 2, naming limits.max_connections", ans.status, ans.header.Get("Retry-After"), ans.body)
	}
	if resp := ask(first, firstR); resp.StatusCode != 200 {
		t.Fatalf("the first connection after the refusal: %d", resp.StatusCode)
	}
	first.Close()
	testpoll.Until(t, "the first connection to be closed", func() bool { return conns.Open() == 0 })
	if ans := exchange(t, front, []byte(request), false); ans.status != 200 {
		t.Fatalf("a new connection once the first closed: %d %s", ans.status, ans.body)
	}
}
