package dispatcher

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ratebatch/ratebatch/internal/testpoll"
	"github.com/ratebatch/ratebatch/policy"
)

func TestUpstreamHealth(t *testing.T) {
	h := newUpstreamHealth()
	if send, probe, _ := h.admit(); !send || probe {
		t.Fatalf("up: admit = %v, %v; want a plain send", send, probe)
	}
	if !h.refused() || h.refused() {
		t.Fatal("refused should mark the upstream down once")
	}
	send, probe, _ := h.admit()
	if !send || !probe {
		t.Fatalf("down: first admit = %v, %v; want the probe role", send, probe)
	}
	send, _, wait := h.admit()
	if send || wait == nil {
		t.Fatal("down with a probe out: a second batch must wait")
	}
	h.release()
	select {
	case <-wait:
	default:
		t.Fatal("release did not wake the waiting batch")
	}
	if send, probe, _ := h.admit(); !send || !probe {
		t.Fatal("after release the next batch must become the probe")
	}
	_, _, wait = h.admit()
	h.reached()
	select {
	case <-wait:
	default:
		t.Fatal("reached did not wake the waiting batch")
	}
	if h.isDown.Load() {
		t.Fatal("reached left the upstream down")
	}
	if send, probe, _ := h.admit(); !send || probe {
		t.Fatal("up again: admit must send without probing")
	}
}

func TestBackoff(t *testing.T) {
	tests := []struct {
		base     time.Duration
		attempt  int
		min, max time.Duration
	}{
		{0, 1, 5 * time.Millisecond, 10 * time.Millisecond},
		{10 * time.Millisecond, 1, 5 * time.Millisecond, 10 * time.Millisecond},
		{10 * time.Millisecond, 2, 10 * time.Millisecond, 20 * time.Millisecond},
		{10 * time.Millisecond, 3, 20 * time.Millisecond, 40 * time.Millisecond},
		{10 * time.Millisecond, 50, maxBackoff / 2, maxBackoff},
		{time.Second, 1, 500 * time.Millisecond, time.Second}, // a base above the cap is kept
	}
	for _, tt := range tests {
		seen := map[time.Duration]bool{}
		for range 200 {
			d := Backoff(tt.base, tt.attempt)
			if d < tt.min || d > tt.max {
				t.Fatalf("Backoff(%v, %d) = %v, want within [%v, %v]", tt.base, tt.attempt, d, tt.min, tt.max)
			}
			seen[d] = true
		}
		if len(seen) < 10 {
			t.Errorf("Backoff(%v, %d): %d distinct pauses in 200, want jitter", tt.base, tt.attempt, len(seen))
		}
	}
}

// An outage shorter than the hold costs the callers latency, not errors:
// their batches wait while one probe at a time tries the upstream with
// growing pauses, and all go once it answers.
func TestHoldRidesOutAnOutage(t *testing.T) {
	up := &fakeUpstream{}
	h := newHarness(t, policy.Fill{Policy: "test", Batch: 1}, ModelSpec{Instances: 4}, up, func(d *Dispatcher) { d.o.Hold = 5 * time.Second })
	up.refuse.Store(true)
	// Found down already: every batch then goes through admit. (Batches
	// admitted while it was still up may overlap their first try with the
	// probe; TestNoHold covers the finding.)
	h.d.health.refused()
	const n = 12
	calls := make([]*Call, n)
	results := make([]Result, n)
	var wg sync.WaitGroup
	for i := range calls {
		calls[i] = call(t, int32(10*i), 1)
		wg.Go(func() { results[i] = h.d.Submit(context.Background(), "simple", calls[i]) })
	}
	testpoll.Until(t, `up.refused.Load() >= 3`, func() bool { return up.refused.Load() >= 3 }) // probes are going on
	before := up.refused.Load()
	time.Sleep(300 * time.Millisecond) // the outage lasts a while
	peakDown, triesDown := up.peak.Load(), up.refused.Load()-before
	up.refuse.Store(false)
	wg.Wait()
	for i, c := range calls {
		if err := checkAnswer(c, results[i]); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	assertAccounting(t, h.m, n)
	// Four batches were in flight, but while down only the probe tried:
	// one attempt at a time, a handful over 300 ms, not a flood.
	if p := peakDown; p > 1 {
		t.Errorf("%d attempts at once reached the down upstream, want 1", p)
	}
	if r := triesDown; r > 20 {
		t.Errorf("%d attempts in 300 ms while down, want the probe's backed-off few", r)
	}
	if h.d.health.isDown.Load() {
		t.Error("the upstream answered but is still marked down")
	}
}

// Past its deadline a held caller gets a fast 503: at its own timeout
// parameter (Expire) when that comes first, else at arrival plus the hold;
// and once the deadline has passed, a batch that finds the upstream down
// and a probe out fails at once.
func TestHoldDeadline(t *testing.T) {
	up := &fakeUpstream{}
	h := newHarness(t, policy.Fill{Policy: "test", Batch: 1}, ModelSpec{Instances: 2, Queue: overridable}, up,
		func(d *Dispatcher) { d.o.Hold = 400 * time.Millisecond })
	up.refuse.Store(true)

	short := call(t, 1, 1)
	short.Timeout = 100 * time.Millisecond
	long := call(t, 2, 1)
	var rShort, rLong Result
	var tShort, tLong time.Duration
	start := time.Now()
	var wg sync.WaitGroup
	wg.Go(func() { rShort = h.d.Submit(context.Background(), "simple", short); tShort = time.Since(start) })
	wg.Go(func() { rLong = h.d.Submit(context.Background(), "simple", long); tLong = time.Since(start) })
	wg.Wait()
	for _, r := range []Result{rShort, rLong} {
		if status(r.Err) != http.StatusServiceUnavailable {
			t.Fatalf("held past the deadline: %v, want 503", r.Err)
		}
	}
	if tShort < 90*time.Millisecond || tShort > 380*time.Millisecond {
		t.Errorf("the caller with a 100 ms timeout was answered after %v", tShort)
	}
	if tLong < 390*time.Millisecond || tLong > 3*time.Second {
		t.Errorf("the caller held for 400 ms was answered after %v", tLong)
	}
	assertAccounting(t, h.m, 2)
	if got := testutil.ToFloat64(h.m.UpstreamErrors.WithLabelValues("simple", "connection")); got != 2 {
		t.Errorf("batches failed on the connection: %v, want 2", got)
	}
}

// Without a hold, a refused connection fails the batch once its retries are
// spent, with 503; the upstream stays marked down and the next batch probes.
func TestNoHold(t *testing.T) {
	up := &fakeUpstream{}
	h := newHarness(t, policy.Fill{Policy: "test", Batch: 1}, ModelSpec{}, up)
	up.refuse.Store(true)
	start := time.Now()
	if r := h.d.Submit(context.Background(), "simple", call(t, 1, 1)); status(r.Err) != http.StatusServiceUnavailable {
		t.Fatalf("down, no hold: %v, want 503", r.Err)
	}
	if el := time.Since(start); el > time.Second {
		t.Errorf("no hold, one retry: answered after %v", el)
	}
	if got := up.refused.Load(); got != 2 {
		t.Errorf("%d attempts, want 2 (one retry)", got)
	}
	if got := testutil.ToFloat64(h.m.UpstreamErrors.WithLabelValues("simple", "marked_down")); got != 1 {
		t.Errorf("marked down %v times, want 1", got)
	}
	up.refuse.Store(false)
	c := call(t, 2, 1)
	if err := checkAnswer(c, h.d.Submit(context.Background(), "simple", c)); err != nil {
		t.Fatalf("upstream back: %v", err)
	}
	if h.d.health.isDown.Load() {
		t.Error("an answer did not mark the upstream up")
	}
}
