package policy

import (
	"fmt"
	"math"

	"github.com/ratebatch/ratebatch/policy/smdp"
)

// The budget policy's live trim: the plan corrected by what the calls lived.
//
// The constrained optimum is solved on a model (Poisson arrivals at the
// measured rate, the fitted tau(b), the measured costs around a batch).
// Live, the model's ad-hoc latency is close to ad-hoc's, but its latency
// for a waiting rule falls short of the live one, by more the higher the
// load, and that shortfall is the whole slack of a small budget
// (docs/ALGORITHMS.md, "The live trim", and its figures in
// docs/results/latency-cost.md). Whatever the model leaves out, the proxy
// measures its result: the calls' mean latency under the rule in force.
// The trim compares it with the plan's reference (ad-hoc's latency for a
// relative budget, the budget itself for an absolute one) and solves the
// next plans for a tighter budget when the calls lived above the promise,
// and a looser one when they lived below it. The effective slack may rise
// to trimReach times the user's: the promise is what the calls live, and a
// trim capped at the user's budget would only ever step down on noise, and
// settle below the promise.
//
// Ad-hoc's latency is measured, not taken from the model: the model's
// line is learned from the batches the policy itself forms, and near
// saturation its ad-hoc prediction moves by a fifth with it. A tenth of
// the time the policy runs ad-hoc (work-conserving, as the adhoc policy):
// trimAdhoc of every trimPeriod plans (the monitor plans every slice of its
// window, 250 ms by default). The calls they serve give the model's ad-hoc
// prediction a live calibration, live over predicted at the rate of the
// slice, averaged over those slices by their calls. A budget slice's
// reference is its plan's ad-hoc prediction times that calibration: the
// live ad-hoc at the current rate, or the model's where that is lower (see
// calibMax). Only calls that arrived under a rule's kind are
// counted for it: a slice counts the calls answered in it that arrived in
// it or in the slice before (the monitor's Live), and the first slice
// under a new rule is not counted at all, so neither side is measured on
// the other's calls or on a queue the other formed. The price is a tenth of
// the savings; /status shows both means, a live A/B of the promise.
//
// The step is proportional when the calls overspend (the ratio of the
// aimed slack to the lived one, at most /4 per step) and damped when they
// underspend (its square root, at most x1.22), and it waits for
// trimMinCalls calls over at least trimMinWindows slices, so the noise of
// a mean over a few hundred calls (a few per cent) does not steer it. It
// also waits while the lived ratio is within trimSigmas standard errors
// of the aim (the slices' own spread, and the calibration's), up to
// trimMaxWindows slices: on a server whose batches now and then run
// several times slower a measurement of one plan over a few seconds
// spreads widely either side of its mean, and asymmetric steps turn that
// noise into a fall to ad-hoc from a budget the plan alone keeps
// (docs/ALGORITHMS.md, "A server's spread in the plan"). The effective budget is rounded to
// trimStep, so the plan cache keeps a handful of budgets per rate rather
// than one per step.
const (
	trimMinCalls   = 500
	trimMinWindows = 30
	// trimSigmas and trimMaxWindows: a measurement goes on while the
	// lived ratio is within trimSigmas standard errors of the aim, for
	// at most trimMaxWindows slices (a minute at the default window).
	trimSigmas     = 2
	trimMaxWindows = 600
	// trimStep is the grid of the effective budget: 1% of ad-hoc's
	// latency (relative) or of the budget (absolute). Each budget the
	// trim visits is solved once per rate (a solve is CPU beside the
	// request path), so the grid is coarse: a fine one lets a lone
	// closed-loop client, whose calls never wait, have the trim climb
	// through a solve every few seconds at the cost of its latency.
	trimStep = 0.01
	// trimFloor is the least share of an absolute budget the trim plans
	// for.
	trimFloor = 0.25
	// trimReach bounds the effective slack over ad-hoc, relative to the
	// user's.
	trimReach = 1.5
	// trimAim is the share of the user's slack the trim aims the calls
	// at (trimAimAbs the share of an absolute budget): the ratio it
	// steers by is a mean over a few thousand calls, a few per cent off
	// either way, and a promise aimed at exactly its bound is broken half
	// the time. Aiming at 8% for a 10% budget gives up a fifth of the
	// slack.
	trimAim    = 0.8
	trimAimAbs = 0.98
	// trimPeriod plans (slices of the monitor's window, 250 ms by default)
	// end with trimAdhoc of ad-hoc (relative budgets):
	// the first of them and the first budget plan after them settle the
	// queue from the other rule and are not counted.
	trimPeriod = 30
	trimAdhoc  = 3
	// calibHalfLife is how many calls of ad-hoc slices halve an older
	// calibration's weight; calibMinSlices how many counted ad-hoc slices
	// the calibration needs before budget slices are held to it. Near
	// saturation one slice's mean moves by half with the arrivals' chance
	// bursts (its calls queue behind each other), so the calibration is a
	// ratio of sums over many slices, not a mean of ratios. Thirty, two
	// counted a period (fifteen periods, 45 s at the default window): on
	// a server with a heavy tail (a few batches in a hundred several times
	// slower) a few ad-hoc slices usually hold none of the slow batches,
	// so their mean reads low, and the budget's calls, measured over nine
	// times as many slices that do hold them, read well past the budget
	// against it where the plan kept within it.
	calibHalfLife  = 20000
	calibMinSlices = 30
	// calibLeastSlices and calibReadySE: a calibration whose slices agree
	// is enough sooner, after calibLeastSlices counted slices (3 s at
	// the default window: a few seconds of the host as it is) once its
	// standard error is within calibReadySE of a relative budget's slack.
	// Holding, the calibration gains only two slices a trim period, so
	// its error is the mean promise's for a long while: within a third
	// of the slack, the trim's aim (trimAim of it) stays within the budget
	// by one standard error, and the first holds are planned for
	// holdStartShare of the slack. A heavy tail spreads the slices and the
	// calibration waits for calibMinSlices.
	calibLeastSlices = 12
	calibReadySE     = 1.0 / 3
	// calibHalfSlices halves an older calibration's weight every so many
	// counted ad-hoc slices too, whichever comes first: at a low rate
	// 20,000 calls of ad-hoc slices (a fifteenth of the calls) are
	// twenty-five minutes at 200 req/s, so the first seconds of a run (a
	// server warming up, a fit not yet learned) would be held for the
	// whole of it, and a reference read high then lets the budget
	// overspend. 40 slices are 20 periods, a minute at the default window.
	calibHalfSlices = 40
	// calibMax bounds the calibration: the reference is never above the
	// model's ad-hoc. An ad-hoc slice starts on the queue the budget's
	// rule left, and near saturation that queue takes longer to drain
	// than a slice lasts (the relaxation time of a queue grows as
	// 1/(1-sqrt(rho))^2: about 270 ms at rho 0.8 for a 3 ms batch), so
	// live ad-hoc reads slow there, where ad-hoc run alone lives the
	// model's latency (docs/ALGORITHMS.md, "The live trim"). A reference
	// read high would loosen the budget it should tighten; one read low
	// only makes the promise stricter.
	calibMax = 1.0
	// trimMaxFalls bounds the doubling of the hold at ad-hoc after a fall:
	// 2^6 measurements of at least trimMinWindows slices, about three
	// minutes at the default window.
	trimMaxFalls = 6
)

// slice is what the slice of the monitor's window that just ended ran.
type slice int

const (
	sliceOther  slice = iota // a fallback rule, or nothing yet: no promise
	sliceBudget              // the budget's rule: its calls are checked
	sliceAdhoc               // ad-hoc: its calls calibrate the reference
	sliceSettle              // the first under a new rule: not counted
)

// trim is the state of the live correction. Its zero value is a trim that
// has not measured anything: it plans for the user's budget.
type trim struct {
	// eff is the effective budget: its slack over ad-hoc (factor - 1)
	// when relative, its share of the user's budget when absolute; set
	// on the first plan.
	eff   float64
	set   bool
	last  slice // what the slice that just ended ran
	plans int
	calibration
	// Since the last step: the budget slices' calls, their summed
	// latency and the summed reference they were held to (ms), and the
	// slices they came in.
	calls         int
	liveMs, refMs float64
	wins          int
	// The slices' sums of squares and products of their live and
	// reference sums (ms): the lived ratio's standard error.
	liveSq, refSq, crossSq float64
	// For the note: the last step's ratio, calls and live mean, the
	// number of steps.
	lastRatio float64
	lastCalls int
	budgetMs  float64
	steps     int
	// falls counts the trim's falls to ad-hoc (eff 0) since a plan last
	// lived within its aim; hold is how many more measurements it stays
	// there before it tries a plan again (2^falls, 2^trimMaxFalls at most).
	falls, hold int
}

// calibration is what the ad-hoc slices measured of the model's ad-hoc
// latency, the reference a relative budget holds its calls to: whatever
// the promise, a policy switched in carries it over whole (Resume).
type calibration struct {
	// calibLive and calibPred sum the ad-hoc slices' calls' live and
	// predicted latency (ms, their weight halved every calibHalfLife
	// calls); calib is their ratio, over calibSlices slices.
	calibLive, calibPred, calib float64
	calibSlices                 int
	// calibN, calibLL, calibPP and calibLP are the same decayed sums'
	// count of slices and sums of squares and products of each slice's
	// live and predicted (calls times mean): the calibration's standard
	// error (spread).
	calibN, calibLL, calibPP, calibLP float64
	// adhocMs is the last ad-hoc slice's live mean, for the note.
	adhocMs float64
}

// budget is the budget to solve for now.
func (t *trim) budget(user smdp.Budget) smdp.Budget {
	if !t.set {
		t.set = true
		if user.Relative() {
			t.eff = user.Factor - 1
		} else {
			t.eff = 1
		}
	}
	if user.Relative() {
		return smdp.Budget{Factor: 1 + t.eff}
	}
	return smdp.Budget{AbsoluteMs: user.AbsoluteMs * t.eff}
}

// next records what the window about to start runs, and reports whether
// it is to run ad-hoc to measure its live latency (relative budgets only,
// trimAdhoc plans in every trimPeriod).
func (t *trim) next(user smdp.Budget, budgetRule bool) (adhoc bool) {
	t.last = sliceOther
	if !budgetRule {
		return false
	}
	t.plans++
	t.last = sliceBudget
	if !user.Relative() {
		return false
	}
	// The last trimAdhoc plans of each period: the first budget plans
	// come first, so a new policy starts as planned.
	switch pos := t.plans % trimPeriod; {
	case pos == trimPeriod-trimAdhoc+1:
		t.last = sliceSettle
		return true
	case pos > trimPeriod-trimAdhoc+1 || pos == 0:
		t.last = sliceAdhoc
		return true
	case pos == 1:
		t.last = sliceSettle // the first budget plan after them
	}
	return false
}

// observe takes the calls of the window that just ended, with the model's
// ad-hoc latency at that window's measured rate (predicted, ms; 0 when
// the model had none): an ad-hoc window's calibrate the reference, a
// budget window's are held to it, and once enough have been, the
// effective budget steps. It reports whether it stepped.
func (t *trim) observe(user smdp.Budget, live Live, predicted float64) bool {
	ran := t.last
	t.last = sliceOther
	if ran == sliceOther || live.Calls <= 0 || !(live.MeanMs >= 0) || math.IsInf(live.MeanMs, 0) || !(predicted > 0) {
		return false
	}
	n := float64(live.Calls)
	if ran == sliceAdhoc {
		t.calibrate(n, live.MeanMs, predicted)
	}
	// Every call the policy served counts against the promise, the
	// ad-hoc and settling slices' too: the callers live them. Near
	// saturation an ad-hoc slice starts on the queue the budget's rule
	// left and its calls live well over the model's ad-hoc (calibMax);
	// counting only the budget's slices, the trim would read the promise
	// kept where the clients lived past it (docs/ALGORITHMS.md, "The live
	// trim").
	ref := user.AbsoluteMs
	if user.Relative() {
		if !t.calibrated(user) {
			return false // not enough live ad-hoc to hold the calls to yet
		}
		ref = predicted * t.calib
	}
	l, r := n*live.MeanMs, n*ref
	t.liveMs += l
	t.refMs += r
	t.liveSq, t.refSq, t.crossSq = t.liveSq+l*l, t.refSq+r*r, t.crossSq+l*r
	t.calls += live.Calls
	t.wins++
	if t.calls < trimMinCalls || t.wins < trimMinWindows {
		return false
	}
	ratio := t.liveMs / t.refMs
	aim := trimAimAbs
	if user.Relative() {
		aim = 1 + trimAim*(user.Factor-1)
	}
	if se := t.ratioSE(ratio, user.Relative()); math.Abs(ratio-aim) < trimSigmas*se && t.wins < trimMaxWindows {
		return false // within the noise of the aim: measure on
	}
	t.lastRatio, t.lastCalls, t.budgetMs = ratio, t.calls, t.liveMs/float64(t.calls)
	t.liveMs, t.refMs, t.calls, t.wins = 0, 0, 0, 0
	t.liveSq, t.refSq, t.crossSq = 0, 0, 0
	t.steps++
	before := t.eff
	if user.Relative() {
		t.stepRelative(user, ratio, aim)
		return t.eff != before
	}
	// ratio is the live mean over the budget itself.
	g := 1.5
	if ratio > 0 {
		g = math.Sqrt(clamp(trimAimAbs/ratio, 0.25, 1.5))
	}
	t.eff = quantize(clamp(t.eff*g, trimFloor, 1))
	return t.eff != before
}

// calibrate takes an ad-hoc window's n calls, which lived meanMs against
// the model's predicted ad-hoc latency: the calibration of the model's
// ad-hoc to what its calls live, decayed by calls and by windows.
func (c *calibration) calibrate(n, meanMs, predicted float64) {
	keep := math.Exp2(-max(n/calibHalfLife, 1.0/calibHalfSlices))
	l, q := n*meanMs, n*predicted
	c.calibLive = keep*c.calibLive + l
	c.calibPred = keep*c.calibPred + q
	c.calibN = keep*c.calibN + 1
	c.calibLL, c.calibPP, c.calibLP = keep*c.calibLL+l*l, keep*c.calibPP+q*q, keep*c.calibLP+l*q
	c.calib = min(c.calibLive/c.calibPred, calibMax)
	c.calibSlices++
	c.adhocMs = meanMs
}

// calibrated says whether the calibration is enough to hold a relative
// budget's calls to: calibMinSlices slices, or calibLeastSlices whose
// standard error is within calibReadySE of the budget's slack.
func (c *calibration) calibrated(user smdp.Budget) bool {
	if c.calibSlices >= calibMinSlices {
		return true
	}
	return c.calibSlices >= calibLeastSlices && c.calibRelSE() <= calibReadySE*(user.Factor-1)
}

// calibRelSE is the calibration's relative standard error (+Inf before
// two slices).
func (c *calibration) calibRelSE() float64 {
	if c.calibN < 2 || !(c.calibPred > 0) {
		return math.Inf(1)
	}
	return math.Sqrt(c.calibRelVar())
}

// calibRelVar is the calibration's relative variance, from its slices'
// spread (the delta method's variance of a ratio of sums).
func (c *calibration) calibRelVar() float64 {
	return ratioRelVar(c.calibLL, c.calibLP, c.calibPP, c.calibPred, c.calibLive/c.calibPred, c.calibN)
}

// stepRelative steps a relative budget's effective slack by a measurement
// whose calls lived ratio times the calibrated ad-hoc, against aim.
func (t *trim) stepRelative(user smdp.Budget, ratio, aim float64) {
	before := t.eff
	// The slack lived over the slack aimed at.
	want, lived := aim-1, ratio-1 // the slack aimed at, and lived
	g := math.Sqrt(1.5)
	switch {
	case lived > want:
		// Over the aim: the whole step at once. The slack the calls
		// live grows about in proportion to the slack solved for, at
		// a gain the model gets wrong (live, several times what it
		// prices), so the proportional step lands near the aim where
		// the square root takes several steps to get there.
		g = clamp(want/lived, 0.25, 1)
	case lived > 0:
		// Under it: grow by the square root, damped, so that a mean
		// read low by chance does not overspend the next measurement.
		g = math.Sqrt(min(want/lived, 1.5))
	}
	eff := t.eff * g
	switch {
	case g > 1 && eff < trimStep && t.hold > 0:
		t.hold-- // at ad-hoc a while longer
		eff = 0
	case g > 1 && eff < trimStep:
		eff = trimStep // climb back from ad-hoc
	case g < 1 && eff < trimStep:
		// Down to ad-hoc itself: halving the grid's last step
		// rounds back up to it, and a plan that overspends at a 1%
		// slack (its waits cost live several times what the model
		// prices) would keep waiting for good. Ad-hoc runs as it is
		// (atAdhoc): the optimum solved for ad-hoc's own latency
		// still waits where the model finds waiting free. Each fall
		// since a plan last kept its aim doubles the time before the
		// next try, so a load the model cannot price spends most of
		// its time at ad-hoc rather than half of it over the budget.
		eff = 0
		if before > 0 {
			t.falls++
			t.hold = 1 << min(t.falls, trimMaxFalls)
		}
	}
	if lived <= want && t.eff > 0 {
		t.falls = 0 // a plan kept its aim
	}
	t.eff = quantize(clamp(eff, 0, trimReach*(user.Factor-1)))
}

// cut steps the effective budget down when the holds stop on the calls'
// evidence (budgetphase.go), as a measurement over the aim would step:
// by the ratio of the aimed slack to the one lived (at most to a
// quarter), or for an absolute budget by the damped square root; never
// below the grid's last step, and the measurement starts afresh.
func (t *trim) cut(user smdp.Budget) {
	ratio := t.liveMs / t.refMs
	t.restart()
	if !(ratio > 0) {
		return
	}
	if user.Relative() {
		if want, lived := trimAim*(user.Factor-1), ratio-1; lived > want && t.eff > 0 {
			t.eff = max(quantize(t.eff*clamp(want/lived, 0.25, 1)), trimStep)
		}
		return
	}
	if ratio > trimAimAbs {
		t.eff = quantize(clamp(t.eff*math.Sqrt(clamp(trimAimAbs/ratio, 0.25, 1)), trimFloor, 1))
	}
}

// restart drops the measurement under way: the holds' calls are measured
// from the next slice on (the budget's phases run ad-hoc meanwhile, and a
// measurement of ad-hoc's calls alone would step the budget up).
func (t *trim) restart() {
	t.liveMs, t.refMs, t.calls, t.wins = 0, 0, 0, 0
	t.liveSq, t.refSq, t.crossSq = 0, 0, 0
}

// ratioSE is the standard error of the lived ratio (the slices' sums of
// live over reference latency) as their spread from slice to slice shows
// it (the delta method's variance of a ratio of sums), with the
// calibration's relative error added for a relative budget, whose
// reference scales with it.
func (t *trim) ratioSE(ratio float64, relative bool) float64 {
	rel := ratioRelVar(t.liveSq, t.crossSq, t.refSq, t.refMs, ratio, float64(t.wins))
	if relative && t.calibPred > 0 {
		rel += t.calibRelVar()
	}
	return ratio * math.Sqrt(rel)
}

// ratioRelVar is the squared relative standard error of a ratio of sums
// sum(l)/sum(r) = ratio over k terms, from the sums of l^2 (ll), l*r (lr)
// and r^2 (rr) and sum(r): the delta method's variance, sample-corrected,
// over ratio^2. 0 for fewer than two terms.
func ratioRelVar(ll, lr, rr, sumR, ratio, k float64) float64 {
	if k < 2 || !(sumR > 0) || !(ratio > 0) {
		return 0
	}
	v := (ll - 2*ratio*lr + ratio*ratio*rr) / (sumR * sumR) * k / (k - 1)
	return max(v, 0) / (ratio * ratio)
}

// atAdhoc reports whether the trim has stepped a relative budget down to
// ad-hoc itself: the plan is then not applied, ad-hoc is.
func (t *trim) atAdhoc(user smdp.Budget) bool {
	return user.Relative() && t.set && t.eff <= 0
}

// note says what the trim did, for the rule's status.
func (t *trim) note(user smdp.Budget) string {
	if t.steps == 0 {
		return ""
	}
	if !user.Relative() {
		return fmt.Sprintf("; live trim: solved for %.3g ms (calls lived %.3fx the budget, %.3g ms, over the last %d)",
			user.AbsoluteMs*t.eff, t.lastRatio, t.budgetMs, t.lastCalls)
	}
	return fmt.Sprintf("; live trim: solved for %.4fx (calls lived %.3fx live ad-hoc, %.3g ms, over the last %d; ad-hoc's last slice %.3g ms, live ad-hoc x%.3f the model's, reference x%.3f)",
		1+t.eff, t.lastRatio, t.budgetMs, t.lastCalls, t.adhocMs, t.calibLive/t.calibPred, t.calib)
}

func clamp(x, lo, hi float64) float64 { return min(max(x, lo), hi) }

func quantize(x float64) float64 { return math.Round(x/trimStep) * trimStep }
