package proxy_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ratebatch/ratebatch/dispatcher"
	"github.com/ratebatch/ratebatch/door"
	"github.com/ratebatch/ratebatch/internal/membudget"
	"github.com/ratebatch/ratebatch/internal/testpoll"
	"github.com/ratebatch/ratebatch/kserve"
	"github.com/ratebatch/ratebatch/proxy"
)

// expectClient is a large request sent with "Expect: 100-continue": its
// headers first, its body when told to go on.
type expectClient struct {
	t    *testing.T
	c    net.Conn
	br   *bufio.Reader
	body string
}

func startExpect(t *testing.T, base, body string) *expectClient {
	t.Helper()
	c, err := net.Dial("tcp", base[len("http://"):])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(20 * time.Second))
	fmt.Fprintf(c, "POST /v2/models/simple/infer HTTP/1.1\r\nHost: p\r\nExpect: 100-continue\r\nContent-Length: %d\r\n\r\n", len(body))
	return &expectClient{t: t, c: c, br: bufio.NewReader(c), body: body}
}

// answer reads the next answer's status, Retry-After and body.
func (e *expectClient) answer() (int, string, string) {
	e.t.Helper()
	resp, err := http.ReadResponse(e.br, nil)
	if err != nil {
		e.t.Fatalf("reading an answer: %v", err)
	}
	defer resp.Body.Close()
	var sb strings.Builder
	if resp.StatusCode != http.StatusContinue {
		buf := make([]byte, 4096)
		for {
			n, err := resp.Body.Read(buf)
			sb.Write(buf[:n])
			if err != nil {
				break
			}
		}
	}
	return resp.StatusCode, resp.Header.Get("Retry-After"), sb.String()
}

// send sends the body once told to go on and returns the final status.
func (e *expectClient) send() int {
	e.t.Helper()
	if _, err := e.c.Write([]byte(e.body)); err != nil {
		e.t.Fatal(err)
	}
	st, _, _ := e.answer()
	return st
}

// The large-body lane: with one lane, a second large body waits for the
// first to be read before it is told to go on (its "100 Continue" comes
// then), or is refused 503 with Retry-After once its wait passes the
// bound; small requests are served while it waits; every request is
// answered, and the budget holds nothing afterwards but pooled buffers,
// which the bodies after the first read into. The waits are seen through
// the lane's test hook, not slept for.
func TestLargeBodyLane(t *testing.T) {
	for _, tc := range []struct {
		name string
		wait time.Duration
		// want is the second large request's answer once it stops waiting.
		want int
	}{
		{"the second waits its turn", 20 * time.Second, http.StatusContinue},
		{"the second waits past the bound", time.Millisecond, http.StatusServiceUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			budget := membudget.New(64 << 20)
			base := startFront(t, proxy.Options{Backend: door.Backend{Batcher: echoBatcher{}, Memory: budget}, Upstream: mustURL("http://triton.invalid:8000"),
				MaxBodyBytes: 8 << 20, Forward: fakeUpstream{}, ReadTimeout: 20 * time.Second,
				RetryAfter: 3 * time.Second, LargeBodyBytes: 1 << 20, LargeBodyLanes: 1, LargeBodyWait: tc.wait})
			waiting := make(chan struct{}, 4)
			defer proxy.SetTestHookLaneWait(func() { waiting <- struct{}{} })()
			large := inferBody(3 << 19) // 1.5 MiB

			first := startExpect(t, base, large)
			if st, _, body := first.answer(); st != http.StatusContinue {
				t.Fatalf("the first large request, alone: %d %q, want 100", st, body)
			}
			// The first holds the lane (told to go on, its body not sent).
			second := startExpect(t, base, large)
			select {
			case <-waiting:
			case <-time.After(10 * time.Second):
				t.Fatal("the second large request did not wait for the lane")
			}
			// Small requests, and bodies under the lane's threshold, do
			// not wait.
			for _, n := range []int{1 << 10, 512 << 10} {
				if a := exchange(t, base, post(inferBody(n)), false); a.status != http.StatusOK {
					t.Fatalf("a %d-byte request while a large one waits: %d %q", n, a.status, a.body)
				}
			}
			if tc.want == http.StatusServiceUnavailable {
				st, retry, body := second.answer()
				msg, _ := kserve.ParseErrorBody([]byte(body))
				if st != http.StatusServiceUnavailable || retry != "3" || !strings.Contains(msg, "no turn") {
					t.Fatalf("the second large request past its wait: %d, Retry-After %q, %q", st, retry, body)
				}
				if st := first.send(); st != http.StatusOK {
					t.Fatalf("the first large request: %d", st)
				}
			} else {
				if st := first.send(); st != http.StatusOK {
					t.Fatalf("the first large request: %d", st)
				}
				if st, _, body := second.answer(); st != http.StatusContinue {
					t.Fatalf("the second large request once the first was read: %d %q, want 100", st, body)
				}
				if st := second.send(); st != http.StatusOK {
					t.Fatalf("the second large request: %d", st)
				}
			}
			// The lane is free again: a third is told to go on at once.
			third := startExpect(t, base, large)
			if st, _, _ := third.answer(); st != http.StatusContinue {
				t.Fatalf("a third large request once the lane is free: %d", st)
			}
			if st := third.send(); st != http.StatusOK {
				t.Fatalf("the third large request: %d", st)
			}
			select {
			case <-waiting:
				t.Fatal("a large request waited for the lane while it was free")
			default:
			}
			// Answered: the budget holds only pooled buffers of the large
			// bodies' size class, reused, not one per request: a body is
			// read into a buffer given back before its read began (its
			// lease, taken at its headers while the pool was empty, claims
			// it), so there are at most two, the first body's and the
			// second's if it was read while the first was being answered.
			class := membudget.Class(int64(len(large)) + 1)
			testpoll.Until(t, "the budget holds only pooled buffers", func() bool { return budget.Used() == budget.Pooled() })
			if used, pooled := budget.Used(), budget.Pooled(); used != pooled || pooled < class || pooled > 2*class {
				t.Fatalf("after the large requests: used %d, pooled %d, want only pooled buffers, one or two of %d", used, pooled, class)
			}
		})
	}
}

// startOneLane starts a front door with a 64 MiB budget and one lane for
// bodies past 1 MiB, in front of batcher; waiting hears each large body
// that starts waiting for the lane (until the test ends).
func startOneLane(t *testing.T, batcher door.Batcher) (base string, budget *membudget.Budget, waiting chan struct{}) {
	t.Helper()
	budget = membudget.New(64 << 20)
	base = startFront(t, proxy.Options{Backend: door.Backend{Batcher: batcher, Memory: budget}, Upstream: mustURL("http://triton.invalid:8000"),
		MaxBodyBytes: 8 << 20, Forward: fakeUpstream{}, ReadTimeout: 20 * time.Second,
		LargeBodyBytes: 1 << 20, LargeBodyLanes: 1, LargeBodyWait: 20 * time.Second})
	waiting = make(chan struct{}, 4)
	t.Cleanup(proxy.SetTestHookLaneWait(func() { waiting <- struct{}{} }))
	return base, budget, waiting
}

// A turn of the lane comes back when its client leaves before sending
// its body: the one waiting behind it is told to go on, and the budget
// holds nothing of the one that left.
func TestLargeBodyLaneComesBack(t *testing.T) {
	base, budget, waiting := startOneLane(t, echoBatcher{})
	large := inferBody(3 << 19)
	first := startExpect(t, base, large)
	if st, _, _ := first.answer(); st != http.StatusContinue {
		t.Fatalf("the first large request: %d, want 100", st)
	}
	second := startExpect(t, base, large)
	select {
	case <-waiting:
	case <-time.After(10 * time.Second):
		t.Fatal("the second large request did not wait for the lane")
	}
	first.c.Close() // leaves with its turn
	if st, _, body := second.answer(); st != http.StatusContinue {
		t.Fatalf("the second large request once the first left: %d %q, want 100", st, body)
	}
	if st := second.send(); st != http.StatusOK {
		t.Fatalf("the second large request: %d", st)
	}
	class := membudget.Class(int64(len(large)) + 1)
	testpoll.Until(t, "the budget holds only pooled buffers", func() bool { return budget.Used() == budget.Pooled() })
	if budget.Used() != budget.Pooled() || budget.Pooled() > 2*class {
		t.Fatalf("after: used %d, pooled %d (class %d): the one that left still holds room", budget.Used(), budget.Pooled(), class)
	}
}

// gateBatcher answers as echoBatcher does once gate is closed, and tells
// entered each time a call reaches it.
type gateBatcher struct {
	echoBatcher
	entered chan struct{}
	gate    chan struct{}
}

func (b gateBatcher) Submit(ctx context.Context, model string, c *dispatcher.Call) dispatcher.Result {
	b.entered <- struct{}{}
	select {
	case <-b.gate:
	case <-ctx.Done():
		return dispatcher.Result{Err: ctx.Err()}
	}
	return b.echoBatcher.Submit(ctx, model, c)
}

// A turn of the lane lasts while a body is copied, not until it is
// answered: with one lane, a second large body arriving while the first,
// read in full, waits for its answer is told to go on at once (it does
// not wait for the lane) and is read in full too; memory stays bounded
// meanwhile: the two hold their room in the budget, within its limit,
// and a third, for which the budget has no room, is refused 503 with
// Retry-After at its headers. Once answered, nothing is held but the
// pooled buffers, one per body read at once.
func TestLargeBodyLaneReadsWhileUpstream(t *testing.T) {
	large := inferBody(3 << 19)
	class := membudget.Class(int64(len(large)) + 1)
	// Room for two leases below the small requests' share, not three.
	limit := 2*class*membudget.SmallShare/(membudget.SmallShare-1) + membudget.SmallShare
	if free := limit - limit/membudget.SmallShare; free < 2*class || free >= 3*class {
		t.Fatalf("the budget's room for large bodies, %d, is not two classes of %d", free, class)
	}
	budget := membudget.New(limit)
	b := gateBatcher{entered: make(chan struct{}, 4), gate: make(chan struct{})}
	base := startFront(t, proxy.Options{Backend: door.Backend{Batcher: b, Memory: budget}, Upstream: mustURL("http://triton.invalid:8000"),
		MaxBodyBytes: 8 << 20, Forward: fakeUpstream{}, ReadTimeout: 20 * time.Second,
		RetryAfter: 2 * time.Second, LargeBodyBytes: 1 << 20, LargeBodyLanes: 1, LargeBodyWait: 20 * time.Second})
	waiting := make(chan struct{}, 4)
	t.Cleanup(proxy.SetTestHookLaneWait(func() { waiting <- struct{}{} }))
	gateOpen := false
	defer func() {
		if !gateOpen {
			close(b.gate)
		}
	}()

	var clients []*expectClient
	for i := range 2 {
		c := startExpect(t, base, large)
		if st, _, body := c.answer(); st != http.StatusContinue {
			t.Fatalf("large request %d: %d %q, want 100 while the ones before wait for their answers", i+1, st, body)
		}
		if _, err := c.c.Write([]byte(large)); err != nil {
			t.Fatal(err)
		}
		select {
		case <-b.entered: // read in full, waiting for its answer
		case <-time.After(10 * time.Second):
			t.Fatalf("large request %d's call never reached the batcher", i+1)
		}
		clients = append(clients, c)
	}
	select {
	case <-waiting:
		t.Fatal("a large request waited for the lane while the one before it waited for its answer")
	default:
	}
	if used := budget.Used(); used < 2*class || used > limit {
		t.Fatalf("two large requests read and waiting: the budget holds %d, want between %d and its limit %d", used, 2*class, limit)
	}
	third := startExpect(t, base, large)
	st, retry, body := third.answer()
	if msg, _ := kserve.ParseErrorBody([]byte(body)); st != http.StatusServiceUnavailable || retry != "2" || !strings.Contains(msg, "memory budget") {
		t.Fatalf("a third large request with no room: %d, Retry-After %q, %q; want 503 for the memory budget", st, retry, body)
	}

	close(b.gate)
	gateOpen = true
	for i, c := range clients {
		if st, _, body := c.answer(); st != http.StatusOK {
			t.Fatalf("large request %d: %d %q", i+1, st, body)
		}
	}
	testpoll.Until(t, "the budget holds only pooled buffers", func() bool { return budget.Used() == budget.Pooled() })
	if budget.Used() != budget.Pooled() || budget.Pooled() > 2*class {
		t.Fatalf("after: used %d, pooled %d, want only pooled buffers, at most two of %d", budget.Used(), budget.Pooled(), class)
	}
}
