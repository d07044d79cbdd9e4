package monitor

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/ratebatch/ratebatch/policy"
	"github.com/ratebatch/ratebatch/regression"
)

// fakeClock is a settable clock.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newMonitor(t *testing.T, seed regression.Line, maxBatch int) (*Monitor, *fakeClock) {
	t.Helper()
	clk := &fakeClock{t: time.Unix(1000, 0)}
	pol, err := policy.New("batchmonitor", policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	m, err := New(Config{Model: "m", Policy: pol, Window: time.Second, MaxBatch: maxBatch, Instances: 1, Seed: &seed, Now: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	return m, clk
}

func newMonitorDefaultSeed(t *testing.T, maxBatch int) (*Monitor, *fakeClock) {
	t.Helper()
	clk := &fakeClock{t: time.Unix(1000, 0)}
	pol, _ := policy.New("batchmonitor", policy.Options{})
	m, err := New(Config{Model: "m", Policy: pol, Window: time.Second, MaxBatch: maxBatch, Now: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	return m, clk
}

func TestWindowRateDrivesBatchSize(t *testing.T) {
	seed := regression.Line{AlphaMs: 1, Tau0Ms: 4} // mu(b) = b/(b+4) per ms
	tests := []struct {
		name     string
		arrivals int
		want     int
	}{
		// Algorithm 1: smallest b >= 2 with rate < 1000*b/(b+4).
		{"idle", 0, 2},
		{"300 rps", 300, 2},    // 2/(6ms) = 333 rps covers it
		{"500 rps", 500, 5},    // 4/(8ms) = 500 is not above 500; 5/(9ms) = 556 is
		{"700 rps", 700, 10},   // 9/13ms = 692, 10/14ms = 714
		{"way over", 5000, 32}, // no b covers it: B_max
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, clk := newMonitor(t, seed, 32)
			if got := m.Snapshot().BatchSize; got != 1 {
				t.Fatalf("starting batch size %d, want 1 before any window", got)
			}
			m.Arrive(tt.arrivals)
			clk.add(time.Second)
			m.Tick()
			s := m.Snapshot()
			if s.BatchSize != tt.want {
				t.Fatalf("batch size %d at %v rps, want %d", s.BatchSize, s.RatePerSec, tt.want)
			}
			if s.RatePerSec != float64(tt.arrivals) {
				t.Fatalf("rate %v, want %d", s.RatePerSec, tt.arrivals)
			}
			select {
			case <-m.Changed():
			default:
				t.Fatal("no change signalled after a tick")
			}
		})
	}
}

func TestArrivalsResetPerWindowButTotalKept(t *testing.T) {
	m, clk := newMonitor(t, regression.Line{AlphaMs: 1, Tau0Ms: 4}, 32)
	m.Arrive(700)
	clk.add(time.Second)
	m.Tick()
	clk.add(2 * time.Second) // a late tick: the rate uses the real elapsed time
	m.Tick()
	s := m.Snapshot()
	if s.RatePerSec != 0 || s.Arrivals != 700 {
		t.Fatalf("rate %v total %d, want 0 and 700", s.RatePerSec, s.Arrivals)
	}
	m.Arrive(100)
	clk.add(2 * time.Second)
	m.Tick()
	if got := m.Snapshot().RatePerSec; got != 50 {
		t.Fatalf("rate %v over a 2 s window of 100 arrivals, want 50", got)
	}
}

func TestObservationsMoveTheFit(t *testing.T) {
	m, clk := newMonitorDefaultSeed(t, 32)
	for i := 0; i < 200; i++ {
		b := 1 + i%16
		m.Observe(b, time.Duration(float64(time.Millisecond)*(2*float64(b)+3)))
	}
	clk.add(time.Second)
	m.Tick()
	s := m.Snapshot()
	if s.AlphaMs < 1.95 || s.AlphaMs > 2.05 || s.Tau0Ms < 2.7 || s.Tau0Ms > 3.3 {
		t.Fatalf("fit alpha %v tau0 %v, want about 2 and 3 from the observations", s.AlphaMs, s.Tau0Ms)
	}
	if s.Samples != 200 {
		t.Fatalf("samples %d", s.Samples)
	}
}

func TestSetPolicyAndLimitsReplan(t *testing.T) {
	m, _ := newMonitor(t, regression.Line{AlphaMs: 1, Tau0Ms: 4}, 32)
	adhoc, _ := policy.New("adhoc", policy.Options{})
	m.SetPolicy(adhoc)
	if s := m.Snapshot(); s.Policy != "adhoc" {
		t.Fatalf("policy %q after SetPolicy", s.Policy)
	}
	m.SetLimits(8, 2)
	if s := m.Snapshot(); s.MaxBatch != 8 || s.Instances != 2 || s.BatchSize != 8 {
		t.Fatalf("after SetLimits: %+v", s)
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	pol, _ := policy.New("adhoc", policy.Options{})
	bad := regression.Line{AlphaMs: -1}
	tests := []Config{
		{Model: "m", Window: time.Second, MaxBatch: 8},
		{Model: "m", Policy: pol, MaxBatch: 8},
		{Model: "m", Policy: pol, Window: time.Second},
		{Model: "m", Policy: pol, Window: time.Second, MaxBatch: 8, Seed: &bad},
	}
	for i, c := range tests {
		if _, err := New(c); err == nil {
			t.Errorf("config %d accepted", i)
		}
	}
}

// slowPolicy blocks in Plan until released, like a long SMDP solve.
type slowPolicy struct {
	policy.Policy
	release chan struct{}
}

func (p slowPolicy) Plan(e policy.Estimate) policy.Rule {
	<-p.release
	return p.Policy.Plan(e)
}

func TestSetPolicyDoesNotBlockWhileRunning(t *testing.T) {
	m, _ := newMonitorDefaultSeed(t, 8)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	for !m.running.Load() {
		time.Sleep(time.Millisecond)
	}
	adhoc, _ := policy.New("adhoc", policy.Options{})
	slow := slowPolicy{Policy: adhoc, release: make(chan struct{})}
	returned := make(chan (<-chan struct{}))
	go func() { returned <- m.SetPolicy(slow) }()
	var planned <-chan struct{}
	select {
	case planned = <-returned:
	case <-time.After(2 * time.Second):
		t.Fatal("SetPolicy waited for the plan")
	}
	select {
	case <-planned:
		t.Fatal("SetPolicy's channel closed before the new policy planned")
	case <-time.After(20 * time.Millisecond):
	}
	close(slow.release) // the monitor's goroutine finishes the plan
	select {
	case <-planned:
	case <-time.After(5 * time.Second):
		t.Fatal("the new policy's rule was never published")
	}
	// Closed means published: the state read now is the new policy's
	// (what PUT /policy answers with).
	if got := m.Snapshot().Policy; got != "adhoc" {
		t.Fatalf("policy when SetPolicy's channel closed = %q, want adhoc", got)
	}
}
