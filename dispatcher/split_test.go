package dispatcher

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ratebatch/ratebatch/internal/testpoll"
	"github.com/ratebatch/ratebatch/kserve"
	"github.com/ratebatch/ratebatch/policy"
)

// submitAll submits calls at once and returns their results in order.
func submitAll(h *harness, calls []*Call) []Result {
	results := make([]Result, len(calls))
	var wg sync.WaitGroup
	for i, c := range calls {
		wg.Go(func() { results[i] = h.d.Submit(context.Background(), "simple", c) })
	}
	wg.Wait()
	return results
}

// A merged batch that Triton fails with a 500 in its own words (a Python
// backend's TritonError for one request fails the whole merged request)
// is split until each poisoned caller has Triton's own answer to its own
// request: only they fail, with their own message; their neighbours get
// exactly their rows. The extra round trips stay within 2(n-1) and the
// instance limit, and teach the monitor nothing.
func TestSplitIsolatesPoisonedMembers(t *testing.T) {
	tests := []struct {
		name      string
		n         int
		poisoned  []int // which callers hold a poisoned row
		instances int
		wire      bool
	}{
		{"one of two", 2, []int{1}, 1, false},
		{"one of three, as over HTTP", 3, []int{0}, 2, true},
		{"one of eight", 8, []int{5}, 2, false},
		{"three of eight, as over HTTP", 8, []int{0, 3, 7}, 4, true},
		{"all of four", 4, []int{0, 1, 2, 3}, 2, false},
		{"one of sixteen", 16, []int{9}, 1, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up := &fakeUpstream{gate: make(chan struct{})}
			h := newHarness(t, policy.Fill{Policy: "test", Batch: tt.n, MaxWait: time.Hour},
				ModelSpec{MaxBatch: 16, Instances: tt.instances}, up, func(d *Dispatcher) {
					d.o.Outlier = Outlier{ConsecutiveErrors: 1, ProbeInterval: time.Hour}
				})
			calls := make([]*Call, tt.n)
			for i := range calls {
				v := int32(100 * (i + 1))
				if slices.Contains(tt.poisoned, i) {
					v = poisonValue - int32(i)
				}
				calls[i] = call(t, v, 1)
				if tt.wire {
					wired(t, calls[i], i%2 == 0)
				}
			}
			var results []Result
			done := make(chan struct{})
			go func() { results = submitAll(h, calls); close(done) }()
			testpoll.Until(t, "the merged batch at the upstream", func() bool { return up.calls.Load() == 1 })
			close(up.gate)
			<-done
			for i, c := range calls {
				r := results[i]
				if !slices.Contains(tt.poisoned, i) {
					if err := checkAnswer(c, r); err != nil {
						t.Fatalf("good caller %d: %v", i, err)
					}
					continue
				}
				if want := poisonMsg(poisonValue - int32(i)); status(r.Err) != http.StatusInternalServerError || r.Err.Error() != want {
					t.Fatalf("poisoned caller %d: %v, want 500 %q (its own)", i, r.Err, want)
				}
				if ct := kserve.ErrorContentType(r.Err); ct != "text/plain" {
					t.Fatalf("poisoned caller %d: Content-Type %q, want Triton's text/plain", i, ct)
				}
			}
			if got, most := up.calls.Load(), int32(1+2*(tt.n-1)); got > most {
				t.Fatalf("%d upstream calls for a batch of %d, want at most %d", got, tt.n, most)
			}
			if p := up.peak.Load(); p > int32(tt.instances) {
				t.Fatalf("%d requests at once at the upstream, want at most the %d instances", p, tt.instances)
			}
			if f, why := h.d.Failing("simple"); f && len(tt.poisoned) < tt.n {
				t.Fatalf("the model is failing after a batch with good members: %s", why)
			}
			if n := h.pl.observed.Load(); n != 0 {
				t.Fatalf("the monitor learnt %d batches from a split", n)
			}
			if got := testutil.ToFloat64(h.m.UpstreamErrors.WithLabelValues("simple", "bad_member_retry")); got != 1 {
				t.Fatalf("bad_member_retry %v, want 1", got)
			}
			assertAccounting(t, h.m, tt.n)
		})
	}
}

// A stream of poisoned requests never marks a healthy model failing: not
// batches with one poisoned caller each (their split answers the others),
// nor poisoned callers alone in a row, whose suspicion the model's probe
// inference, answered, clears.
func TestPoisonStreamKeepsTheModelReady(t *testing.T) {
	tests := []struct {
		name  string
		batch int
	}{
		{"batches with one poisoned caller", 4},
		{"poisoned callers alone, in a row", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up := &fakeUpstream{}
			h := newHarness(t, policy.Fill{Policy: "test", Batch: tt.batch, MaxWait: time.Hour},
				ModelSpec{Probe: probeWire(t)}, up, func(d *Dispatcher) {
					d.o.Outlier = Outlier{ConsecutiveErrors: 2, ProbeInterval: time.Hour}
				})
			good, bad := 0, 0
			for round := range 20 {
				calls := make([]*Call, tt.batch)
				for i := range calls {
					v := int32(1000*round + 10*i)
					if i == 0 {
						v = poisonValue - int32(round)
					}
					calls[i] = call(t, v, 1)
				}
				for i, r := range submitAll(h, calls) {
					if i == 0 {
						if status(r.Err) != http.StatusInternalServerError {
							t.Fatalf("round %d: poisoned caller: %v, want its 500", round, r.Err)
						}
						bad++
						continue
					}
					if err := checkAnswer(calls[i], r); err != nil {
						t.Fatalf("round %d: good caller %d: %v", round, i, err)
					}
					good++
				}
				if f, why := h.d.Failing("simple"); f {
					t.Fatalf("round %d: the model is failing on poisoned requests: %s", round, why)
				}
			}
			if tt.batch == 1 {
				// Alone, the poisoned calls were suspect: the probe went and
				// cleared them; wait for its verdict before the last look.
				testpoll.Until(t, "the probe's verdict", func() bool {
					r, ok := h.d.probes.lastOf("simple")
					h.d.probes.mu.Lock()
					running := h.d.probes.running["verify simple"]
					h.d.probes.mu.Unlock()
					return ok && r.OK && !running
				})
				if f, why := h.d.Failing("simple"); f {
					t.Fatalf("the model is failing though its probe was answered: %s", why)
				}
			}
			t.Logf("%d poisoned callers failed alone, %d good ones answered", bad, good)
		})
	}
}

// A model that answers Triton's 500 to every request, its probe's too, is
// sick: the split finds no member it answers, and after ConsecutiveErrors
// such batches the probe's failure marks the model failing.
func TestSick500ModelIsMarkedFailing(t *testing.T) {
	up := &fakeUpstream{}
	h := newHarness(t, policy.Fill{Policy: "test", Batch: 2, MaxWait: time.Hour},
		ModelSpec{Probe: probeWire(t)}, up, func(d *Dispatcher) {
			d.o.Outlier = Outlier{ConsecutiveErrors: 2, ProbeInterval: time.Hour}
		})
	up.status.Store(http.StatusInternalServerError)
	round := 0
	testpoll.Until(t, "the model failing", func() bool {
		if f, _ := h.d.Failing("simple"); f {
			return true
		}
		before := up.calls.Load()
		for _, r := range submitAll(h, []*Call{call(t, int32(10*round), 1), call(t, int32(10*round+5), 1)}) {
			if status(r.Err) != http.StatusInternalServerError {
				t.Fatalf("round %d: %v, want the upstream's 500", round, r.Err)
			}
		}
		if n := up.calls.Load() - before; n > 3+1 {
			t.Fatalf("round %d: %d upstream calls for a batch of 2, want at most 3 (its split) and the probe", round, n)
		}
		round++
		return false
	})
	if _, why := h.d.Failing("simple"); !strings.Contains(why, "probe inference") {
		t.Fatalf("failing for %q, want the probe named", why)
	}
}

// What the upstream saw of a model's callers is counted as Triton's
// statistics count it, beside the callers: a merged batch of four callers
// and six rows is one request of six rows to Triton (its success.count
// 1, inference_count 6); a split batch is the merged request that failed and
// each part.
func TestCountsAsTritonCounts(t *testing.T) {
	up := &fakeUpstream{}
	h := newHarness(t, policy.Fill{Policy: "test", Batch: 6, MaxWait: time.Hour}, ModelSpec{}, up)
	calls := make([]*Call, 4)
	for i := range calls {
		calls[i] = call(t, int32(10*i), 1+i%2) // 1, 2, 1, 2 rows: one batch of 6
	}
	for i, r := range submitAll(h, calls) {
		if err := checkAnswer(calls[i], r); err != nil {
			t.Fatal(err)
		}
	}
	want := Counts{CallersOK: 4, UpstreamOK: 1, UpstreamRows: 6}
	if got := firstSnapshot(h.d).Counts; got != want {
		t.Fatalf("after one merged batch of 4 callers and 6 rows: %+v, want %+v", got, want)
	}
	// One poisoned caller among two: the merged request fails, then each
	// alone: three requests to Triton, one of them answered 200.
	calls = []*Call{call(t, 100, 3), call(t, poisonValue, 3)}
	submitAll(h, calls)
	want = Counts{CallersOK: 5, CallersFailed: 1, UpstreamOK: 2, UpstreamFailed: 2, UpstreamRows: 9, UpstreamFailedRows: 6 + 3}
	if got := firstSnapshot(h.d).Counts; got != want {
		t.Fatalf("after a split batch: %+v, want %+v", got, want)
	}
}

// Errors that are every caller's alike are not split: every caller of the
// batch gets the upstream's error at once. The server's own (502, 503,
// 504: a gateway, Triton's UNAVAILABLE, a timeout) count towards marking
// the model failing, as before; a refusal of who may call or of what is
// called (401, 403, 404), the same for callers whose key holds their
// credentials and model, is no fault of the model's.
func TestWholeBatchErrorsAreNotSplit(t *testing.T) {
	for _, tc := range []struct {
		code    int
		failing bool
	}{
		{http.StatusBadGateway, true}, {http.StatusServiceUnavailable, true}, {http.StatusGatewayTimeout, true},
		{http.StatusUnauthorized, false}, {http.StatusForbidden, false}, {http.StatusNotFound, false},
	} {
		t.Run(fmt.Sprint(tc.code), func(t *testing.T) {
			up := &fakeUpstream{}
			h := newHarness(t, policy.Fill{Policy: "test", Batch: 4, MaxWait: time.Hour}, ModelSpec{}, up, func(d *Dispatcher) {
				d.o.Outlier = Outlier{ConsecutiveErrors: 2, ProbeInterval: time.Hour}
			})
			up.status.Store(int32(tc.code))
			for round := range 2 {
				calls := make([]*Call, 4)
				for i := range calls {
					calls[i] = call(t, int32(100*round+10*i), 1)
				}
				before := up.calls.Load()
				for i, r := range submitAll(h, calls) {
					if status(r.Err) != tc.code {
						t.Fatalf("round %d caller %d: %v, want the upstream's %d", round, i, r.Err, tc.code)
					}
				}
				if n := up.calls.Load() - before; n != 1 {
					t.Fatalf("round %d: %d upstream calls, want the batch alone (no split)", round, n)
				}
			}
			if f, _ := h.d.Failing("simple"); f != tc.failing {
				t.Fatalf("failing %v after two batches failing with %d, want %v", f, tc.code, tc.failing)
			}
		})
	}
}
