package policy

import (
	"math"
	"strings"
	"testing"
	"time"
)

// callsAt is a slice's n calls: a share over of them at overMs, the rest
// at restMs.
func callsAt(n int, restMs, overMs, over float64) Live {
	h := new(Hist)
	slow := math.Round(float64(n) * over)
	h.Add(HistBucket(time.Duration(restMs*float64(time.Millisecond))), float64(n)-slow)
	h.Add(HistBucket(time.Duration(overMs*float64(time.Millisecond))), slow)
	return Live{Calls: n, MeanMs: (restMs*(float64(n)-slow) + overMs*slow) / float64(n), Hist: h}
}

// phaseRun drives a learning budget through Plan as the monitor does, one
// slice at a time, with n calls a slice. Ad-hoc's slices live the model's
// ad-hoc (mean, and p99 at the model's); the holds' calls live a share
// over of them at overX times their live bound, the rest at a third of
// it, and a mean meanX times ad-hoc's.
type phaseRun struct {
	t     *testing.T
	p     *Budget
	e     Estimate
	n     int
	over  float64
	overX float64
	meanX float64
	// spread sets ad-hoc's slices' means alternately this share over and
	// under the model's: the calibration's standard error.
	spread float64
	// top is a share of ad-hoc's calls at 1.3 times the model's ad-hoc
	// p99, over the 1.5% at it: a p99 known only within its interval.
	top    float64
	phases []string // the phase of each slice, as /status showed it
	rules  []Rule
}

func newPhaseRun(t *testing.T, o BudgetOptions, rate float64, n int) *phaseRun {
	return &phaseRun{t: t, p: learningBudget(t, o), e: energyEstimate(rate), n: n, overX: 1.5, meanX: 1}
}

// slices plans k slices, each on the calls of the rule the one before
// handed out.
func (r *phaseRun) slices(k int) Rule {
	var rule Rule
	for range k {
		rule = r.p.Plan(r.e)
		ph, _ := r.p.Phase()
		r.phases = append(r.phases, ph)
		r.rules = append(r.rules, rule)
		ref := r.p.tt.ref // the model's ad-hoc p99 at this rate
		adhocMean := 0.0
		if bp, ok := unwrapped(rule).(budgetPlan); ok {
			adhocMean = bp.adhocMs()
		} else if br, ok := r.p.kept.(BudgetRule); ok {
			adhocMean = br.adhocMs()
		}
		switch unwrapped(rule).(type) {
		case BudgetRule, FiniteRule:
			bound := r.p.liveBound(ref)
			if bound <= 0 {
				bound = ref
			}
			l := callsAt(r.n, bound/3, r.overX*bound, r.over)
			l.MeanMs = r.meanX * r.adhocMeanOr(adhocMean)
			r.e.Live = l
		default:
			// Ad-hoc: 1.5% of the calls at the model's ad-hoc p99.
			l := callsAt(r.n, ref/3, ref, 0.015)
			if r.top > 0 {
				slow := float64(r.n) * r.top // a share of a call a slice
				l.Hist.Add(HistBucket(time.Duration(ref/3*float64(time.Millisecond))), -slow)
				l.Hist.Add(HistBucket(time.Duration(1.3*ref*float64(time.Millisecond))), slow)
			}
			l.MeanMs = r.adhocMeanOr(adhocMean) * (1 + r.spread*float64(1-2*(len(r.rules)%2)))
			r.e.Live = l
		}
	}
	return rule
}

func (r *phaseRun) adhocMeanOr(ms float64) float64 {
	if ms > 0 {
		return ms
	}
	return 3
}

// holdsFrom is the first slice that holds in a phaseRun with calls a
// slice (a relative budget): its ad-hoc slices all live the model's mean,
// so the calibration's standard error is 0 and calibLeastSlices counted
// slices calibrate it; learnCalls calls may take longer. The first slice
// settles, and the plan after the last learning slice holds.
func holdsFrom(calls int) int {
	return max((learnCalls+calls-1)/calls, calibLeastSlices) + 2
}

// untilStopped plans up to k slices, each(i) called before slice i (from
// 0), and returns the first slice (from 1) whose phase is adhoc, 0 if
// none.
func (r *phaseRun) untilStopped(k int, each func(i int)) int {
	for i := range k {
		each(i)
		r.slices(1)
		if ph, _ := r.p.Phase(); ph == PhaseAdhoc {
			return i + 1
		}
	}
	return 0
}

// checkStop fails the test unless the holds stopped by slice stopBy (0:
// never) and returns why the phase is what it is.
func (r *phaseRun) checkStop(stoppedAt, stopBy int) string {
	r.t.Helper()
	_, why := r.p.Phase()
	switch {
	case stopBy == 0 && stoppedAt != 0:
		r.t.Errorf("stopped after %d slices: %q", stoppedAt, why)
	case stopBy > 0 && (stoppedAt == 0 || stoppedAt > stopBy):
		r.t.Errorf("stopped after %d slices (0: never), want within %d: %q", stoppedAt, stopBy, why)
	}
	return why
}

// first is the first slice (from 1) shown in the phase, 0 if none.
func (r *phaseRun) first(phase string) int {
	for i, p := range r.phases {
		if p == phase {
			return i + 1
		}
	}
	return 0
}

// A fresh budget sends as ad-hoc does until it has measured learnCalls
// of ad-hoc's calls and, for a relative mean budget, the trim's
// calibration of ad-hoc (calibMinSlices slices, the first not counted);
// then it holds, first at holdStartShare of the user's slack. The phase
// and why are on its status all along.
func TestBudgetLearnsBeforeItHolds(t *testing.T) {
	for _, tc := range []struct {
		name     string
		o        BudgetOptions
		rate     float64
		calls    int     // a slice
		spread   float64 // ad-hoc's slices' means, each way
		holdFrom int     // the first slice that holds
		holdBy   int     // or any up to this one (0: holdFrom)
	}{
		// A calibration without spread is enough after calibLeastSlices
		// counted slices, before the 1,000 calls (25 counted slices of
		// 40): the calls. The first slice settles.
		{"default, 40 calls a slice: the calls", BudgetOptions{}, 900, 40, 0, learnCalls/40 + 2, 0},
		// 1,000 calls of 100 take 10 counted slices: the calibration.
		{"default, 100 calls a slice: the calibration", BudgetOptions{}, 900, 100, 0, calibLeastSlices + 2, 0},
		// Slices 15% either way: the standard error (about 0.15 /
		// sqrt(k-1)) is within a third of the 10% slack after about 21
		// slices.
		{"default, 100 calls a slice, a calibration that spreads", BudgetOptions{}, 900, 100, 0.15, calibLeastSlices + 3, calibMinSlices + 1},
		// 40% either way: never within it, so calibMinSlices.
		{"default, 100 calls a slice, a calibration that spreads widely", BudgetOptions{}, 900, 100, 0.4, calibMinSlices + 2, 0},
		// 1,000 calls of 10 take 100 counted slices.
		{"default, 10 calls a slice: the calls", BudgetOptions{}, 900, 10, 0, learnCalls/10 + 2, 0},
		// An SLO alone has no mean trim to calibrate: the calls.
		{"slo_p99 alone", BudgetOptions{SLOP99: 10 * time.Millisecond}, 150, 40, 0, learnCalls/40 + 2, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newPhaseRun(t, tc.o, tc.rate, tc.calls)
			r.spread = tc.spread
			holdBy := max(tc.holdBy, tc.holdFrom)
			r.slices(holdBy + 5)
			got := r.first(PhaseHolding)
			if got < tc.holdFrom || got > holdBy {
				t.Fatalf("first holding slice %d, want %d-%d (phases %v)", got, tc.holdFrom, holdBy, r.phases)
			}
			for i, rule := range r.rules[:got-1] {
				if _, ok := unwrapped(rule).(Fill); !ok || r.phases[i] != PhaseLearning {
					t.Fatalf("slice %d: %T in phase %q, want ad-hoc while learning", i+1, rule, r.phases[i])
				}
				if d := rule.Decide(Queue{Now: at(1), Rows: 1, OldestArrival: at(0), Instances: 1, MaxBatch: 32}); d.Rows != 1 {
					t.Fatalf("slice %d: a lone row %+v, want sent at once", i+1, d)
				}
			}
			if _, ok := unwrapped(r.rules[got-1]).(BudgetRule); !ok {
				t.Fatalf("first holding slice runs %T, want the plan", r.rules[got-1])
			}
			if tc.spread > 0 && got <= calibMinSlices+1 {
				if se := r.p.trim.calibRelSE(); se > calibReadySE*0.10 {
					t.Errorf("held with the calibration ±%.3g%%, over a third of the slack", 100*se)
				}
			}
			if tc.o.SLOP99 == 0 {
				if s := r.p.tailScaleNow(); s != holdStartShare {
					t.Errorf("tail scale %v after learning, want %v", s, holdStartShare)
				}
				if eff := r.p.trim.eff; math.Abs(eff-holdStartShare*0.10) > 1e-9 {
					t.Errorf("mean slack %v after learning, want %v", eff, holdStartShare*0.10)
				}
			}
		})
	}
	// The status says how far the learning is.
	r := newPhaseRun(t, BudgetOptions{}, 900, 40)
	r.slices(7)
	if ph, why := r.p.Phase(); ph != PhaseLearning || !strings.Contains(why, "200 of 1,000 round trips") || !strings.Contains(why, "5 of 30 slices") {
		t.Errorf("after 7 slices of 40 calls: %s: %q, want learning with 200 of 1,000 round trips and 5 of 30 slices", ph, why)
	}
	if note := r.rules[6].Status().Note; !strings.Contains(note, "learning before holding for budget 1.1x: 200 of 1,000") {
		t.Errorf("the rule's note %q does not say it is learning", note)
	}
	// Once ad-hoc's p99 is measured, with its interval.
	r.slices(13)
	if _, why := r.p.Phase(); !strings.Contains(why, "live ad-hoc p99") || !strings.Contains(why, "95%: ") {
		t.Errorf("after 20 slices: %q, want ad-hoc's p99 against the model's with its interval", why)
	}
}

// Holding, the calls are tested each slice against the live bound: a
// p99 that lives over it (3% of the calls at 1.5 times the bound) stops
// the holds within a few hundred calls, the bound the plans hold is cut, ad-hoc
// runs stopWaitSlices slices, and then the plan is tried again. A p99
// within the bound (0.5% over it) never stops them, and the status says
// it lived within the bound with confidence.
func TestBudgetStopsOnTheEvidence(t *testing.T) {
	learn := holdsFrom(40)
	for _, tc := range []struct {
		name   string
		over   float64
		meanX  float64
		stopBy int // slices of holding; 0: never
		why    string
	}{
		// 3% over: about 600 calls of the holds tell it at 0.001 (and
		// the first slice of holds, and the trim's ad-hoc slices, are
		// not counted).
		{"p99 over its bound", 0.03, 1, 20, "p99 lived over its bound"},
		// 20% over: the first test, at phaseStopMinCalls (the first slice of
		// holds settles, and the test is made at the plan after a slice).
		{"p99 well over", 0.2, 1, 2 + (phaseStopMinCalls+39)/40, "p99 lived over its bound"},
		{"mean over the budget", 0.005, 1.3, 12, "mean lived"},
		{"within both", 0.005, 1.04, 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newPhaseRun(t, BudgetOptions{}, 900, 40)
			r.over, r.meanX = tc.over, tc.meanX
			r.slices(learn - 1)
			scale := 0.0
			stoppedAt := 0
			for i := range 200 {
				r.slices(1)
				if i == 0 {
					scale = r.p.tailScaleNow()
				}
				if ph, _ := r.p.Phase(); ph == PhaseAdhoc {
					stoppedAt = i + 1
					break
				}
			}
			ph, why := r.p.Phase()
			if tc.stopBy == 0 {
				if stoppedAt != 0 {
					t.Fatalf("stopped after %d slices of holds within their bounds: %q", stoppedAt, why)
				}
				if !strings.Contains(why, "under 1% at 95% confidence") {
					t.Errorf("status %q: want the p99 confirmed within the bound", why)
				}
				return
			}
			if stoppedAt == 0 || stoppedAt > tc.stopBy {
				t.Fatalf("stopped after %d slices (0: never), want within %d; %s: %q", stoppedAt, tc.stopBy, ph, why)
			}
			if !strings.HasPrefix(why, "stopped: ") || !strings.Contains(why, tc.why) {
				t.Errorf("status %q, want it to say %q", why, tc.why)
			}
			if tc.meanX == 1 && !(r.p.tailScaleNow() < scale) {
				t.Errorf("tail scale %v after the stop, %v before: want it cut", r.p.tailScaleNow(), scale)
			}
			// Ad-hoc for stopWaitSlices slices, then the plan again; the
			// ad-hoc slices do not grow the mean's slack back meanwhile.
			eff := r.p.trim.eff
			r.over, r.meanX = 0, 1
			r.slices(stopWaitSlices)
			if r.p.trim.eff > eff {
				t.Errorf("the mean's slack grew from %v to %v while stopped", eff, r.p.trim.eff)
			}
			for _, p := range r.phases[len(r.phases)-stopWaitSlices:] {
				if p != PhaseAdhoc {
					t.Fatalf("phases after the stop %v, want adhoc for %d slices", r.phases[len(r.phases)-stopWaitSlices:], stopWaitSlices)
				}
			}
			r.slices(1)
			if ph, why := r.p.Phase(); ph != PhaseHolding {
				t.Errorf("after the wait: %s (%q), want holding again", ph, why)
			}
		})
	}
}

// The phases weigh the holds' calls since the holds started, not since
// the trim last stepped: a host's stall right after a step (a cluster of
// calls over the bound among the first hundred of the trim's new
// measurement) is one cluster among a thousand calls that kept the bound,
// and does not stop the holds; holds that go over their bound for good
// after a thousand calls within it are still stopped within a few slices.
func TestBudgetWeighsAStallAmongTheHolds(t *testing.T) {
	for _, tc := range []struct {
		name   string
		after  []float64 // the share of calls over the bound in each slice after the step
		stopBy int       // slices after the step; 0: never
	}{
		{"a stall's cluster after the step", []float64{0, 0, 0.2, 0, 0, 0, 0, 0}, 0},
		{"over the bound for good", []float64{0.2, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2}, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newPhaseRun(t, BudgetOptions{}, 900, 40)
			r.slices(holdsFrom(40))
			steps := r.p.tt.steps
			for i := 0; r.p.tt.steps == steps; i++ {
				if i == tailTrimMaxSlices {
					t.Fatalf("the tail trim never stepped in %d slices of holds within their bound", i)
				}
				r.slices(1)
			}
			if ph, why := r.p.Phase(); ph != PhaseHolding {
				t.Fatalf("after the trim's step: %s (%q), want holding", ph, why)
			}
			stoppedAt := r.untilStopped(len(tc.after), func(i int) { r.over = tc.after[i] })
			r.checkStop(stoppedAt, tc.stopBy)
		})
	}
}

// The holds' p99 bound is a multiple of ad-hoc's live p99, known from a
// thousand of ad-hoc's calls when the holds first start: calls a little
// over the bound (2.5% of them at 1.12 times it) while ad-hoc's p99 may
// be up to 1.24 times its estimate (the top of its 95% interval) are no
// breach; calls over the bound at the top of the interval (3% at 1.5
// times) still stop the holds, and the status says against what.
func TestBudgetStopWeighsTheBoundsDoubt(t *testing.T) {
	for _, tc := range []struct {
		name   string
		overX  float64
		over   float64
		stopBy int // slices of holding; 0: never in 40
	}{
		{"a little over a bound in doubt", 1.12, 0.025, 0},
		{"over the top of the doubt", 1.5, 0.03, 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newPhaseRun(t, BudgetOptions{}, 900, 40)
			r.top = 0.005
			r.slices(holdsFrom(40))
			if d := r.p.boundDoubt(); !(d > 1.15) {
				t.Fatalf("bound's doubt %.3g after learning, want the top of the interval over 1.15x", d)
			} else {
				t.Logf("the top of ad-hoc's p99's interval after learning: %.3gx its estimate", d)
			}
			r.over, r.overX = tc.over, tc.overX
			stoppedAt := r.untilStopped(40, func(int) {})
			if why := r.checkStop(stoppedAt, tc.stopBy); tc.stopBy > 0 && !strings.Contains(why, "the top of ad-hoc's p99's 95% interval") {
				t.Errorf("status %q, want it to say the count is over the top of the interval", why)
			}
		})
	}
}

// A closed loop's plan is held to its bounds live as an open one is: its
// calls are the holds' (ranTail), measured against the live bound its
// tail model gives, and calls well over it stop the holds.
func TestBudgetStopsAClosedLoop(t *testing.T) {
	r := newPhaseRun(t, BudgetOptions{}, 200, 40)
	r.e.MaxBatch = 16
	r.e.AlphaMs, r.e.Tau0Ms = 0.5, 7.1
	r.e.Callers = Callers{Known: true, ClosedLoop: 15, ThinkMs: 60}
	r.over = 0.2
	r.slices(holdsFrom(40) - 1)
	held := 0
	for i := range 100 {
		rule := r.slices(1)
		if _, ok := unwrapped(rule).(FiniteRule); ok {
			held++
		}
		if ph, why := r.p.Phase(); ph == PhaseAdhoc {
			if held == 0 || !strings.Contains(why, "p99 lived over its bound") {
				t.Fatalf("after %d slices (%d of the closed loop's plan): %q, want a stop on the p99", i+1, held, why)
			}
			return
		}
	}
	ph, why := r.p.Phase()
	t.Fatalf("%d slices of the closed loop's plan with a fifth of its calls over the bound: %s (%q), want stopped", held, ph, why)
}

// Each stop since the holds last kept their bound doubles the wait at
// ad-hoc.
func TestBudgetStopsBackOff(t *testing.T) {
	r := newPhaseRun(t, BudgetOptions{}, 900, 40)
	r.over = 0.2
	r.slices(holdsFrom(40) - 1)
	var waits []int
	for range 400 {
		r.slices(1)
		if r.p.ph.state == stateStopped && (len(waits) == 0 || r.p.ph.wait > waits[len(waits)-1]) {
			waits = append(waits, r.p.ph.wait)
		}
		if len(waits) == 3 {
			break
		}
	}
	want := []int{stopWaitSlices, 2 * stopWaitSlices, 4 * stopWaitSlices}
	if len(waits) != 3 || waits[0] != want[0] || waits[1] != want[1] || waits[2] != want[2] {
		t.Errorf("waits after successive stops %v, want %v", waits, want)
	}
}

// An SLO that ad-hoc itself does not keep with room leaves no hold: the
// budget is work-conserving and says why.
func TestBudgetSLOWithoutRoom(t *testing.T) {
	r := newPhaseRun(t, BudgetOptions{SLOP99: 10 * time.Millisecond}, 150, 40)
	r.slices(learnCalls/40 + 3)
	if ph, _ := r.p.Phase(); ph != PhaseHolding {
		t.Fatalf("phase %s with an SLO far over ad-hoc's p99, want holding", ph)
	}
	tight := newPhaseRun(t, BudgetOptions{SLOP99: time.Duration(0.9 * r.p.tt.ref * float64(time.Millisecond))}, 150, 40)
	tight.slices(learnCalls/40 + 3)
	ph, why := tight.p.Phase()
	if ph != PhaseAdhoc || !strings.Contains(why, "no room to hold") {
		t.Errorf("an SLO under ad-hoc's p99: %s (%q), want adhoc, no room", ph, why)
	}
}

// Resumed by a budget policy with the same promise (a PUT /policy A/B),
// the phase and its evidence carry over; with another promise, what was
// learnt of ad-hoc does.
func TestBudgetResumesThePhase(t *testing.T) {
	r := newPhaseRun(t, BudgetOptions{}, 900, 40)
	r.slices(calibMinSlices + 3)
	same, other := learningBudget(t, BudgetOptions{}), learningBudget(t, BudgetOptions{LatencyBudget: "1.2x"})
	same.Resume(r.p)
	other.Resume(r.p)
	if same.ph.state != stateHolding || same.Plan(r.e).Status().Note == "" {
		t.Errorf("same promise resumed in state %v, want holding", same.ph.state)
	}
	if _, ok := unwrapped(same.Plan(r.e)).(BudgetRule); !ok {
		t.Errorf("same promise resumed: %T, want the plan", same.Plan(r.e))
	}
	if other.ph.learnt != r.p.ph.learnt || other.ph.state != stateLearning {
		t.Errorf("another promise resumed %d calls learnt in state %v, want %d and learning", other.ph.learnt, other.ph.state, r.p.ph.learnt)
	}
}

func TestBinomial(t *testing.T) {
	for _, tc := range []struct {
		n, k int
		p    float64
		want float64 // P(X >= k)
	}{
		{100, 0, 0.01, 1},
		{100, 1, 0.01, 1 - math.Pow(0.99, 100)},
		{1000, 10, 0.01, 0.5427},   // about a half at the mean
		{1000, 20, 0.01, 0.003288}, // the sum of the terms, exactly
		{100000, 1100, 0.01, 0.0009118},
		{10, 11, 0.5, 0},
	} {
		if got := binomAtLeast(tc.n, tc.k, tc.p); math.Abs(got-tc.want) > 0.02*tc.want+1e-9 {
			t.Errorf("P(Bin(%d, %v) >= %d) = %.5g, want %.5g", tc.n, tc.p, tc.k, got, tc.want)
		}
	}
	// Clopper-Pearson: no success in n, the upper limit is 1 - alpha^(1/n)
	// (about 3/n at 95%).
	if got, want := binomUpper(300, 0, 0.05), 1-math.Pow(0.05, 1.0/300); math.Abs(got-want) > 1e-6 {
		t.Errorf("upper limit of 0 in 300: %.6g, want %.6g", got, want)
	}
	// 4 in 1,000: 0.913% (the bisection on the exact sum).
	if got := binomUpper(1000, 4, 0.05); math.Abs(got-0.00913) > 0.0002 {
		t.Errorf("upper limit of 4 in 1000: %.5g, want 0.00913", got)
	}
}

func TestHistMergeScaled(t *testing.T) {
	h := uniformHist()
	for _, f := range []float64{0.5, 2, 3.7} {
		var s Hist
		s.MergeScaled(&h, f)
		if math.Abs(s.Count()-1000) > 1e-9 {
			t.Errorf("scaled by %v: %v calls, want 1000", f, s.Count())
		}
		for _, q := range []float64{0.5, 0.99} {
			if got, want := s.QuantileMs(q), h.QuantileMs(q)/f; math.Abs(got/want-1) > 0.05 {
				t.Errorf("scaled by %v: q%.2f %.4g, want %.4g", f, q, got, want)
			}
		}
	}
}

// Whether to depart from ad-hoc is the plan for the user's bounds to
// decide (minSaving), not the plan at the tail trim's scale: a scale cut
// to where the plan saves under 1% still holds, within the cut bound, and
// does not leave the holds to ad-hoc for good (their calls are what grows
// the scale back).
func TestBudgetSavingIsTheUsersPlans(t *testing.T) {
	// googlenet-p4 with B_max 8 at 450 req/s: the plan saves 1.8% at the
	// user's bounds, 0.9% at a fifth of the p99's slack (the tail budget
	// alone: the capacity floor would leave it no slack at this load).
	e := energyEstimate(450)
	e.MaxBatch = 8
	p := newBudgetWith(t, BudgetOptions{CapacityFloor: "off"})
	full, ok := p.Plan(e).(BudgetRule)
	if !ok || full.saving() < minSaving {
		t.Fatalf("at the user's bounds: %v, want a plan that saves", p.Plan(e).Status().Note)
	}
	p.setTailScale(tailTrimMin)
	r := p.Plan(e)
	cut, ok := r.(BudgetRule)
	if !ok {
		t.Fatalf("scale %v: %T (%s), want the plan within the cut bound", tailTrimMin, r, r.Status().Note)
	}
	t.Logf("saving %.2f%% at the user's bounds, %.2f%% at scale %v", 100*full.saving(), 100*cut.saving(), tailTrimMin)
	if cut.saving() >= minSaving {
		t.Fatalf("the cut plan saves %.2f%%: no test of the verdict", 100*cut.saving())
	}
	if !(cut.tail.boundMs < full.tail.boundMs) || cut.tail.planned.P99Ms > cut.tail.boundMs {
		t.Errorf("scale %v: p99 %.3g ms planned against bound %.3g (the user's %.3g)", tailTrimMin, cut.tail.planned.P99Ms, cut.tail.boundMs, full.tail.boundMs)
	}
}

// The near-overload guard keeps a budget work-conserving for
// guardHoldPlans plans after the load reached the capacity line; while it
// learns, those plans' ad-hoc slices are learning's (learning runs ad-hoc
// anyway), so a guard at the start of a run no longer defers the learning
// by its whole hold: the holds start as soon as the guard lets them.
func TestBudgetLearnsWhileGuarded(t *testing.T) {
	r := newPhaseRun(t, BudgetOptions{}, 900, 40)
	r.e.Arrivals = 3 // a window's count that cannot tell rho 0.3 from the line
	r.slices(1)
	if _, why := r.p.Phase(); !strings.Contains(why, "cannot tell rho") {
		t.Fatalf("a window of 3 arrivals: %q, want the guard", why)
	}
	r.e.Arrivals = int(r.e.RatePerSec)
	r.slices(guardHoldPlans + 5)
	if got, want := r.first(PhaseHolding), guardHoldPlans+2; got != want {
		t.Fatalf("first holding slice %d, want %d, when the guard lets it (phases %v)", got, want, r.phases)
	}
	if ph := r.phases[holdsFrom(40)]; ph != PhaseAdhoc {
		t.Errorf("phase %s once learnt within the guard's hold, want adhoc", ph)
	}
	if n := r.p.ph.learnt; n < learnCalls {
		t.Errorf("%d calls learnt, want the guard's ad-hoc slices counted", n)
	}
	// What the status said while it learned.
	r = newPhaseRun(t, BudgetOptions{}, 900, 40)
	r.e.Arrivals = 3
	r.slices(1)
	r.e.Arrivals = int(r.e.RatePerSec)
	r.slices(5)
	if ph, why := r.p.Phase(); ph != PhaseLearning || !strings.Contains(why, "then the load reached the capacity line") {
		t.Errorf("learning within the guard's hold: %s %q, want learning, then the guard", ph, why)
	}
}

// A budget without any plan of its own is solved at once, whatever the
// solve meter says: the first holds' (half the user's slack), and any a
// trim steps to. The meter spaces re-solves as the rate moves; a long
// solve on a busy host defers the next by 49 times its wall time, and
// made to wait for it the first holds would run ad-hoc ("budget 1.05x
// not solved yet"), most of a short benchmark.
func TestBudgetSolvesANewBudgetAtOnce(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    BudgetOptions
	}{
		{"default", BudgetOptions{}},
		// Without a tail budget the first holds' plan shares the
		// learning's plan cache (no tail scale of its own), where the
		// user's budget, looser, is solved.
		{"no tail budget", BudgetOptions{TailBudget: "off"}},
		{"slo_p99 alone", BudgetOptions{SLOP99: 10 * time.Millisecond}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newPhaseRun(t, tc.o, 900, 40)
			from := holdsFrom(40)
			if tc.o.SLOP99 > 0 {
				from = learnCalls/40 + 2
			}
			r.slices(from - 1)
			if ph, _ := r.p.Phase(); ph != PhaseLearning {
				t.Fatalf("slice %d: %s, want still learning", from-1, ph)
			}
			// From here the meter allows no solve.
			r.p.mu.Lock()
			r.p.meter = solveMeter{share: DefaultSolveShare, next: time.Now().Add(time.Hour)}
			r.p.mu.Unlock()
			r.slices(4)
			got := r.first(PhaseHolding)
			if got != from {
				_, why := r.p.Phase()
				t.Fatalf("first holding slice %d, want %d (phases %v; %q)", got, from, r.phases, why)
			}
			for i := got - 1; i < len(r.rules); i++ {
				if _, ok := unwrapped(r.rules[i]).(BudgetRule); !ok {
					t.Fatalf("slice %d runs %T (%s), want the plan", i+1, r.rules[i], r.rules[i].Status().Note)
				}
			}
		})
	}
}
