package monitor

import (
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/ratebatch/ratebatch/policy"
	"github.com/ratebatch/ratebatch/regression"
)

// recorder is a policy that keeps the last estimate it planned from.
type recorder struct {
	mu   sync.Mutex
	last policy.Estimate
}

func (*recorder) Name() string { return "recorder" }
func (r *recorder) Plan(e policy.Estimate) policy.Rule {
	r.mu.Lock()
	r.last = e
	r.mu.Unlock()
	return policy.Adhoc{}.Plan(e)
}

// newRecorded is a monitor of a B_max 8 model, seeded with tau(b) =
// 0.5 b + 4 ms, whose plans rec records, on a fake clock.
func newRecorded(t *testing.T) (*Monitor, *recorder, *fakeClock) {
	t.Helper()
	clk := &fakeClock{t: time.Unix(1000, 0)}
	rec := &recorder{}
	m, err := New(Config{Model: "m", Policy: rec, Window: time.Second, MaxBatch: 8, Instances: 1,
		Seed: &regression.Line{AlphaMs: 0.5, Tau0Ms: 4}, Now: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	return m, rec, clk
}

// totalsOf is the server's statistics as a read returns them.
func totalsOf(totals map[int]*BatchTotal) []BatchTotal {
	out := make([]BatchTotal, 0, len(totals))
	for _, t := range totals {
		out = append(out, *t)
	}
	return out
}

func (r *recorder) estimate() policy.Estimate {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last
}

// The round trip beyond the server's compute grows with the rows on a
// server that handles each request outside its statistics (PyTriton's
// Python side, an emulator decoding each row): the plan takes it as the
// line it is, not as the mean over a mix of mostly small batches, which
// under-prices the larger batches a batching policy forms. Hold and after
// times reach the plan as measured, lone and merged apart.
func TestOverheadIsALineAndTheTimeAroundABatchReachesThePlan(t *testing.T) {
	m, rec, clk := newRecorded(t)
	compute := regression.Line{AlphaMs: 0.5, Tau0Ms: 4}
	over := func(b int) float64 { return 1 + 0.4*float64(b) } // ms
	totals := map[int]*BatchTotal{}
	snapshot := func() []BatchTotal { return totalsOf(totals) }
	for b := 1; b <= 8; b++ {
		totals[b] = &BatchTotal{Batch: b, Count: 1, Time: time.Duration(compute.TauMs(b) * float64(time.Millisecond))}
	}
	m.ObserveServer(snapshot())
	ms := func(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }
	for w := range 10 {
		for i := range 80 {
			b := 1 + (i+w)%4 // sizes 1..4 seen
			totals[b].Count++
			totals[b].Time += ms(compute.TauMs(b))
			m.observe(b, ms(compute.TauMs(b)+over(b)))
			if b == 1 {
				m.observeHold(1, ms(0.05))
				m.observeAfter(1, ms(0.01))
			} else {
				m.observeHold(b, ms(0.2))
				for range b {
					m.observeAfter(b, ms(0.3))
				}
			}
		}
		m.ObserveServer(snapshot())
		clk.add(m.TickEvery())
		m.Tick()
	}
	e := rec.estimate()
	// Compute 0.5*b + 4 and overhead 0.4*b + 1: the plan's line 0.9*b + 5,
	// also at B_max = 8, which the traffic never formed.
	if math.Abs(e.AlphaMs-0.9) > 0.02 || math.Abs(e.Tau0Ms-5) > 0.05 {
		t.Errorf("planned line %.4g*b + %.4g, want 0.9*b + 5", e.AlphaMs, e.Tau0Ms)
	}
	x := e.Extra
	if math.Abs(x.HoldLoneMs-0.05) > 1e-3 || math.Abs(x.HoldMergedMs-0.2) > 1e-3 || math.Abs(x.AfterLoneMs-0.01) > 1e-3 || math.Abs(x.AfterMergedMs-0.3) > 1e-3 {
		t.Errorf("planned extra %+v, want hold 0.05/0.2 and after 0.01/0.3 ms", x)
	}
	o := m.Snapshot().Outside
	if math.Abs(o.OverheadPerRowMs-0.4) > 0.02 || math.Abs(o.OverheadMs-1) > 0.05 || o.LoneBatches == 0 || o.MergedBatches == 0 || o.HoldMergedMs != x.HoldMergedMs {
		t.Errorf("status shows %+v", o)
	}
}

// With one batch size only (B_max at high load) the slope of the overhead
// cannot be told: the plan takes the mean as a constant.
func TestOverheadOfOneSizeIsAConstant(t *testing.T) {
	m, rec, clk := newRecorded(t)
	totals := []BatchTotal{{Batch: 8, Count: 1, Time: 8 * time.Millisecond}}
	m.ObserveServer(totals)
	for range 100 {
		totals[0].Count++
		totals[0].Time += 8 * time.Millisecond
		m.observe(8, 10*time.Millisecond)
	}
	m.ObserveServer(totals)
	clk.add(m.TickEvery())
	m.Tick()
	e := rec.estimate()
	if got := e.TauMs(8) - m.Snapshot().Latency.TauMs(8); math.Abs(got-2) > 0.05 || math.Abs(e.AlphaMs-m.Snapshot().AlphaMs) > 1e-9 {
		t.Errorf("planned tau(8) beyond the fit %.4g ms with slope %.4g (fit %.4g), want 2 ms and the fit's slope", got, e.AlphaMs, m.Snapshot().AlphaMs)
	}
}

// The calls' latency reaches the next plan as a mean over the calls
// answered in the slice that arrived in it or in the slice before: a call
// that straddles a plan counts in the slice it is answered in (dropping
// it would hide the longest calls), one that arrived two slices back
// lived partly under an older rule and is not counted; each plan starts a
// new sum.
func TestLiveLatencyIsTheSliceCalls(t *testing.T) {
	m, clk, rec := sliceMonitor(t)
	m.Tick() // the first plan: a slice boundary before the one tested
	clk.add(100 * time.Millisecond)
	m.Tick()
	start := clk.now() // the slice tested starts here
	clk.add(50 * time.Millisecond)
	m.observeCall(start.Add(-150*time.Millisecond), 160*time.Millisecond) // two slices back: dropped
	m.observeCall(start.Add(-5*time.Millisecond), 9*time.Millisecond)     // straddles the plan: counted
	m.observeCall(start.Add(time.Millisecond), 2*time.Millisecond)
	m.observeCall(start.Add(10*time.Millisecond), 4*time.Millisecond)
	clk.add(50 * time.Millisecond)
	m.Tick()
	if got := rec.estimate().Live; got.Calls != 3 || math.Abs(got.MeanMs-5) > 1e-9 {
		t.Errorf("live %+v, want 3 calls at a mean of 5 ms", got)
	}
	if got := rec.estimate().Live.Hist.Count(); got != 3 {
		t.Errorf("live histogram counts %v calls, want the same 3", got)
	}
	clk.add(100 * time.Millisecond)
	m.Tick()
	if got := rec.estimate().Live; got != (policy.Live{}) {
		t.Errorf("live %+v after a slice without calls, want none", got)
	}
}

// resumer is a policy that records what it resumed from.
type resumer struct {
	recorder
	from policy.Policy
}

func (r *resumer) Name() string                 { return "resumer" }
func (r *resumer) Resume(earlier policy.Policy) { r.from = earlier }

// A policy that replaces one of another name resumes from the last one of
// its own name on this model: an A/B through PUT /policy does not start a
// learning policy over.
func TestSetPolicyResumesTheLastOfItsName(t *testing.T) {
	first, second := &resumer{}, &resumer{}
	m, err := New(Config{Model: "m", Policy: first, Window: time.Second, MaxBatch: 8, Instances: 1})
	if err != nil {
		t.Fatal(err)
	}
	<-m.SetPolicy(&recorder{})
	<-m.SetPolicy(second)
	if second.from != first {
		t.Errorf("resumed from %v, want the first policy of its name", second.from)
	}
	if first.from != nil {
		t.Errorf("the first resumed from %v, want nothing", first.from)
	}
}

// The decisions the dispatcher reports reach the next plan, per slice:
// how many, and how many could have waited for a partner.
func TestDecisionsReachThePlan(t *testing.T) {
	m, rec, clk := newRecorded(t)
	for _, tc := range []struct{ closed, open int }{{3, 0}, {2, 5}, {0, 0}} {
		for range tc.closed {
			m.observeDecision(false)
		}
		for range tc.open {
			m.observeDecision(true)
		}
		clk.add(m.TickEvery())
		m.Tick()
		if e := rec.estimate(); e.Decisions != tc.closed+tc.open || e.OpenDecisions != tc.open {
			t.Fatalf("slice with %d closed and %d open decisions: plan saw %d, %d open", tc.closed, tc.open, e.Decisions, e.OpenDecisions)
		}
	}
}

// A batch that runs slow, by the server's spread, a heavy tail or a stall,
// is slow in the server's compute as much as in the proxy's round trip: the
// overhead between them stays what the round trip adds. Measured per
// round trip against the fit's mean line, a 20-ms stall read as a 20-ms
// overhead, and the overhead's moving average jumped by a millisecond at
// each (the rough emulator at 350 req/s: a line of 2.19 - 0.24 b ms where
// the round trips exceeded compute by 0.7 ms).
func TestOverheadIgnoresTheBatchesOwnSpread(t *testing.T) {
	const overMs = 0.7
	for _, tc := range []struct {
		name        string
		tail, stall float64 // shares of batches 5x slower and 20 ms longer
		sigma       float64
		// The round trips' squared coefficient of variation the monitor
		// should read, between these (0.28 and 0.80 for these draws:
		// `go test ./monitor -run TestOverheadIgnores -v` logs them).
		scvMin, scvMax float64
	}{
		{"exact", 0, 0, 0, 0, 1e-9},
		{"rough", 0.01, 0.005, 0.05, 0.1, 0.5},
		{"stalls", 0, 0.02, 0, 0.5, 1.5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, _, clk := newRecorded(t)
			rng := rand.New(rand.NewPCG(7, 8))
			compute := regression.Line{AlphaMs: 0.3, Tau0Ms: 1.2}
			totals := map[int]*BatchTotal{}
			snapshot := func() []BatchTotal { return totalsOf(totals) }
			for b := 1; b <= 4; b++ {
				totals[b] = &BatchTotal{Batch: b, Count: 1, Time: time.Millisecond}
			}
			m.ObserveServer(snapshot())
			ms := func(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }
			worst := 0.0
			for read := range 200 {
				for range 25 {
					b := 1 + rng.IntN(4)
					c := compute.TauMs(b) * math.Exp(tc.sigma*rng.NormFloat64())
					if u := rng.Float64(); u < tc.tail {
						c *= 5
					} else if u < tc.tail+tc.stall {
						c += 20
					}
					totals[b].Count++
					totals[b].Time += ms(c)
					m.observe(b, ms(c+overMs))
				}
				m.ObserveServer(snapshot())
				clk.add(m.TickEvery())
				m.Tick()
				if read < 20 {
					continue // the line's sizes each seen overheadMinBatches times
				}
				o := m.Snapshot().Outside
				for b := 1.0; b <= 4; b++ {
					worst = max(worst, math.Abs(o.OverheadMs+o.OverheadPerRowMs*b-overMs))
				}
				worst = max(worst, math.Abs(*m.Snapshot().OverheadMs-overMs))
			}
			if worst > 0.05 {
				t.Errorf("overhead off by up to %.3g ms, want within 0.05 of %g", worst, overMs)
			}
			if scv := m.Snapshot().Outside.ServiceSCV; scv < tc.scvMin || scv > tc.scvMax {
				t.Errorf("service SCV %.3g, want in [%g, %g]", scv, tc.scvMin, tc.scvMax)
			}
		})
	}
}

// The slice's calls reach the plan as a distribution too (Live.Hist), and
// /status shows their p99 and mean over the last slices.
func TestLiveDistributionAndLivedP99(t *testing.T) {
	m, clk, rec := sliceMonitor(t)
	start := clk.now()
	clk.add(50 * time.Millisecond)
	for i := range 200 { // 198 calls at 2 ms, 2 at 40 ms
		d := 2 * time.Millisecond
		if i%100 == 0 {
			d = 40 * time.Millisecond
		}
		m.observeCall(start.Add(time.Millisecond), d)
	}
	clk.add(50 * time.Millisecond)
	m.Tick()
	live := rec.estimate().Live
	if live.Hist == nil || live.Hist.Count() != 200 {
		t.Fatalf("live %+v, want the 200 calls' histogram", live)
	}
	if p50 := live.Hist.QuantileMs(0.5); math.Abs(p50/2-1) > 0.1 {
		t.Errorf("slice p50 %.4g ms, want 2", p50)
	}
	if p := live.Hist.QuantileMs(0.995); p < 30 {
		t.Errorf("slice p99.5 %.4g ms, want the 40-ms calls", p)
	}
	s := m.Snapshot()
	wantMean := (198*2 + 2*40) / 200.0
	if math.Abs(s.LivedMeanMs/wantMean-1) > 1e-6 || math.Abs(s.LivedP99Ms/2-1) > 0.1 {
		t.Errorf("snapshot lived mean %.4g ms p99 %.4g ms, want %.4g and 2", s.LivedMeanMs, s.LivedP99Ms, wantMean)
	}
}

// sliceMonitor is a monitor on a fake clock, its first plan made.
func sliceMonitor(t *testing.T) (*Monitor, *fakeClock, *recorder) {
	t.Helper()
	clk := &fakeClock{t: time.Unix(1000, 0)}
	rec := &recorder{}
	m, err := New(Config{Model: "m", Policy: rec, Window: time.Second, MaxBatch: 8, Instances: 1, Now: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	m.Tick()
	return m, clk, rec
}
