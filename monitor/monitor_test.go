package monitor

import (
	"context"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratebatch/ratebatch/policy"
	"github.com/ratebatch/ratebatch/policy/batchcost"
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
			m.arrive(tt.arrivals)
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
	m.arrive(700)
	clk.add(time.Second)
	m.Tick()
	clk.add(2 * time.Second) // a late tick: the rate uses the real elapsed time
	m.Tick()
	s := m.Snapshot()
	if s.RatePerSec != 0 || s.Arrivals != 700 {
		t.Fatalf("rate %v total %d, want 0 and 700", s.RatePerSec, s.Arrivals)
	}
	m.arrive(100)
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
		m.observe(b, time.Duration(float64(time.Millisecond)*(2*float64(b)+3)))
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

// slowPolicy blocks in Plan until released, like a long SMDP solve. It
// reports on entered (when not nil) that a Plan has begun.
type slowPolicy struct {
	policy.Policy
	release chan struct{}
	entered chan struct{}
}

func (p slowPolicy) Plan(e policy.Estimate) policy.Rule {
	if p.entered != nil {
		select {
		case p.entered <- struct{}{}:
		default: // one report is enough
		}
	}
	<-p.release
	return p.Policy.Plan(e)
}

func TestSetPolicyDoesNotBlockWhileRunning(t *testing.T) {
	m, _ := newMonitorDefaultSeed(t, 8)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	for deadline := time.Now().Add(10 * time.Second); !m.running.Load(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("Run did not start within 10s")
		}
	}
	adhoc, _ := policy.New("adhoc", policy.Options{})
	slow := slowPolicy{Policy: adhoc, release: make(chan struct{}), entered: make(chan struct{}, 1)}
	var release sync.Once
	// A failure below must not leave Run stuck in Plan (the deferred
	// cancel waits for Run).
	defer release.Do(func() { close(slow.release) })
	returned := make(chan (<-chan struct{}))
	go func() { returned <- m.SetPolicy(slow) }()
	var planned <-chan struct{}
	select {
	case planned = <-returned:
	case <-time.After(2 * time.Second):
		t.Fatal("SetPolicy waited for the plan")
	}
	// The new policy's Plan has begun and cannot end before release: its
	// rule is not published, so the channel must still be open.
	select {
	case <-slow.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the new policy's Plan was never called")
	}
	select {
	case <-planned:
		t.Fatal("SetPolicy's channel closed before the new policy planned")
	default:
	}
	release.Do(func() { close(slow.release) }) // the monitor's goroutine finishes the plan
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

func TestRateFollowsAStepWithinASlice(t *testing.T) {
	m, clk := newMonitorDefaultSeed(t, 32)
	slice := m.TickEvery()
	if slice != time.Second/Slices {
		t.Fatalf("tick every %v, want a %d-th of the window", slice, Slices)
	}
	// Idle, then 800 rows/s from one slice on: the very next slice's
	// estimate is the new rate, not a blend with the idle past.
	for range 2 * Slices {
		clk.add(slice)
		m.Tick()
	}
	if r := m.Snapshot().RatePerSec; r != 0 {
		t.Fatalf("idle rate %v", r)
	}
	m.arrive(200)
	clk.add(slice)
	m.Tick()
	if r := m.Snapshot().RatePerSec; r != 800 {
		t.Fatalf("rate %v one slice after the step, want 800", r)
	}
	// Steady load: the estimate spans the whole window again.
	counts := []int{190, 210, 205, 195, 200}
	for _, n := range counts {
		m.arrive(n)
		clk.add(slice)
		m.Tick()
	}
	s := m.Snapshot()
	if s.Window != time.Second || s.RatePerSec != float64(210+205+195+200) {
		t.Fatalf("steady: rate %v over %v, want the last window's 810 over 1s", s.RatePerSec, s.Window)
	}
	// A step down is followed just as fast.
	clk.add(slice)
	m.Tick()
	if r := m.Snapshot().RatePerSec; r != 0 {
		t.Fatalf("rate %v one slice after the load stopped, want 0", r)
	}
}

func TestRateEstimatorRarelyMistakesNoiseForAStep(t *testing.T) {
	// Poisson counts of a steady 100 per slice: a false step resets the
	// estimate to one slice; it must stay rare.
	rng := rand.New(rand.NewPCG(1, 2))
	r := rateEstimator{window: time.Second}
	resets := 0
	for range 10000 { // 18 resets (0.18%) for this seed
		n := poisson(rng, 100)
		span, _ := r.add(n, time.Second/Slices)
		if span == time.Second/Slices {
			resets++
		}
	}
	if resets > 100 {
		t.Fatalf("%d of 10000 steady slices taken for a step", resets)
	}
}

// A wall clock's ticks are a little early or late; the estimate still
// spans one window, not a window and a slice.
func TestRateWindowOnAJitteryClock(t *testing.T) {
	slice := time.Second / Slices
	for _, jitter := range []time.Duration{0, time.Microsecond, 100 * time.Microsecond, 10 * time.Millisecond} {
		r := rateEstimator{window: time.Second}
		// The i-th tick comes (i mod 3) jitters late.
		late := func(i int) time.Duration { return time.Duration(i%3) * jitter }
		for i := 1; i <= 40; i++ {
			span, count := r.add(100, slice+late(i)-late(i-1))
			if i < Slices {
				continue
			}
			if span < time.Second-slice/2 || span > time.Second+slice/2 || count != 100*Slices {
				t.Fatalf("jitter %v, slice %d: %d rows over %v, want %d over about %v", jitter, i, count, span, 100*Slices, time.Second)
			}
		}
	}
}

func poisson(rng *rand.Rand, mean float64) int {
	// Knuth's method is fine for a test's means.
	l, k, p := math.Exp(-mean), 0, 1.0
	for {
		p *= rng.Float64()
		if p <= l {
			return k
		}
		k++
	}
}

func TestColdStartIsWorkConserving(t *testing.T) {
	pol, _ := policy.New(policy.NameBatchMonitorPlus, policy.Options{})
	m, err := New(Config{Model: "m", Policy: pol, Window: time.Second, MaxBatch: 8, Instances: 1})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1, 0)
	d := m.Rule().Decide(policy.Queue{Now: now, Rows: 3, OldestArrival: now, Instances: 1, MaxBatch: 8})
	if d.Rows != 3 {
		t.Fatalf("first rows: decision %+v, want all 3 sent at once", d)
	}
	if s := m.Snapshot(); s.FitDoubt == "" || !strings.Contains(s.Note, "work-conserving") {
		t.Fatalf("snapshot %+v: want a doubt and a work-conserving note", s)
	}
}

// TestServerStatisticsTeachTheFit feeds the monitor cumulative per-size
// statistics of a known line and round trips with an overhead on top: the
// fit is the server's line, the overhead is reported apart.
func TestServerStatisticsTeachTheFit(t *testing.T) {
	m, clk := newMonitorDefaultSeed(t, 32)
	truth := regression.Line{AlphaMs: 0.5, Tau0Ms: 4}
	const overhead = 3 * time.Millisecond
	rng := rand.New(rand.NewPCG(3, 4))
	totals := map[int]*BatchTotal{}
	snapshot := func() []BatchTotal { return totalsOf(totals) }
	// Stats from before the monitor started are a baseline, not learnt.
	totals[1] = &BatchTotal{Batch: 1, Count: 1000, Time: 1000 * 50 * time.Millisecond}
	m.ObserveServer(snapshot())
	for w := 0; w < 20; w++ {
		for range 100 {
			b := 1 + rng.IntN(6)
			d := time.Duration(truth.TauMs(b) * math.Exp(0.05*rng.NormFloat64()) * float64(time.Millisecond))
			if totals[b] == nil {
				totals[b] = &BatchTotal{Batch: b}
			}
			totals[b].Count++
			totals[b].Time += d
			m.observe(b, d+overhead)
		}
		m.ObserveServer(snapshot())
		clk.add(m.TickEvery())
		m.Tick()
	}
	s := m.Snapshot()
	if s.FitSource != "server statistics" || s.FitDoubt != "" {
		t.Fatalf("source %q doubt %q", s.FitSource, s.FitDoubt)
	}
	if math.Abs(s.AlphaMs/truth.AlphaMs-1) > 0.05 || math.Abs(s.Tau0Ms/truth.Tau0Ms-1) > 0.05 {
		t.Fatalf("fit %v*b + %v, want %v within 5%%", s.AlphaMs, s.Tau0Ms, truth)
	}
	if s.OverheadMs == nil || math.Abs(*s.OverheadMs-3) > 0.3 {
		t.Fatalf("overhead %v ms, want about 3", s.OverheadMs)
	}
	// The plan sees the line as the proxy lives it: batchmonitor's bound
	// tau(2) includes the overhead (0.5*2 + 4 + 3 ms).
	if w := m.Rule().Status().MaxWait; math.Abs(w.Seconds()*1000-8) > 0.5 {
		t.Fatalf("planned tau(2) %v, want about 8 ms (compute 5 + overhead 3)", w)
	}
	// A server restart (counts down) starts a new baseline, learning nothing wrong.
	clear(totals)
	totals[2] = &BatchTotal{Batch: 2, Count: 1, Time: time.Second}
	m.ObserveServer(snapshot())
	clk.add(m.TickEvery())
	m.Tick()
	if a := m.Snapshot().AlphaMs; math.Abs(a/truth.AlphaMs-1) > 0.05 {
		t.Fatalf("after a restart alpha %v", a)
	}
}

// TestServerFitIsTheMeanLineWhenSizesAreSeenUnequally is high load on a
// heavy-tailed server: nearly every batch is B_max, the smaller sizes are
// formed a few dozen times, and one batch in 100 is 3-10x slower. The fit
// must still be the mean line (what the server's throughput depends on):
// a fit of the sizes' plain means reads tau0 far low here, because the
// rare sizes' means mostly miss the slow batches B_max's mean has.
func TestServerFitIsTheMeanLineWhenSizesAreSeenUnequally(t *testing.T) {
	median := regression.Line{AlphaMs: 1.182, Tau0Ms: 2.396}
	// E[multiplier]: log-normal spread 0.05, and 1% of batches 3-10x.
	scale := math.Exp(0.05*0.05/2) * (0.99 + 0.01*6.5)
	truth := regression.Line{AlphaMs: median.AlphaMs * scale, Tau0Ms: median.Tau0Ms * scale}
	for _, seed := range []uint64{1, 2, 3, 4} {
		m, clk := newMonitorDefaultSeed(t, 8)
		rng := rand.New(rand.NewPCG(seed, 7))
		totals := map[int]*BatchTotal{}
		run := func(b int) {
			mult := math.Exp(0.05 * rng.NormFloat64())
			if rng.Float64() < 0.01 {
				mult *= 3 + 7*rng.Float64()
			}
			if totals[b] == nil {
				totals[b] = &BatchTotal{Batch: b, Count: 1, Time: time.Second} // a warm-up baseline
			}
			totals[b].Count++
			totals[b].Time += time.Duration(median.TauMs(b) * mult * float64(time.Millisecond))
		}
		snapshot := func() []BatchTotal { return totalsOf(totals) }
		for b := 1; b <= 8; b++ {
			run(b)
		}
		m.ObserveServer(snapshot())
		plain := map[int]*sizeMean{}
		for range 120 { // 30 s of quarter-second reads at rho 0.8
			before := map[int]BatchTotal{}
			for b, t := range totals {
				before[b] = *t
			}
			for range 15 {
				run(8)
			}
			if rng.IntN(3) == 0 {
				run(1 + rng.IntN(7))
			}
			m.ObserveServer(snapshot())
			for b, t := range totals {
				if n := t.Count - before[b].Count; n > 0 {
					if plain[b] == nil {
						plain[b] = &sizeMean{}
					}
					plain[b].add(n, float64(t.Time-before[b].Time)/float64(time.Millisecond))
				}
			}
			clk.add(m.TickEvery())
			m.Tick()
		}
		s := m.Snapshot()
		var means []regression.Sample
		for b, a := range plain {
			means = append(means, regression.Sample{Batch: b, LatencyMs: a.ms / a.n, Weight: a.n})
		}
		naive, err := regression.FitSamples(means, regression.Options{OutlierCut: -1})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("seed %d: fit %.4f*b + %.4f, plain means %.4f*b + %.4f, true mean line %.4f*b + %.4f",
			seed, s.AlphaMs, s.Tau0Ms, naive.AlphaMs, naive.Tau0Ms, truth.AlphaMs, truth.Tau0Ms)
		if math.Abs(s.AlphaMs/truth.AlphaMs-1) > 0.05 || math.Abs(s.Tau0Ms/truth.Tau0Ms-1) > 0.10 {
			t.Errorf("seed %d: fit %.4f*b + %.4f, want the mean line %.4f*b + %.4f (alpha within 5%%, tau0 within 10%%)",
				seed, s.AlphaMs, s.Tau0Ms, truth.AlphaMs, truth.Tau0Ms)
		}
	}
}

func TestDoubtUntilTheLineIsKnown(t *testing.T) {
	m, clk := newMonitorDefaultSeed(t, 32)
	tick := func() Snapshot { clk.add(m.TickEvery()); m.Tick(); return m.Snapshot() } // reads m, clk as reassigned
	if s := tick(); !strings.Contains(s.FitDoubt, "no batch") {
		t.Fatalf("doubt %q before any batch", s.FitDoubt)
	}
	for range 50 {
		m.observe(2, 5*time.Millisecond)
	}
	if s := tick(); !strings.Contains(s.FitDoubt, "one batch size") || !strings.Contains(s.Note, "work-conserving") {
		t.Fatalf("one size: doubt %q note %q", s.FitDoubt, s.Note)
	}
	// Two sizes in heavy noise: the slope is still unknown.
	m, clk = newMonitorDefaultSeed(t, 32)
	rng := rand.New(rand.NewPCG(5, 6))
	for i := range 8 {
		b := 2 + i%2
		m.observe(b, time.Duration((0.5*float64(b)+4+3*rng.NormFloat64())*float64(time.Millisecond)))
	}
	if s := tick(); !strings.Contains(s.FitDoubt, "uncertain") || s.SEAlphaMs == nil {
		t.Fatalf("noisy: doubt %q se %v", s.FitDoubt, s.SEAlphaMs)
	}
	for i := range 200 {
		b := 1 + i%8
		m.observe(b, time.Duration((0.5*float64(b)+4+0.05*rng.NormFloat64())*float64(time.Millisecond)))
	}
	if s := tick(); s.FitDoubt != "" {
		t.Fatalf("a clear line is still doubted: %q", s.FitDoubt)
	}
}

func TestServerWarmUpIsNotLearnt(t *testing.T) {
	m, clk := newMonitorDefaultSeed(t, 8)
	m.ObserveServer(nil) // a fresh server: nothing ran yet
	// The first executions include a 500 ms warm-up; then 1 + b ms each.
	totals := []BatchTotal{{Batch: 1, Count: 10, Time: 500*time.Millisecond + 10*2*time.Millisecond}, {Batch: 4, Count: 10, Time: 10 * 5 * time.Millisecond}}
	m.ObserveServer(totals)
	for w := 1; w <= 5; w++ {
		totals[0].Count += 10
		totals[0].Time += 10 * 2 * time.Millisecond
		totals[1].Count += 10
		totals[1].Time += 10 * 5 * time.Millisecond
		m.ObserveServer(totals)
	}
	clk.add(m.TickEvery())
	m.Tick()
	if s := m.Snapshot(); math.Abs(s.AlphaMs-1) > 0.01 || math.Abs(s.Tau0Ms-1) > 0.05 {
		t.Fatalf("fit %v*b + %v, want 1*b + 1: the warm-up was learnt", s.AlphaMs, s.Tau0Ms)
	}
}

// SetEnergy reaches the policy's estimate at the next plan.
func TestSetEnergyReachesThePlan(t *testing.T) {
	var got []policy.Estimate
	rec := planRecorder(func(e policy.Estimate) { got = append(got, e) })
	m, err := New(Config{Model: "m", Policy: rec, Window: time.Second, MaxBatch: 8, Instances: 1})
	if err != nil {
		t.Fatal(err)
	}
	m.Tick()
	m.SetEnergy(&batchcost.Energy{BetaMJ: 2, Zeta0MJ: 3})
	m.Tick()
	if n := len(got); n < 3 || got[n-2].HasEnergy || !got[n-1].HasEnergy || got[n-1].BetaMJ != 2 || got[n-1].Zeta0MJ != 3 {
		t.Fatalf("estimates %+v: want no energy before SetEnergy and 2/3 after", got)
	}
	m.SetEnergy(nil)
	m.Tick()
	if got[len(got)-1].HasEnergy {
		t.Error("energy still set after SetEnergy(nil)")
	}
}

// planRecorder is a policy that records every estimate it plans for.
type planRecorder func(policy.Estimate)

func (planRecorder) Name() string { return "recorder" }

func (f planRecorder) Plan(e policy.Estimate) policy.Rule {
	f(e)
	return policy.Fill{Policy: "recorder", Batch: 1}
}

// The estimate a plan gets says when the rate just stepped (or the model
// just started): until the estimate spans a whole window again. A steady
// load never says so once it has.
func TestEstimateSaysTheRateStepped(t *testing.T) {
	m, clk := newMonitorDefaultSeed(t, 32)
	slice := m.TickEvery()
	tick := func(n int) bool {
		m.arrive(n)
		clk.add(slice)
		m.Tick()
		return m.current.Load().est.Stepped
	}
	for i, tc := range []struct {
		n       int
		stepped bool
	}{
		{200, true}, {200, true}, {200, true}, {200, false}, {205, false}, {195, false}, // start, then steady
		{5, true}, {5, true}, {4, true}, {6, false}, // a step down, then held for a window
		{300, true}, {290, true}, {5, true}, // a burst
	} {
		if got := tick(tc.n); got != tc.stepped {
			t.Fatalf("slice %d (%d rows): stepped %v, want %v (window %v)", i, tc.n, got, tc.stepped, m.current.Load().est.Window)
		}
	}
}
