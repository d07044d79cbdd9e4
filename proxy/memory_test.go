package proxy_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ratebatch/ratebatch/door"
	"github.com/ratebatch/ratebatch/internal/membudget"
	"github.com/ratebatch/ratebatch/internal/testpoll"
	"github.com/ratebatch/ratebatch/kserve"
	"github.com/ratebatch/ratebatch/proxy"
)

// inferBody is a valid request of the echo batcher's model of about n bytes.
func inferBody(n int) string {
	return fmt.Sprintf(`{"id":"m","inputs":[{"name":"x","datatype":"INT32","shape":[1],"data":[1]}],"parameters":{"pad":%q}}`, strings.Repeat("p", max(n-100, 0)))
}

func post(body string) []byte {
	return fmt.Appendf(nil, "POST /v2/models/simple/infer HTTP/1.1\r\nHost: p\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
}

// The memory budget: a body whose declared length does not fit what is
// left gets 503 with Retry-After before any of it is read; a chunked body
// that grows past it too; small requests are served meanwhile; once the
// large one is answered its bytes are free again.
func TestMemoryBudgetRefusesWhatDoesNotFit(t *testing.T) {
	budget := membudget.New(64 << 10)
	base := startFront(t, proxy.Options{Backend: door.Backend{Batcher: echoBatcher{}, Memory: budget}, Upstream: mustURL("http://triton.invalid:8000"),
		MaxBodyBytes: 1 << 20, Forward: fakeUpstream{}, ReadTimeout: 5 * time.Second, RetryAfter: 2 * time.Second})

	// A large request whose body is still on its way holds its 40 KB.
	big := inferBody(40 << 10)
	c, err := net.Dial("tcp", base[len("http://"):])
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	raw := post(big)
	split := len(raw) - len(big)/2
	if _, err := c.Write(raw[:split]); err != nil {
		t.Fatal(err)
	}
	waitForBudget(t, budget, 40<<10)

	// A second one declares more than is left. Waiting for "100 Continue",
	// it gets the 503 at once (no 100) and sends no body.
	a := exchange(t, base, fmt.Appendf(nil, "POST /v2/models/simple/infer HTTP/1.1\r\nHost: p\r\nExpect: 100-continue\r\nContent-Length: %d\r\n\r\n", len(big)), false)
	msg, ok := kserve.ParseErrorBody(a.body)
	if a.status != http.StatusServiceUnavailable || !ok || !strings.Contains(msg, "memory budget") || a.header.Get("Retry-After") != "2" {
		t.Fatalf("declared past the budget: %d %q %v", a.status, a.body, a.header)
	}
	// Sending its body at once, it gets the 503 once the body is thrown
	// away, and its connection serves on.
	statuses := pipeline(t, base, append(post(big), post(inferBody(100))...), 2)
	if statuses[0] != http.StatusServiceUnavailable || statuses[1] != http.StatusOK {
		t.Fatalf("declared past the budget with its body sent, then a small one on the same connection: %v, want [503 200]", statuses)
	}
	// A chunked one grows past it.
	chunk := strings.Repeat("x", 8<<10)
	var sb strings.Builder
	sb.WriteString("POST /v2/models/simple/infer HTTP/1.1\r\nHost: p\r\nTransfer-Encoding: chunked\r\n\r\n")
	for range 6 {
		fmt.Fprintf(&sb, "%x\r\n%s\r\n", len(chunk), chunk)
	}
	sb.WriteString("0\r\n\r\n")
	if a := exchange(t, base, []byte(sb.String()), false); a.status != http.StatusServiceUnavailable {
		t.Fatalf("chunked past the budget: %d %q", a.status, a.body)
	}
	// Small ones are served.
	for i := range 5 {
		if a := exchange(t, base, post(inferBody(1<<10)), false); a.status != http.StatusOK {
			t.Fatalf("small request %d beside the large one: %d %q", i, a.status, a.body)
		}
	}
	// The large one finishes and is answered; its bytes are free again.
	if _, err := c.Write(raw[split:]); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("the large request: %v %v", resp, err)
	}
	resp.Body.Close()
	waitForBudget(t, budget, 0)
	if a := exchange(t, base, post(big), false); a.status != http.StatusOK {
		t.Fatalf("a large request once the budget is free: %d", a.status)
	}
	if budget.Peak() > budget.Limit()+(8<<10) { // an answer may pass it
		t.Fatalf("peak %d past the budget %d", budget.Peak(), budget.Limit())
	}
}

func waitForBudget(t *testing.T, b *membudget.Budget, atLeast int64) {
	t.Helper()
	testpoll.Until(t, fmt.Sprintf("the budget to hold %d (or, for 0, nothing)", atLeast), func() bool {
		u := b.Used()
		return (atLeast == 0 && u == 0) || (atLeast > 0 && u >= atLeast)
	})
}

// pipeline writes raw on one connection and reads n answers' statuses.
func pipeline(t *testing.T, base string, raw []byte, n int) []int {
	t.Helper()
	c, err := net.Dial("tcp", base[len("http://"):])
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	go c.Write(raw)
	br := bufio.NewReader(c)
	var out []int
	for range n {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("answer %d: %v", len(out)+1, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		out = append(out, resp.StatusCode)
	}
	return out
}

// Memory reserved at a request's headers comes back when the client goes
// before its handler runs: with or without "Expect: 100-continue".
func TestMemoryReservedAtTheHeadersComesBack(t *testing.T) {
	budget := membudget.New(64 << 10)
	base := startFront(t, proxy.Options{Backend: door.Backend{Batcher: echoBatcher{}, Memory: budget}, Upstream: mustURL("http://triton.invalid:8000"),
		MaxBodyBytes: 1 << 20, Forward: fakeUpstream{}, ReadTimeout: 5 * time.Second})
	for _, expect := range []string{"", "Expect: 100-continue\r\n"} {
		c, err := net.Dial("tcp", base[len("http://"):])
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c, "POST /v2/models/simple/infer HTTP/1.1\r\nHost: p\r\n%sContent-Length: %d\r\n\r\n", expect, 40<<10)
		waitForBudget(t, budget, 40<<10)
		c.Close()
		waitForBudget(t, budget, 0)
	}
	// A burst of large bodies at once: only what fits is let through. The
	// connections stay open until every one has its first answer.
	const n = 6
	conns := make([]net.Conn, n)
	for i := range conns {
		c, err := net.Dial("tcp", base[len("http://"):])
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		conns[i] = c
	}
	statuses := make(chan int, n)
	for _, c := range conns {
		go func() {
			fmt.Fprintf(c, "POST /v2/models/simple/infer HTTP/1.1\r\nHost: p\r\nExpect: 100-continue\r\nContent-Length: %d\r\n\r\n", 40<<10)
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				statuses <- 0
				return
			}
			statuses <- resp.StatusCode
		}()
	}
	got := map[int]int{}
	for range n {
		got[<-statuses]++
	}
	if got[http.StatusServiceUnavailable] != n-1 || got[http.StatusContinue] != 1 {
		t.Fatalf("a burst of %d bodies of 40 KiB against 64 KiB: %v, want one told to go on (100) and %d refused at once", n, got, n-1)
	}
}
