package dispatcher

import (
	"context"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratebatch/ratebatch/internal/testpoll"
	"github.com/ratebatch/ratebatch/kserve"
	"github.com/ratebatch/ratebatch/policy"
)

// TestSchedule: a call's level, its timeout in the queue, and whether its
// own timeout is forwarded follow the model's queue policy as Triton's
// queue reads it (InferenceRequest::SetPriority, PolicyQueue::Enqueue).
func TestSchedule(t *testing.T) {
	const hour = time.Hour
	delay := QueuePolicy{Default: Timeouts{Default: hour, AllowOverride: true, Delay: true}}
	levels := QueuePolicy{Levels: 3, DefaultLevel: 2, Default: Timeouts{Default: hour},
		ByLevel: map[uint64]Timeouts{1: {Default: hour, AllowOverride: true}}}
	for _, tc := range []struct {
		name      string
		q         QueuePolicy
		priority  uint64
		timeout   time.Duration
		level     uint64
		expire    time.Duration // 0: never refused
		forwarded bool          // the call's own timeout is forwarded, reduced
	}{
		{"no queue policy: the timeout ignored", QueuePolicy{}, 0, time.Second, 0, 0, false},
		{"no queue policy: every priority one level", QueuePolicy{}, 7, 0, 0, 0, false},
		{"override without a default: ignored, as Triton does", QueuePolicy{Default: Timeouts{AllowOverride: true}}, 0, time.Second, 0, 0, false},
		{"a default, no override", QueuePolicy{Default: Timeouts{Default: hour}}, 0, time.Second, 0, hour, false},
		{"override allowed, shorter", overridable, 0, time.Second, 2, time.Second, true},
		{"override allowed, longer: the default", overridable, 0, 2 * hour, 2, hour, false},
		{"override allowed, none set", overridable, 0, 0, 2, hour, false},
		{"the largest timeout does not wrap", overridable, 0, microseconds(math.MaxUint64), 2, hour, false},
		{"DELAY: never refused, still forwarded", delay, 0, time.Second, 0, 0, true},
		{"priority 1 of 3: its level's policy", levels, 1, time.Second, 1, time.Second, true},
		{"priority 3 of 3: the default policy", levels, 3, time.Second, 3, hour, false},
		{"priority 2^64-1: the default level", levels, math.MaxUint64, time.Second, 2, hour, false},
		{"priority 0: the default level", levels, 0, 0, 2, hour, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := &modelQueue{spec: ModelSpec{Queue: tc.q}}
			now := time.Now()
			// Received a second before: a body uploaded slowly, which
			// Triton's queue timeout does not count.
			c := &Call{Priority: tc.priority, Timeout: tc.timeout, Received: now.Add(-time.Second)}
			q.schedule(c, now)
			if c.level != tc.level {
				t.Errorf("level %d, want %d", c.level, tc.level)
			}
			switch {
			case tc.expire == 0 && !c.Expire.IsZero():
				t.Errorf("refused at %v, want never", c.Expire.Sub(now))
			case tc.expire != 0 && !c.Expire.Equal(now.Add(tc.expire)):
				t.Errorf("refused %v after entering the queue, want %v", c.Expire.Sub(now), tc.expire)
			}
			if got := !c.timeoutAt.IsZero(); got != tc.forwarded {
				t.Errorf("own timeout forwarded %v, want %v", got, tc.forwarded)
			}
		})
	}
	if d := microseconds(math.MaxInt64); d != math.MaxInt64 {
		t.Errorf("2^63-1 µs as a duration: %v, want the largest duration", d)
	}
	if d := microseconds(1500); d != 1500*time.Microsecond {
		t.Errorf("1500 µs: %v", d)
	}
}

// TestScheduleParams: priority and timeout as Triton reads them, uint64
// both, over the whole range; a value of another type is refused.
func TestScheduleParams(t *testing.T) {
	for _, tc := range []struct {
		params   string
		priority uint64
		timeout  time.Duration
		err      string
	}{
		{`{"priority":18446744073709551615}`, math.MaxUint64, 0, ""},
		{`{"priority":9223372036854775808}`, 1 << 63, 0, ""},
		{`{"priority":2,"timeout":1000}`, 2, time.Millisecond, ""},
		{`{"timeout":9223372036854775807}`, 0, math.MaxInt64, ""},
		{`{"timeout":18446744073709551615}`, 0, math.MaxInt64, ""},
		{`{"priority":-1}`, 0, 0, "parameter 'priority'"},
		{`{"priority":"high"}`, 0, 0, "parameter 'priority'"},
		{`{"timeout":-5}`, 0, 0, "parameter 'timeout'"},
		{`{"timeout":1.5}`, 0, 0, "parameter 'timeout'"},
	} {
		t.Run(tc.params, func(t *testing.T) {
			req, err := kserve.DecodeRequest([]byte(`{"parameters":`+tc.params+`,"inputs":[{"name":"X","datatype":"INT32","shape":[1],"data":[1]}]}`), -1)
			if err != nil {
				t.Fatal(err)
			}
			c, ok, err := NewCall(req, "", time.Now())
			switch {
			case !ok:
				t.Fatal("not batchable")
			case tc.err != "":
				if err == nil || !strings.Contains(err.Error(), tc.err) || status(err) != 400 {
					t.Fatalf("err %v, want a 400 naming %s", err, tc.err)
				}
			case err != nil:
				t.Fatal(err)
			case c.Priority != tc.priority || c.Timeout != tc.timeout:
				t.Fatalf("priority %d timeout %v, want %d %v", c.Priority, c.Timeout, tc.priority, tc.timeout)
			}
		})
	}
}

// TestHugeTimeoutIsNoInstantRefusal: a timeout of 2^63-1 µs, which wraps
// to a negative duration when multiplied out, leaves the call waiting
// like any other, not refused at once.
func TestHugeTimeoutIsNoInstantRefusal(t *testing.T) {
	up := &fakeUpstream{}
	h := newHarness(t, policy.Fill{Policy: "test", Batch: 1}, ModelSpec{Queue: QueuePolicy{Default: Timeouts{Default: math.MaxInt64, AllowOverride: true}}}, up)
	c := call(t, 1, 1)
	c.Req.Parameters = kserve.Parameters{kserve.ParamTimeout: int64(math.MaxInt64)}
	c.Timeout = microseconds(math.MaxInt64)
	if err := checkAnswer(c, h.d.Submit(context.Background(), "simple", c)); err != nil {
		t.Fatalf("call with the largest timeout: %v, want its answer", err)
	}
}

// TestForwardedTimeoutIsWhatIsLeft: a call whose own timeout Triton
// honours reaches the upstream with what is left of it after the proxy's
// queue, and a merged batch with the smallest of its members'; a call
// sent alone goes re-encoded, not with the timeout its body came with.
func TestForwardedTimeoutIsWhatIsLeft(t *testing.T) {
	up := &fakeUpstream{gate: make(chan struct{})}
	h := newHarness(t, policy.Fill{Policy: "test", Batch: 2}, ModelSpec{Queue: overridable}, up)
	first := call(t, 1, 2)
	firstDone := h.occupy(t, first) // holds the only instance

	a, b := call(t, 2, 1), call(t, 3, 1)
	a.Req.Parameters = kserve.Parameters{kserve.ParamTimeout: int64(900_000)}
	b.Req.Parameters = kserve.Parameters{kserve.ParamTimeout: int64(600_000)}
	a.Timeout, b.Timeout = 900*time.Millisecond, 600*time.Millisecond
	lone := call(t, 4, 1)
	lone.Req.Parameters = kserve.Parameters{kserve.ParamTimeout: int64(700_000)}
	lone.Timeout = 700 * time.Millisecond
	lone = wired(t, lone, false)
	var wg sync.WaitGroup
	for _, c := range []*Call{a, b} {
		wg.Go(func() {
			if err := checkAnswer(c, h.d.Submit(context.Background(), "simple", c)); err != nil {
				t.Error(err)
			}
		})
	}
	testpoll.Until(t, "both queued", func() bool { return h.d.Snapshots()[0].QueuedRows == 2 })
	// Both entered the queue before now, where their timeouts began: they
	// wait there at least waited, which must count.
	queued := time.Now()
	time.Sleep(100 * time.Millisecond)
	waited := time.Since(queued)
	up.gate <- struct{}{} // the first batch ends; a and b leave as one
	<-firstDone
	up.gate <- struct{}{}
	wg.Wait()
	wg.Go(func() {
		if err := checkAnswer(lone, h.d.Submit(context.Background(), "simple", lone)); err != nil {
			t.Error(err)
		}
	})
	up.gate <- struct{}{}
	wg.Wait()

	bodies := up.seenBodies()
	if len(bodies) != 3 {
		t.Fatalf("%d batches, want 3", len(bodies))
	}
	merged := decodeTimeout(t, bodies[1])
	if max := int64((600*time.Millisecond - waited) / time.Microsecond); merged <= 0 || merged > max {
		t.Errorf("merged batch's timeout %d µs, want what is left of the smallest (600 ms less %v waited): at most %d", merged, waited, max)
	}
	if alone := decodeTimeout(t, bodies[2]); alone <= 0 || alone >= 700_000 {
		t.Errorf("lone call's timeout %d µs, want what is left of its 700 ms", alone)
	}

}

func decodeTimeout(t *testing.T, body []byte) int64 {
	t.Helper()
	req, err := kserve.DecodeRequest(body, headerLen(body))
	if err != nil {
		t.Fatal(err)
	}
	v, ok := req.Parameters.Int(kserve.ParamTimeout)
	if !ok {
		t.Fatalf("no timeout in %s", body[:min(len(body), 200)])
	}
	return v
}

// headerLen finds the JSON header's length of a body in either form: a
// binary body's header ends where its JSON object closes.
func headerLen(body []byte) int {
	depth, inString, escaped := 0, false, false
	for i, c := range body {
		switch {
		case escaped:
			escaped = false
		case inString && c == '\\':
			escaped = true
		case c == '"':
			inString = !inString
		case inString:
		case c == '{':
			depth++
		case c == '}':
			if depth--; depth == 0 {
				if i+1 == len(body) {
					return -1
				}
				return i + 1
			}
		}
	}
	return -1
}

// TestPriorityLevelsOrderKeys: callers of different priorities wait under
// different batch keys (they never share a batch); where the model has
// priority levels, the higher level's batch takes a free instance first,
// whichever key came first (of six keys, so that the map's order would
// rarely put it first by chance).
func TestPriorityLevelsOrderKeys(t *testing.T) {
	up := &fakeUpstream{gate: make(chan struct{})}
	h := newHarness(t, policy.Fill{Policy: "test", Batch: 1}, ModelSpec{Queue: overridable}, up)
	firstDone := h.occupy(t, call(t, 1, 1))
	var calls []*Call
	for i := range 5 { // five keys at the default level 2
		calls = append(calls, withParams(t, call(t, int32(10+i), 1), kserve.Parameters{kserve.ParamPriority: int64(2), "k": int64(i)}))
	}
	high := withParams(t, call(t, 3, 1), kserve.Parameters{kserve.ParamPriority: int64(1)})
	calls = append(calls, high)
	if calls[0].Key == high.Key {
		t.Fatal("callers of different priorities share a batch key")
	}
	order := make(chan string, len(calls))
	var wg sync.WaitGroup
	for i, c := range calls {
		wg.Go(func() {
			if err := checkAnswer(c, h.d.Submit(context.Background(), "simple", c)); err != nil {
				t.Error(err)
			}
			order <- c.Req.ID
		})
		testpoll.Until(t, "queued", func() bool { return h.d.Snapshots()[0].QueuedRows == i+1 })
	}
	up.gate <- struct{}{}
	<-firstDone
	up.gate <- struct{}{}
	if got := <-order; got != high.Req.ID {
		t.Fatalf("first served %s, want the priority-1 caller %s", got, high.Req.ID)
	}
	for range len(calls) - 1 {
		up.gate <- struct{}{}
	}
	wg.Wait()
}

// withParams gives c the request parameters p, and the batch key and
// priority NewCall would read from them.
func withParams(t *testing.T, c *Call, p kserve.Parameters) *Call {
	t.Helper()
	c.Req.Parameters = p
	key, _, ok := kserve.BatchKey(c.Req)
	if !ok {
		t.Fatal("not batchable")
	}
	c.Key = key
	c.Priority, _ = p.Uint(kserve.ParamPriority)
	return c
}
