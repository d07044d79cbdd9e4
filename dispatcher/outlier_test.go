package dispatcher

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ratebatch/ratebatch/internal/testpoll"
	"github.com/ratebatch/ratebatch/policy"
)

// An upstream answering 503 (Triton's UNAVAILABLE, the server's own
// error) to everything: after ConsecutiveErrors batches the model is
// failing, callers get a prompt 503 of the proxy's instead of the
// upstream's, one probe at a time tests it, and the first probe answered
// after the upstream heals makes the model healthy again.
func TestOutlierServerErrorsMarkTheModelFailing(t *testing.T) {
	up := &fakeUpstream{}
	clock := &manualClock{t: time.Unix(1000, 0)}
	h := newHarness(t, policy.Fill{Policy: "test", Batch: 1}, ModelSpec{}, up, func(d *Dispatcher) {
		d.o.Outlier = Outlier{ConsecutiveErrors: 3, ProbeInterval: time.Hour}
		d.now = clock.now
	})
	up.status.Store(http.StatusServiceUnavailable)
	submit := func(i int) Result { return h.d.Submit(context.Background(), "simple", call(t, int32(i), 1)) }
	for i := range 3 {
		if r := submit(i); status(r.Err) != http.StatusServiceUnavailable || r.Err.Error() != "model exploded" {
			t.Fatalf("call %d before the model fails: %v, want the upstream's 503", i, r.Err)
		}
	}
	if f, reason := h.d.Failing("simple"); !f || !strings.Contains(reason, "3 batches in a row") {
		t.Fatalf("failing %v (%q) after 3 server errors", f, reason)
	}
	if !h.d.UpstreamFailing() {
		t.Fatal("the only model fails but the upstream is not failing")
	}
	calls := up.calls.Load()
	for i := range 5 { // within the probe interval: refused, no upstream call
		r := submit(10 + i)
		if status(r.Err) != http.StatusServiceUnavailable || !strings.Contains(r.Err.Error(), "failing") {
			t.Fatalf("call while failing: %v, want 503", r.Err)
		}
	}
	if up.calls.Load() != calls {
		t.Fatalf("%d upstream calls while the model fails and no probe is due", up.calls.Load()-calls)
	}
	// A probe that fails keeps the model failing.
	clock.add(time.Hour)
	if r := submit(20); status(r.Err) != http.StatusServiceUnavailable || r.Err.Error() != "model exploded" {
		t.Fatalf("probe: %v, want the upstream's 503", r.Err)
	}
	if f, _ := h.d.Failing("simple"); !f {
		t.Fatal("a failed probe made the model healthy")
	}
	// Healed: the next probe is answered, and so is everyone after it.
	up.status.Store(0)
	clock.add(time.Hour)
	for i := range 3 {
		c := call(t, int32(30+i), 1)
		if err := checkAnswer(c, h.d.Submit(context.Background(), "simple", c)); err != nil {
			t.Fatalf("after healing, call %d: %v", i, err)
		}
	}
	if f, _ := h.d.Failing("simple"); f || h.d.UpstreamFailing() {
		t.Fatal("still failing after a probe was answered")
	}
	if got := testutil.ToFloat64(h.m.Ejections.WithLabelValues("simple", "errors")); got != 1 {
		t.Fatalf("ejections %v, want 1", got)
	}
	if got := testutil.ToFloat64(h.m.Rejected.WithLabelValues("simple", "model_failing")); got != 5 {
		t.Fatalf("model_failing refusals %v, want 5", got)
	}
	assertAccounting(t, h.m, 3+1+3) // the refused 5 were never accepted
}

// A member's bad input (4xx) and connection errors do not count.
func TestOutlierIgnoresBadInputAndConnectionErrors(t *testing.T) {
	up := &fakeUpstream{}
	h := newHarness(t, policy.Fill{Policy: "test", Batch: 1}, ModelSpec{}, up, func(d *Dispatcher) {
		d.o.Outlier = Outlier{ConsecutiveErrors: 2, ProbeInterval: time.Hour}
		d.o.Retries = 0
	})
	for i := range 4 {
		if r := h.d.Submit(context.Background(), "simple", call(t, badValue, 1)); status(r.Err) != http.StatusBadRequest {
			t.Fatalf("bad input %d: %v", i, r.Err)
		}
		up.connErrs.Store(1)
		if r := h.d.Submit(context.Background(), "simple", call(t, 1, 1)); status(r.Err) != http.StatusBadGateway {
			t.Fatalf("connection error %d: %v", i, r.Err)
		}
	}
	if f, _ := h.d.Failing("simple"); f {
		t.Fatal("bad input or connection errors marked the model failing")
	}
}

// hangingUpstream hangs every call while hang is set, until release closes.
type hangingUpstream struct {
	fakeUpstream
	hang    atomic.Bool
	release chan struct{}
	hung    atomic.Int32
}

func (u *hangingUpstream) Infer(ctx context.Context, model, version string, b Body, out Outgoing) (*Reply, error) {
	if u.hang.Load() {
		u.hung.Add(1)
		<-u.release
	}
	return u.fakeUpstream.Infer(ctx, model, version, b, out)
}

// A batch that hangs marks the model failing once it has run past the
// hung bound: the callers queued behind it get 503 at once instead of
// waiting for the upstream's timeout, and newcomers are refused; when the
// hung batch is finally answered the model is healthy again.
func TestOutlierHungBatch(t *testing.T) {
	up := &hangingUpstream{release: make(chan struct{})}
	h := newHarness(t, policy.Fill{Policy: "test", Batch: 1}, ModelSpec{Instances: 1}, nil, func(d *Dispatcher) {
		d.o.Upstream = up
		d.o.Outlier = Outlier{HungFactor: 10, HungMin: 50 * time.Millisecond, ProbeInterval: time.Hour}
	})
	c := call(t, 1, 1)
	if err := checkAnswer(c, h.d.Submit(context.Background(), "simple", c)); err != nil { // arms hung detection
		t.Fatal(err)
	}
	up.hang.Store(true)
	hungCall := call(t, 2, 1)
	hungDone := make(chan Result, 1)
	go func() { hungDone <- h.d.Submit(context.Background(), "simple", hungCall) }()
	testpoll.Until(t, `up.hung.Load() == 1`, func() bool { return up.hung.Load() == 1 })
	// Queued behind the hung batch (one instance): answered 503 once it is
	// found hung, while it still hangs.
	const n = 6
	var wg sync.WaitGroup
	results := make([]Result, n)
	for i := range n {
		wg.Go(func() { results[i] = h.d.Submit(context.Background(), "simple", call(t, int32(10+i), 1)) })
	}
	wg.Wait()
	for i, r := range results {
		if status(r.Err) != http.StatusServiceUnavailable || !strings.Contains(r.Err.Error(), "failing") {
			t.Fatalf("caller %d behind the hung batch: %v, want 503", i, r.Err)
		}
	}
	if f, reason := h.d.Failing("simple"); !f || !strings.Contains(reason, "has run") {
		t.Fatalf("failing %v (%q) with a hung batch", f, reason)
	}
	select {
	case r := <-hungDone:
		t.Fatalf("the hung batch returned while it hangs: %v", r.Err)
	default:
	}
	up.hang.Store(false)
	close(up.release)
	if err := checkAnswer(hungCall, <-hungDone); err != nil {
		t.Fatal(err)
	}
	if f, _ := h.d.Failing("simple"); f {
		t.Fatal("still failing after the hung batch was answered")
	}
	if got := testutil.ToFloat64(h.m.Ejections.WithLabelValues("simple", "hung")); got != 1 {
		t.Fatalf("hung ejections %v, want 1", got)
	}
	assertAccounting(t, h.m, 2+n)
}

// The outage hold is not a hung batch: batches held for an upstream that
// refuses connections ride out the outage with hung detection on.
func TestOutlierLeavesTheOutageHoldAlone(t *testing.T) {
	up := &fakeUpstream{}
	h := newHarness(t, policy.Fill{Policy: "test", Batch: 1}, ModelSpec{Instances: 4}, up, func(d *Dispatcher) {
		d.o.Hold = 5 * time.Second
		d.o.Outlier = Outlier{ConsecutiveErrors: 1, HungFactor: 1, HungMin: 20 * time.Millisecond, ProbeInterval: time.Hour}
	})
	c := call(t, 1, 1)
	if err := checkAnswer(c, h.d.Submit(context.Background(), "simple", c)); err != nil {
		t.Fatal(err)
	}
	up.refuse.Store(true)
	h.d.health.refused()
	const n = 8
	calls := make([]*Call, n)
	results := make([]Result, n)
	var wg sync.WaitGroup
	for i := range calls {
		calls[i] = call(t, int32(10*i), 1)
		wg.Go(func() { results[i] = h.d.Submit(context.Background(), "simple", calls[i]) })
	}
	testpoll.Until(t, `up.refused.Load() >= 5`, func() bool { return up.refused.Load() >= 5 }) // held past the 20 ms hung bound
	up.refuse.Store(false)
	wg.Wait()
	for i, c := range calls {
		if err := checkAnswer(c, results[i]); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	if f, reason := h.d.Failing("simple"); f {
		t.Fatalf("an outage marked the model failing: %s", reason)
	}
}

type manualClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *manualClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *manualClock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}
