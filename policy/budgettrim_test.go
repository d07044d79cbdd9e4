package policy

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/ratebatch/ratebatch/policy/smdp"
)

// The trim steps the effective budget by what the calls lived against the
// reference of the rule in force: tighter above the promise, looser below
// it but never past trimReach times the user's slack, and not at all on too few calls.
func TestTrimSteps(t *testing.T) {
	rel, abs := smdp.Budget{Factor: 1.10}, smdp.Budget{AbsoluteMs: 4}
	const n = trimMinWindows
	tests := []struct {
		name   string
		user   smdp.Budget
		start  float64 // eff before the step
		ref    float64 // the model's ad-hoc at the slice's rate (relative) or any (absolute), ms
		slices int     // of live each
		live   Live
		want   float64 // eff after
		nostep bool
		// uncalibrated: no ad-hoc slice measured yet
		uncalibrated bool
	}{
		// Lived 1.20x for a 1.10x promise aimed at 1.08x: slack 0.10 * 0.08/0.20, the whole step.
		{name: "above the promise", user: rel, start: 0.10, ref: 5, slices: n, live: Live{Calls: 60, MeanMs: 6}, want: quantize(0.10 * trimAim * 0.10 / 0.20)},
		// Lived 1.12x: 0.10 * 0.08/0.12.
		{name: "a little above", user: rel, start: 0.10, ref: 5, slices: n, live: Live{Calls: 60, MeanMs: 5.6}, want: quantize(0.10 * trimAim * 0.10 / 0.12)},
		// Lived 1.06x, under the aim: grown by the square root, 0.05 * sqrt(0.08/0.06).
		{name: "under the aim", user: rel, start: 0.05, ref: 5, slices: n, live: Live{Calls: 60, MeanMs: 5.3}, want: quantize(0.05 * math.Sqrt(trimAim*0.10/0.06))},
		// Lived 1.05x: the slack grows by sqrt(1.5) (sqrt(2) capped), up to trimReach times the user's 0.10.
		{name: "below the promise, capped", user: rel, start: 0.14, ref: 5, slices: n, live: Live{Calls: 60, MeanMs: 5.25}, want: trimReach * 0.10},
		{name: "below the promise", user: rel, start: 0.04, ref: 5, slices: n, live: Live{Calls: 60, MeanMs: 5.25}, want: quantize(0.04 * math.Sqrt(1.5))},
		{name: "far above: at most a quarter", user: rel, start: 0.10, ref: 5, slices: n, live: Live{Calls: 60, MeanMs: 10}, want: quantize(0.10 / 4)},
		// The grid's last step down reaches ad-hoc itself: 0.01 times
		// 0.8 is 0.008, which rounded to the 1% grid was 0.01 again, so a
		// plan that overspent a little at a 1% slack could never stop
		// waiting.
		{name: "last step to ad-hoc", user: rel, start: trimStep, ref: 5, slices: n, live: Live{Calls: 60, MeanMs: 5.5}, want: 0},
		{name: "at ad-hoc, climbs back", user: rel, start: 0, ref: 5, slices: n, live: Live{Calls: 60, MeanMs: 4.9}, want: trimStep},
		{name: "too few calls", user: rel, start: 0.10, ref: 5, slices: 3 * n, live: Live{Calls: trimMinCalls/(3*n) - 1, MeanMs: 9}, want: 0.10, nostep: true},
		{name: "too few slices", user: rel, start: 0.10, ref: 5, slices: n - 1, live: Live{Calls: 5000, MeanMs: 9}, want: 0.10, nostep: true},
		{name: "no model to check by", user: rel, start: 0.10, ref: 0, slices: n, live: Live{Calls: 60, MeanMs: 9}, want: 0.10, nostep: true},
		{name: "no live ad-hoc yet", user: rel, start: 0.10, ref: 5, slices: n, live: Live{Calls: 60, MeanMs: 9}, want: 0.10, nostep: true, uncalibrated: true},
		{name: "slices without calls", user: rel, start: 0.10, ref: 5, slices: 5 * n, live: Live{Calls: 0, MeanMs: 0}, want: 0.10, nostep: true},
		// Absolute: 5 ms lived for 4: share 1 * sqrt(0.98/1.25).
		{name: "absolute above", user: abs, start: 1, ref: 4, slices: n, live: Live{Calls: 60, MeanMs: 5}, want: quantize(math.Sqrt(trimAimAbs / 1.25))},
		{name: "absolute below, capped", user: abs, start: 0.9, ref: 4, slices: n, live: Live{Calls: 60, MeanMs: 2}, want: 1},
		{name: "absolute floor", user: abs, start: 0.3, ref: 4, slices: n, live: Live{Calls: 60, MeanMs: 40}, want: trimFloor},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := trim{eff: tc.start, set: true, calibration: calibration{calib: 1, calibSlices: calibMinSlices}}
			if tc.uncalibrated {
				tr.calib, tr.calibSlices = 0, calibMinSlices-1
			}
			for range tc.slices {
				tr.last = sliceBudget
				tr.observe(tc.user, tc.live, tc.ref)
			}
			if math.Abs(tr.eff-tc.want) > 1e-12 {
				t.Errorf("eff %v, want %v", tr.eff, tc.want)
			}
			if (tr.steps == 0) != tc.nostep {
				t.Errorf("%d steps, want a step: %v", tr.steps, !tc.nostep)
			}
		})
	}
}

// Through Plan: trimAdhoc slices in trimPeriod run ad-hoc and calibrate the
// reference; budget windows whose calls live above the promise against that
// live ad-hoc make the next plans solve for a tighter budget, which the
// rule's optimum meets and its note names; calls that live at the promise
// leave it alone, even when the model's ad-hoc is off by a fifth; NoTrim
// keeps the user's budget whatever the calls lived.
func TestBudgetPlanTrimsByTheLiveLatency(t *testing.T) {
	// lived: every call of a period (budget and ad-hoc slices) over live
	// ad-hoc; adhocOff: live ad-hoc over the model's. The budget slices'
	// calls live what makes the period's mean lived, with the ad-hoc
	// slices' at live ad-hoc.
	const budgetCalls, adhocCalls = 150, 900
	// The calibration's first calibMinSlices ad-hoc slices, then ten
	// periods of trim.
	const periods = calibMinSlices/trimAdhoc + 10
	run := func(noTrim bool, lived, adhocOff float64) (BudgetRule, *Budget, int) {
		p := newBudget(t, "1.10x")
		p.NoTrim = noTrim
		e := energyEstimate(900)
		var last BudgetRule
		adhocWindows := 0
		c, _ := noTrimRule(t, e).Constrained()
		model := c.AdhocLatencyMs
		nb, na := float64((trimPeriod-trimAdhoc)*budgetCalls), float64(trimAdhoc*adhocCalls)
		budgetLived := (lived*(nb+na) - na) / nb
		for range periods * trimPeriod {
			switch r := p.Plan(e).(type) {
			case BudgetRule:
				last = r
				e.Live = Live{Calls: budgetCalls, MeanMs: budgetLived * adhocOff * model}
			case Fill:
				if !strings.Contains(r.Note, "slices of ad-hoc in") {
					// Held at ad-hoc by the trim: its calls are the
					// budget's, as the test has them live.
					e.Live = Live{Calls: budgetCalls, MeanMs: budgetLived * adhocOff * model}
					continue
				}
				adhocWindows++
				e.Live = Live{Calls: adhocCalls, MeanMs: adhocOff * model}
			default:
				t.Fatalf("Plan = %T", r)
			}
		}
		return last, p, adhocWindows
	}
	factor := func(r BudgetRule) float64 { c, _ := r.Constrained(); return c.BudgetMs / c.AdhocLatencyMs }

	r, p, adhoc := run(false, 1.25, 1)
	if got := factor(r); !(got < 1.10-0.01) {
		t.Errorf("calls lived 1.25x: solved for %.4fx, want tighter than 1.10x", got)
	}
	if adhoc != periods*trimAdhoc {
		t.Errorf("%d ad-hoc slices in %d plans, want %d", adhoc, periods*trimPeriod, periods*trimAdhoc)
	}
	if st := r.Status(); !strings.Contains(st.Note, "live trim: solved for") || !strings.Contains(st.Note, "calls lived 1.250x live ad-hoc") {
		t.Errorf("note %q does not say what the trim did", st.Note)
	}
	if p.Solves() < 2 {
		t.Errorf("%d solves: the tighter budget was not solved", p.Solves())
	}
	// Live ad-hoc 20% below the model, the calls at the aim (1.08x) of
	// it: kept.
	r, _, _ = run(false, 1+trimAim*0.10, 0.8)
	if got := factor(r); math.Abs(got-1.10) > 1e-6 {
		t.Errorf("calls lived 1.08x of live ad-hoc, the model's ad-hoc 25%% high: solved for %.4fx, want 1.10x", got)
	}
	// Live ad-hoc 20% above the model (an ad-hoc slice on the budget's
	// queue near saturation), the calls at 1.10x of it: held to the
	// model's ad-hoc instead, 1.32x, and tightened.
	r, _, _ = run(false, 1.10, 1.2)
	if got := factor(r); !(got < 1.10-0.01) {
		t.Errorf("calls lived 1.32x of the model's ad-hoc: solved for %.4fx, want tighter than 1.10x", got)
	}
	r, _, adhoc = run(true, 1.25, 1)
	if got := factor(r); math.Abs(got-1.10) > 1e-6 || adhoc != 0 {
		t.Errorf("NoTrim: solved for %.4fx with %d ad-hoc windows, want 1.10x and none", got, adhoc)
	}
}

// An ad-hoc window calibrates the model's ad-hoc latency by its calls;
// budget windows are then held to the calibrated reference; a window the
// trim did not plan (a fallback) is not counted.
func TestTrimCalibratesByAdhocWindows(t *testing.T) {
	rel := smdp.Budget{Factor: 1.10}
	tr := trim{}
	tr.budget(rel)
	// Live ad-hoc 1.2x the model: the reference stays the model's.
	for i := range calibMinSlices {
		tr.last = sliceAdhoc
		tr.observe(rel, Live{Calls: 1000, MeanMs: 6}, 5)
		if i == 0 && tr.calib != calibMax {
			t.Fatalf("calibration %v from a live ad-hoc above the model, want %v", tr.calib, calibMax)
		}
	}
	// Live ad-hoc 0.8x the model, as a ratio of sums: the slices of
	// 1000 calls at 5 ms and 2000 at 6 ms, lived at 0.8x, outweigh the
	// first ones by the half-life.
	tr.calibLive, tr.calibPred = 0, 0
	for i := range calibMinSlices {
		tr.last = sliceAdhoc
		pred := 5.0 + float64(i%2)
		tr.observe(rel, Live{Calls: 1000 * (1 + i%2), MeanMs: 0.8 * pred}, pred)
	}
	if math.Abs(tr.calib-0.8) > 1e-12 {
		t.Fatalf("calibration %v, want 0.8", tr.calib)
	}
	// The ad-hoc slices' calls counted against the promise too (the
	// next test); start the promise's sums afresh.
	if tr.calls == 0 {
		t.Fatal("the ad-hoc slices' calls were not counted against the promise")
	}
	tr.liveMs, tr.refMs, tr.calls, tr.wins = 0, 0, 0, 0
	tr.last = sliceOther
	if tr.observe(rel, Live{Calls: 5000, MeanMs: 50}, 5); tr.calls != 0 {
		t.Fatal("a fallback window's calls were counted")
	}
	// 1.08 x 0.8 x 5 ms: at the aim, within any noise of it, so the
	// measurement goes on to its longest and steps once, keeping 0.10.
	for i := range trimMaxWindows {
		tr.last = sliceBudget
		tr.observe(rel, Live{Calls: 50, MeanMs: 4.32}, 5)
		if i == trimMinWindows && tr.steps != 0 {
			t.Fatalf("stepped after %d slices at the aim", i)
		}
	}
	if tr.steps != 1 || math.Abs(tr.lastRatio-1.08) > 1e-9 || math.Abs(tr.eff-0.10) > 1e-12 {
		t.Errorf("steps %d, ratio %v, eff %v: want one step at 1.08 keeping 0.10", tr.steps, tr.lastRatio, tr.eff)
	}
}

// At a low rate the calibration forgets a run's first seconds within a
// minute of ad-hoc slices, not after 20,000 of their calls: on PyTriton
// at 200 req/s (20 calls a slice) the first slices lived 1.5x the model
// while the server warmed up and the rest 0.7x, and a memory counted in
// calls alone kept the reference 10% above the ad-hoc the host lived.
func TestTrimCalibrationForgetsTheStart(t *testing.T) {
	rel := smdp.Budget{Factor: 1.10}
	tr := trim{}
	tr.budget(rel)
	for i := range 160 {
		lived := 0.7
		if i < 10 {
			lived = 1.5
		}
		tr.last = sliceAdhoc
		tr.observe(rel, Live{Calls: 20, MeanMs: lived * 10}, 10)
	}
	if math.Abs(tr.calib-0.7) > 0.02 {
		t.Errorf("calibration %.4f after 150 slices at 0.7x, want 0.7 within 0.02", tr.calib)
	}
}

// Every call of the trim's period counts against the promise: near
// saturation the ad-hoc slices, starting on the queue the budget's rule
// left, live 1.4x ad-hoc, and budget slices at the aim do not make up for
// them. Counting only the budget's slices, the trim kept a plan whose
// clients lived 1.13-1.17x ad-hoc's mean at rho 0.8.
func TestTrimCountsEveryCall(t *testing.T) {
	rel := smdp.Budget{Factor: 1.10}
	tr := trim{eff: 0.10, set: true, calibration: calibration{calib: 1, calibSlices: calibMinSlices}}
	// The ad-hoc slices make the slices' ratios spread: the measurement
	// takes two periods to tell 1.112x from the aim (budgettrim.go,
	// trimSigmas).
	for i := range 2 * trimPeriod {
		tr.last = sliceBudget
		live := Live{Calls: 100, MeanMs: 5 * (1 + trimAim*0.10)} // at the aim
		if i%trimPeriod >= trimPeriod-trimAdhoc {
			tr.last = sliceAdhoc
			live = Live{Calls: 100, MeanMs: 5 * 1.4}
		}
		if i%trimPeriod == trimPeriod-trimAdhoc {
			tr.last = sliceSettle
		}
		tr.observe(rel, live, 5)
	}
	// 27 slices at 1.08x and 3 at 1.4x a period: 1.112x, over the aim;
	// the step comes once the measurement tells it from the aim, within
	// the second period.
	if tr.steps != 1 || !(tr.lastRatio > 1.09 && tr.lastRatio < 1.12) || !(tr.eff < 0.10) || tr.lastCalls <= 100*trimPeriod {
		t.Errorf("steps %d, ratio %v over %d calls, eff %v: want one step down at about 1.11 after more than a period", tr.steps, tr.lastRatio, tr.lastCalls, tr.eff)
	}
}

// noTrimRule is the budget 1.10x rule for e without the trim.
func noTrimRule(t *testing.T, e Estimate) BudgetRule {
	t.Helper()
	p := newBudget(t, "1.10x")
	p.NoTrim = true
	return p.Plan(e).(BudgetRule)
}

// A budget policy that replaces an earlier one takes over its calibration,
// and the whole trim (effective budget, period, unfinished measurement)
// when the user's budget is the same.
func TestBudgetResumesTheTrim(t *testing.T) {
	old := newBudget(t, "1.10x")
	old.trim = trim{eff: 0.05, set: true, calibration: calibration{calibLive: 12, calibPred: 10, calib: 1.2, calibSlices: 9},
		plans: 17, calls: 300, liveMs: 3000, refMs: 2900, wins: 12, last: sliceBudget}
	same, other := newBudget(t, "1.10x"), newBudget(t, "1.25x")
	same.Resume(old)
	other.Resume(old)
	if same.trim.calib != 1.2 || same.trim.calibSlices != 9 || same.trim.eff != 0.05 {
		t.Errorf("same budget: trim %+v, want the earlier calibration and eff 0.05", same.trim)
	}
	if same.trim.plans != 17 || same.trim.calls != 300 || same.trim.wins != 12 || same.trim.last != sliceOther {
		t.Errorf("same budget: trim %+v, want its period and measurement carried, the last slice not counted", same.trim)
	}
	if other.trim.calib != 1.2 || other.trim.set {
		t.Errorf("other budget: trim %+v, want the calibration only", other.trim)
	}
	fresh := newBudget(t, "1.10x")
	fresh.Resume(Adhoc{})
	if fresh.trim.calibSlices != 0 {
		t.Error("resumed from a policy of another kind")
	}
}

// A plan that overspends at the last 1% step falls to ad-hoc, and each
// fall doubles the measurements ad-hoc is held before the next try; a
// plan that keeps its aim clears the count.
func TestTrimHoldsAtAdhocAfterAFall(t *testing.T) {
	rel := smdp.Budget{Factor: 1.10}
	tr := trim{eff: trimStep, set: true, calibration: calibration{calib: 1, calibSlices: calibMinSlices}}
	measure := func(lived float64) {
		for range trimMinWindows {
			tr.last = sliceBudget
			tr.observe(rel, Live{Calls: trimMinCalls/trimMinWindows + 1, MeanMs: 5 * lived}, 5)
		}
	}
	for fall := 1; fall <= 3; fall++ {
		measure(1.10) // over the aim (1.08x) at a 1% slack
		if tr.eff != 0 || !tr.atAdhoc(rel) {
			t.Fatalf("fall %d: eff %v, want ad-hoc", fall, tr.eff)
		}
		for i := range 1 << fall {
			measure(1.0) // ad-hoc lives ad-hoc
			if tr.eff != 0 {
				t.Fatalf("fall %d: climbed back after %d measurements, want %d", fall, i+1, 1<<fall+1)
			}
		}
		measure(1.0)
		if tr.eff != trimStep {
			t.Fatalf("fall %d: eff %v after the hold, want a try at %v", fall, tr.eff, trimStep)
		}
	}
	measure(1.02) // within the aim: the count clears
	if tr.falls != 0 {
		t.Errorf("a plan within its aim left %d falls counted", tr.falls)
	}
	if (&trim{eff: 0, set: true}).atAdhoc(smdp.Budget{AbsoluteMs: 4}) {
		t.Error("an absolute budget is never held at ad-hoc")
	}
}

// A server whose batches now and then run several times slower makes the
// slices' means spread: a tenth of the slices (at random) at 1.8x and the
// rest at 1x is 1.08x, the aim, and the trim measures on rather than step on a
// chance run of slow slices; the same noise around 1.30x is told from
// the aim well before the longest measurement.
func TestTrimWaitsOutTheNoise(t *testing.T) {
	rel := smdp.Budget{Factor: 1.10}
	for _, tc := range []struct {
		name     string
		base     float64 // the fast slices' ratio
		maxSteps int
		wantDown bool
	}{
		{name: "at the aim", base: 1.0, maxSteps: 1},
		{name: "over it", base: 1.22, maxSteps: trimMaxWindows / trimMinWindows, wantDown: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := trim{eff: 0.10, set: true, calibration: calibration{calib: 1, calibSlices: calibMinSlices}}
			rng := rand.New(rand.NewPCG(3, 5))
			firstStep := 0
			for i := range trimMaxWindows {
				ratio := tc.base
				if rng.IntN(10) == 0 {
					ratio = tc.base + 0.8
				}
				tr.last = sliceBudget
				if tr.observe(rel, Live{Calls: 80, MeanMs: 5 * ratio}, 5) || (firstStep == 0 && tr.steps > 0) {
					firstStep = i + 1
				}
			}
			if tr.steps > tc.maxSteps {
				t.Errorf("%d steps in %d slices, want at most %d", tr.steps, trimMaxWindows, tc.maxSteps)
			}
			if tc.wantDown && !(tr.eff < 0.10 && firstStep > 0 && firstStep < trimMaxWindows/4) {
				t.Errorf("eff %v, first step after %d slices: want a step down within %d", tr.eff, firstStep, trimMaxWindows/4)
			}
			if !tc.wantDown && tr.eff < 0.09 {
				t.Errorf("eff %v after %d steps on noise around the aim", tr.eff, tr.steps)
			}
		})
	}
}
