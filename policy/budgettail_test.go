package policy

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/ratebatch/ratebatch/policy/batchcost"
	"github.com/ratebatch/ratebatch/policy/smdp"
)

// gridModel100 is the model a plan for e solves (its 2% grid rate).
func gridModelOf(e Estimate) smdp.Model {
	lambda := math.Pow(1.02, math.Round(math.Log(e.RatePerSec/1000)/math.Log(1.02)))
	return smdp.Model{Latency: e.Latency, Energy: e.Energy, MaxBatch: e.MaxBatch, LambdaPerMs: lambda}
}

// lives simulates rule r as it decides (its limits, mix and hold bound
// read off its decisions' status) on a long run of its own seed.
func lives(t *testing.T, m smdp.Model, r BudgetRule) smdp.Tail {
	t.Helper()
	first, second, mix := r.Limits()
	return smdp.TailLatency(m, smdp.TailRule{First: first, Second: second, Mix: mix, HoldMs: float64(r.Status().MaxWait) / float64(time.Millisecond)},
		smdp.TailOptions{Requests: 200000, Seed: 99})
}

// The default holds the p99 within 1.20x ad-hoc's and the mean within
// 1.10x, on a long simulation of its own, and saves energy where the
// mean's plan alone would break the tail.
func TestBudgetHoldsTheTail(t *testing.T) {
	for _, rate := range []float64{300, 900, 1800} {
		e := energyEstimate(rate)
		m := gridModelOf(e)
		adhoc := smdp.TailLatency(m, smdp.TailRule{First: 1, Second: 1}, smdp.TailOptions{Requests: 200000, Seed: 99})
		meanOnly, ok := newBudget(t, "1.10x").Plan(e).(BudgetRule)
		if !ok {
			t.Fatalf("rate %v: the mean's plan is no BudgetRule", rate)
		}
		rule := newBudgetWith(t, BudgetOptions{}).Plan(e)
		r, ok := rule.(BudgetRule)
		if !ok {
			t.Logf("rate %v: %v", rate, rule.Status())
			continue
		}
		got, mo := lives(t, m, r), lives(t, m, meanOnly)
		t.Logf("rate %v: ad-hoc p99 %.3g mean %.3g; mean's plan p99 %.3g; default p99 %.3g mean %.3g energy %.3f of ad-hoc",
			rate, adhoc.P99Ms, adhoc.MeanMs, mo.P99Ms, got.P99Ms, got.MeanMs, got.EnergyMJ/adhoc.EnergyMJ)
		if got.P99Ms > 1.2*adhoc.P99Ms*1.03 || got.MeanMs > 1.1*adhoc.MeanMs*1.02 {
			t.Errorf("rate %v: the default lives p99 %.4g ms and mean %.4g ms, over 1.20x and 1.10x ad-hoc's %.4g and %.4g (%v)",
				rate, got.P99Ms, got.MeanMs, adhoc.P99Ms, adhoc.MeanMs, r.Status())
		}
		if mo.P99Ms > 1.25*adhoc.P99Ms && !(got.EnergyMJ < adhoc.EnergyMJ) {
			t.Errorf("rate %v: the default saves nothing (energy %.4g against ad-hoc's %.4g)", rate, got.EnergyMJ, adhoc.EnergyMJ)
		}
		if st := r.Status(); !(st.PlannedP99Ms > 0) || !strings.Contains(st.Note, "tail model") {
			t.Errorf("rate %v: status %+v says nothing of the tail", rate, st)
		}
	}
}

// An SLO well above ad-hoc's p99 at light load is paid in joules: the
// plan keeps its p99 under the SLO and spends no more per request than
// holding every batch for partners up to 4 ms (maxbatch's rule), which
// keeps it too.
func TestBudgetSLOPaysInJoules(t *testing.T) {
	e := energyEstimate(150)
	m := gridModelOf(e)
	p := newBudgetWith(t, BudgetOptions{SLOP99: 10 * time.Millisecond})
	if !p.MeanFree || p.Tail != 0 {
		t.Fatalf("slo_p99 alone: mean free %v, tail budget %v; want no relative budget", p.MeanFree, p.Tail)
	}
	r, ok := p.Plan(e).(BudgetRule)
	if !ok {
		t.Fatalf("Plan = %v, want a BudgetRule", p.Plan(e).Status())
	}
	got := lives(t, m, r)
	o := smdp.TailOptions{Requests: 200000, Seed: 99}
	adhoc := smdp.TailLatency(m, smdp.TailRule{First: 1, Second: 1}, o)
	hold4 := smdp.TailLatency(m, smdp.TailRule{First: e.MaxBatch, Second: e.MaxBatch, HoldMs: 4}, o)
	t.Logf("ad-hoc p99 %.3g; 4 ms hold p99 %.3g, %+.1f%% req/J; SLO plan p99 %.3g, %+.1f%% req/J (%v)", adhoc.P99Ms,
		hold4.P99Ms, 100*(adhoc.EnergyMJ/hold4.EnergyMJ-1), got.P99Ms, 100*(adhoc.EnergyMJ/got.EnergyMJ-1), r.Status().Note)
	if got.P99Ms > 10 {
		t.Errorf("p99 %.4g ms over the SLO of 10 ms", got.P99Ms)
	}
	if hold4.P99Ms <= 10 && got.EnergyMJ > hold4.EnergyMJ {
		t.Errorf("energy per request %.4g mJ, more than a plain 4 ms hold's %.4g", got.EnergyMJ, hold4.EnergyMJ)
	}
}

// Where the tail cannot be paid for, the default sends at once.
func TestBudgetTrickleSendsAtOnce(t *testing.T) {
	r := newBudgetWith(t, BudgetOptions{}).Plan(energyEstimate(20))
	if l, ok := r.(Limit); !ok || l.Limit != 1 {
		t.Errorf("a trickle of 20 req/s planned %T %v, want work-conserving", r, r.Status())
	}
}

func TestTailOptions(t *testing.T) {
	if p := newBudgetWith(t, BudgetOptions{}); p.Tail != DefaultTailBudget || p.MeanFree {
		t.Errorf("default tail budget %v (mean free %v), want %v", p.Tail, p.MeanFree, DefaultTailBudget)
	}
	if p := newBudgetWith(t, BudgetOptions{TailBudget: "1.5x", SLOP99: 15 * time.Millisecond, LatencyBudget: "1.2x"}); p.Tail != 1.5 || p.MeanFree || p.SLOP99 != 15*time.Millisecond {
		t.Errorf("tail 1.5x, slo 15ms, mean 1.2x read as tail %v, slo %v, mean free %v", p.Tail, p.SLOP99, p.MeanFree)
	}
	if p := newBudgetWith(t, BudgetOptions{TailBudget: "off"}); p.Tail != 0 {
		t.Errorf("tail budget off read as %v", p.Tail)
	}
	for _, bad := range []BudgetOptions{{TailBudget: "0.9x"}, {TailBudget: "1.2"}, {TailBudget: "soon"}, {SLOP99: -time.Millisecond}} {
		if _, err := New(NameBudget, NewOptions(bad)); err == nil {
			t.Errorf("options %+v accepted", bad)
		}
	}
}

// liveAt is a slice's calls, all of them at the given latencies.
func liveAt(calls int, p99 time.Duration) Live {
	h := new(Hist)
	h.Add(HistBucket(p99/2), float64(calls-calls/50))
	h.Add(HistBucket(p99*11/10), float64(calls/50))
	return Live{Calls: calls, MeanMs: float64(p99/2) / float64(time.Millisecond), Hist: h}
}

// The tail's trim follows the p99 the calls lived: over the SLO, the next
// plans hold a tighter bound (their predicted p99 falls); well under it,
// the bound comes back, never past the SLO.
func TestTailTrimFollowsTheP99(t *testing.T) {
	p := newBudgetWith(t, BudgetOptions{SLOP99: 10 * time.Millisecond})
	e := energyEstimate(150)
	planned := func() float64 {
		r := p.Plan(e)
		return r.Status().PlannedP99Ms
	}
	first := planned()
	if !(first > 9 && first <= 10) {
		t.Fatalf("first plan predicts p99 %.4g ms for an SLO of 10 ms", first)
	}
	e.Live = liveAt(100, 14*time.Millisecond) // lived p99 above 14 ms
	var got float64
	for range 2 * tailTrimSlices {
		got = planned()
	}
	if !(got < 0.8*first) || p.tt.steps == 0 {
		t.Fatalf("calls living p99 14 ms against 10: plans predict %.4g ms after, %.4g before (%d steps)", got, first, p.tt.steps)
	}
	e.Live = liveAt(100, 4*time.Millisecond)
	for range 20 * tailTrimSlices {
		got = planned()
	}
	if !(got > 0.9*first) || got > 10 || p.tailScaleNow() > 1 {
		t.Errorf("calls living p99 4 ms: plans predict %.4g ms (scale %.2f), want back near %.4g and within the SLO", got, p.tailScaleNow(), first)
	}
	if n := p.Plan(e).Status().Note; !strings.Contains(n, "tail trim") {
		t.Errorf("note %q says nothing of the tail trim", n)
	}
}

// When the bound at the trim's scale leaves the plans nothing to hold,
// their calls are ad-hoc's, which cannot show how much room the scale
// has: the trim grows it as soon as they did not live over its aim. Calls
// whose p99 lies between 90% of the aim and the aim (ad-hoc's under a
// 1.20x tail budget lies near the first, at 83% of the bound) are neither
// over nor under, and a scale that waited for "under" stayed where it
// was.
func TestTailTrimGrowsAScaleThatHoldsNothing(t *testing.T) {
	p := newBudgetWith(t, BudgetOptions{SLOP99: 10 * time.Millisecond})
	e := energyEstimate(150)
	holds := func() bool {
		r, ok := unwrapped(p.Plan(e)).(BudgetRule)
		return ok && r.saving() > 0
	}
	if !holds() {
		t.Fatal("the plan for an SLO of 10 ms at 150 req/s holds nothing")
	}
	p.setTailScale(tailTrimMin)
	if holds() {
		t.Fatalf("the plan at the tail scale %.2f holds calls; the test needs one that holds none", p.tailScaleNow())
	}
	h := new(Hist)
	h.Add(HistBucket(4*time.Millisecond), 98)
	h.Add(HistBucket(9*time.Millisecond), 2)
	e.Live = Live{Calls: 100, MeanMs: 4, Hist: h}
	for range 3 * tailTrimSlices {
		holds()
	}
	if !(p.tailScaleNow() > tailTrimMin) {
		t.Fatalf("scale %.2f after %d slices of plans that held nothing, their calls within the aim: want it grown", p.tailScaleNow(), 3*tailTrimSlices)
	}
	held := false
	for range 40 * tailTrimSlices {
		if held = holds(); held {
			break
		}
	}
	if !held {
		t.Errorf("scale %.2f: the plans still hold nothing", p.tailScaleNow())
	}
}

// uniformHist is 1,000 calls spread evenly from 0.01 to 10 ms.
func uniformHist() Hist {
	var h Hist
	for i := 1; i <= 1000; i++ {
		h.Add(HistBucket(time.Duration(i)*time.Millisecond/100), 1)
	}
	return h
}

func TestHistQuantile(t *testing.T) {
	h := uniformHist()
	for _, q := range []float64{0.5, 0.9, 0.99} {
		want := q * 10
		if got := h.QuantileMs(q); math.Abs(got/want-1) > 0.1 {
			t.Errorf("q%.2f %.4g ms, want %.4g", q, got, want)
		}
	}
}

func TestHistCountAbove(t *testing.T) {
	h := uniformHist()
	for _, ms := range []float64{1, 5, 9.9} {
		want := 1000 * (10 - ms) / 10
		if got := h.CountAbove(ms); math.Abs(got-want) > 0.06*1000*ms/10+1 {
			t.Errorf("above %v ms: %.1f calls, want %.0f", ms, got, want)
		}
	}
}

// The trim steps only on a p99 it can tell from its aim, 95% of the
// bound: 1.2% of a few thousand calls just over the SLO is within the
// noise of a plan that keeps it; 3% between the aim and the SLO is a p99
// a client's run could read over it.
func TestTailTrimStepsOverItsAim(t *testing.T) {
	for _, tt := range []struct {
		name  string
		at    time.Duration // where the slow calls lived
		share float64       // their share, per cent
		step  bool
	}{
		{"1.2% at 11 ms: noise", 11 * time.Millisecond, 1.2, false},
		{"3% at 9.8 ms: over the aim", 9800 * time.Microsecond, 3, true},
		{"3% at 12 ms: over the SLO", 12 * time.Millisecond, 3, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := newBudgetWith(t, BudgetOptions{SLOP99: 10 * time.Millisecond})
			e := energyEstimate(150)
			h := new(Hist)
			h.Add(HistBucket(5*time.Millisecond), 100-tt.share)
			h.Add(HistBucket(tt.at), tt.share)
			e.Live = Live{Calls: 100, MeanMs: 5, Hist: h}
			for range 3 * tailTrimSlices {
				p.Plan(e)
			}
			if stepped := p.tt.steps > 0 && p.tailScaleNow() < 1; stepped != tt.step {
				t.Errorf("%d steps, scale %.2f; want a step down %v", p.tt.steps, p.tailScaleNow(), tt.step)
			}
		})
	}
}

// The capacity floor: at every rate the default's plan keeps a p99 no
// higher than ad-hoc's at the rate divided by the floor, or than
// floorResolution over ad-hoc's p99 at the rate, so whatever the absolute
// p99 bound a search can resolve, the default's capacity under it is at
// least the floor's share of ad-hoc's (capacitySlack). The tail budget alone
// (capacity_floor off) breaks that at some load, or the test would test
// nothing.
//
// The lines: googlenet-p4 with B_max 8 (the emulator's, with its energy
// line) at 300 to 1700 req/s, and PyTriton's as the live comparisons with
// Triton's batcher run it (4 + 0.5 b ms, B_max 16, no energy meter) at
// 200 and 650 req/s.
func TestCapacityFloorKeepsAdhocsCapacity(t *testing.T) {
	o := smdp.TailOptions{Requests: tailRequests, Seed: tailSeed}
	googlenet8 := func(rate float64) Estimate {
		e := energyEstimate(rate)
		e.MaxBatch = 8
		return e
	}
	pytriton := func(rate float64) Estimate {
		e := estimate(rate)
		e.Latency = batchcost.Latency{AlphaMs: 0.5, Tau0Ms: 4}
		e.MaxBatch = 16
		return e
	}
	broken := 0
	for _, pt := range []struct {
		rate float64
		line func(float64) Estimate
	}{
		{300, googlenet8}, {500, googlenet8}, {800, googlenet8}, {1100, googlenet8}, {1400, googlenet8}, {1700, googlenet8},
		{200, pytriton}, {650, pytriton},
	} {
		rate, e := pt.rate, pt.line(pt.rate)
		m := gridModelOf(e)
		up := m
		up.LambdaPerMs /= DefaultCapacityFloor
		limit := smdp.TailLatency(up, smdp.TailRule{First: 1, Second: 1}, o).P99Ms
		for _, tc := range []struct {
			name  string
			floor string
		}{{"default", ""}, {"floor off", "off"}} {
			rule := newBudgetWith(t, BudgetOptions{CapacityFloor: tc.floor}).Plan(e)
			r, ok := rule.(BudgetRule)
			if !ok || r.tail == nil {
				t.Logf("%v req/s, %s: ad-hoc (%s)", rate, tc.name, rule.Status().Note)
				continue
			}
			planned := r.tail.planned.P99Ms
			if r.tail.factor < 1+floorResolution {
				t.Errorf("%v req/s, %s: the relative tail bound is %.3fx ad-hoc's p99, under the floor's resolution (%.2fx)", rate, tc.name, r.tail.factor, 1+floorResolution)
			}
			t.Logf("B_max %d, %v req/s (rho %.2f), %s: p99 planned %.3f ms, ad-hoc's %.3f, ad-hoc's at %.4g req/s %.3f; saves %.2f%%",
				e.MaxBatch, rate, m.Rho(), tc.name, planned, r.tail.adhoc.P99Ms, 1000*up.LambdaPerMs, limit, 100*r.tail.saving())
			switch {
			case tc.floor == "" && planned > max(limit, r.tail.adhoc.P99Ms*(1+floorResolution))*1.001:
				t.Errorf("%v req/s: the default plans p99 %.4g ms, over ad-hoc's %.4g at %.4g req/s and over %.2fx its %.4g here: its capacity under a bound of %.4g ms is under %.2f of ad-hoc's",
					rate, planned, limit, 1000*up.LambdaPerMs, 1+floorResolution, r.tail.adhoc.P99Ms, limit, DefaultCapacityFloor)
			case tc.floor == "off" && planned > limit*1.001:
				broken++
			}
		}
	}
	if broken == 0 {
		t.Error("the tail budget alone keeps the capacity floor at every rate tried: the test tells nothing")
	}
}

func TestParseCapacityFloor(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want float64
		ok   bool
	}{
		{"0.97", 0.97, true}, {" 1 ", 1, true}, {"off", 0, true}, {"None", 0, true},
		{"0", 0, false}, {"1.2", 0, false}, {"-0.5", 0, false}, {"97%", 0, false}, {"NaN", 0, false}, {"", 0, false},
	} {
		got, err := ParseCapacityFloor(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseCapacityFloor(%q) = %v, %v; want %v (ok %v)", tc.in, got, err, tc.want, tc.ok)
		}
	}
	if err := (BudgetOptions{CapacityFloor: "2"}).Validate(); err == nil || !strings.Contains(err.Error(), "capacity_floor") {
		t.Errorf("capacity_floor 2: %v, want an error naming it", err)
	}
}

// The live bound the phases and the tail trim hold the calls to is the
// capped factor, not the tail budget: where the floor caps the plan, a
// p99 the floor forbids ends the holds live too.
func TestLiveBoundIsTheCappedFactor(t *testing.T) {
	e := energyEstimate(800)
	e.MaxBatch = 8
	p := newBudgetWith(t, BudgetOptions{})
	r, ok := p.Plan(e).(BudgetRule)
	if !ok || r.tail == nil || !r.tail.capped {
		t.Fatalf("800 req/s, B_max 8: want a plan the floor caps, got %s", p.Plan(e).Status().Note)
	}
	h := uniformHist()
	p.tt.adhoc.MergeScaled(&h, 1) // ad-hoc's calibration: 500 calls or more
	calib := p.tailCalib()
	if !(calib > 0) {
		t.Fatal("no calibration")
	}
	got, want := p.liveBound(p.tt.ref), p.tt.factor*calib*p.tt.ref
	if math.Abs(got/want-1) > 1e-9 || !(p.tt.factor < p.Tail) {
		t.Errorf("live bound %.4g ms, want the capped factor %.4g x calibration %.4g x ad-hoc's %.4g = %.4g (the tail budget %.2g would give %.4g)",
			got, p.tt.factor, calib, p.tt.ref, want, p.Tail, p.Tail*calib*p.tt.ref)
	}
}

// A hold bound is simulated once per hold as it lives: the halving
// search's holds under a millisecond live alike and cost one simulation.
func TestByLivedHoldSimulatesOncePerLivedHold(t *testing.T) {
	ms := func(x float64) time.Duration { return time.Duration(x * float64(time.Millisecond)) }
	sims := 0
	tail := byLivedHold(ms(0.1), func(hold time.Duration) smdp.Tail {
		sims++
		return smdp.Tail{P99Ms: float64(livedHold(hold, ms(0.1))) / float64(time.Millisecond)}
	})
	for _, tc := range []struct {
		hold  float64
		lived float64
		sims  int
	}{
		{0.6, 1.1, 1}, {0.3, 1.1, 1}, {0.15, 1.1, 1}, {1.5, 2.1, 2}, {1.2, 2.1, 2}, {0.9, 1.1, 2}, {2.5, 3.1, 3},
	} {
		if got := tail(ms(tc.hold)); math.Abs(got.P99Ms-tc.lived) > 1e-9 || sims != tc.sims {
			t.Errorf("hold %v ms: the tail of a hold living %v ms after %d simulations, want %v ms after %d", tc.hold, got.P99Ms, sims, tc.lived, tc.sims)
		}
	}
}
