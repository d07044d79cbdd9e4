package policy

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/ratebatch/ratebatch/policy/smdp"
)

// DefaultTailBudget is the budget policy's bound on the 99th percentile
// of latency when none is set: 20% above ad-hoc's p99 on the same model.
const DefaultTailBudget = 1.20

// ParseTailBudget reads a tail budget as users write it: a factor >= 1 of
// ad-hoc's p99 ("1.20x"), or "off" (no bound on the tail).
func ParseTailBudget(s string) (float64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	if t == "off" || t == "none" {
		return 0, nil
	}
	f, ok := strings.CutSuffix(t, "x")
	v, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
	if !ok || err != nil || !(v >= 1) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("tail budget %q: want a factor >= 1 of ad-hoc's p99 followed by x (1.20x), or off", s)
	}
	return v, nil
}

// DefaultCapacityFloor is the share of ad-hoc's capacity under an absolute
// p99 bound the budget keeps when capacity_floor is not set.
const DefaultCapacityFloor = 0.97

// ParseCapacityFloor reads a capacity floor as users write it: a share in
// (0, 1] of ad-hoc's capacity ("0.97"), or "off" (0: the tail budget
// alone).
func ParseCapacityFloor(s string) (float64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	if t == "off" || t == "none" {
		return 0, nil
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || !(v > 0 && v <= 1) {
		return 0, fmt.Errorf("capacity floor %q: want a share of ad-hoc's capacity in (0, 1] (0.97), or off", s)
	}
	return v, nil
}

// tailRequests is the length of each simulation of the plan's tail
// search (smdp.TailLatency): a candidate's p99 and energy are compared on
// the same arrivals (one seed), so their order does not move with the
// sampling noise, and a search of a few dozen candidates stays within a
// few hundred milliseconds of a core, off the request path and cached.
const tailRequests = 10000

// tailHoldSteps is how many times the search halves a candidate's hold
// bound: the bound is then within 1/64 of the p99 bound.
const tailHoldSteps = 6

// tailSeed fixes the arrivals of the tail search: a plan computed twice is
// the same plan.
const tailSeed = 0x5eed

// tailPlan is what the tail model predicts for a planned rule, beside
// ad-hoc's on the same model.
type tailPlan struct {
	planned, adhoc smdp.Tail
	// boundMs is the p99 the plan was held to (0: none).
	boundMs float64
	// factor is the relative tail bound at this rate, a factor of
	// ad-hoc's p99: the tail budget, or less where the capacity floor
	// caps its slack (capacitySlack); 0 without a tail budget. capped
	// says the floor set it.
	factor float64
	capped bool
	// held says the p99 bound chose the plan's limits and hold bound
	// (withTail, solveSLO) or cut a closed loop's holds (finiteTail).
	held bool
}

// p99Bound is the p99 a plan must keep on the model whose ad-hoc p99 is
// adhocP99Ms: the tail budget's factor of it, the SLO, the tighter of the
// two, or none (0); the live trim scales the tail budget's slack over
// ad-hoc and the SLO (tailTrim). An SLO is absolute, so the plan keeps
// under it less what the model is measured to fall short of ad-hoc's live
// p99 (tailGapMs): a relative bound compares with ad-hoc's p99 on the
// same model, short by as much.
func (p *Budget) p99Bound(adhocP99Ms, factor float64) float64 {
	bound := 0.0
	s := p.tailScaleNow()
	if factor > 0 {
		bound = adhocP99Ms * (1 + (factor-1)*s)
	}
	if p.SLOP99 > 0 {
		slo := float64(p.SLOP99)/float64(time.Millisecond)*s - p.tailGapMs(adhocP99Ms)
		// A bound at or under ad-hoc's p99 leaves no hold; 0 would
		// read as no bound.
		slo = max(slo, 1e-3)
		if bound == 0 || slo < bound {
			bound = slo
		}
	}
	return bound
}

// gapStep is the grid of the model's measured shortfall in the tail, a
// share of its ad-hoc p99 (tailGapMs): each step is a plan cache of its
// own.
const gapStep = 0.05

// tailGapMs is how far live ad-hoc's p99 lies above the model's whose
// ad-hoc p99 is adhocP99Ms, as the ad-hoc slices measured it (the
// calibration, on gapStep's grid at the last plan): the host's scheduling,
// the load generator beside the proxy, the exchange inside the proxy the
// model leaves out. 0 before it is measured, or when the model is not
// short.
func (p *Budget) tailGapMs(adhocP99Ms float64) float64 {
	return float64(p.gapSteps) * gapStep * adhocP99Ms
}

// lateStep is the grid of the timers' measured lateness the tail search
// counts (livedHold), a plan cache per step.
const lateStep = 100 * time.Microsecond

// setTailKeys reads the model's tail shortfall and the timers' lateness
// from what was measured, on their grids, and points the plan cache at
// their plans.
func (p *Budget) setTailKeys(e Estimate) {
	gap := 0
	if c := p.tailCalib(); p.SLOP99 > 0 && c > 1 {
		gap = int(math.Round((c - 1) / gapStep))
	}
	late := int(holdLate / lateStep)
	if e.TimerLate.Waits >= timerLateMinWaits {
		late = int(math.Round(e.TimerLate.Ms * float64(time.Millisecond) / float64(lateStep)))
	}
	if gap != p.gapSteps || late != p.lateSteps || p.caches == nil {
		p.gapSteps, p.lateSteps = gap, late
		p.useTailKey()
	}
}

// timerLateMinWaits is how many timed waits the timers' measured
// lateness needs before the tail search counts it in place of holdLate.
const timerLateMinWaits = 50

// tailOf is the rule's TailRule as smdp.TailLatency simulates it, with
// its hold bound as the live proxy keeps it (livedHold, late the timers'
// lateness past it).
func tailOf(first, second int, mix float64, hold, late time.Duration) smdp.TailRule {
	return smdp.TailRule{First: first, Second: second, Mix: mix, HoldMs: float64(livedHold(hold, late)) / float64(time.Millisecond)}
}

// livedHold is how long a hold bound lasts live: the dispatcher's wait
// timers wake through Go's network poller, whose wait is a whole number of
// milliseconds from the moment it is set (docs/ALGORITHMS.md, "Costs
// outside tau(b)"), so a hold of 150 µs or 600 µs lasts about a
// millisecond and one of 2.3 ms about three on an idle process, and late
// more past that: the host's scheduling, as the monitor measures it at
// the proxy's own timed waits (Estimate.TimerLate; holdLate until it
// has). Where a wait mostly ends at an arrival this does not matter; a
// hold bound chosen for the tail ends at its timer, and a plan that
// counted it exact would promise a p99 the calls do not live. A busy
// process checks its timers more often: its measured lateness may be
// negative, and the hold is never counted shorter than set.
func livedHold(hold, late time.Duration) time.Duration {
	if hold <= 0 {
		return 0
	}
	ms := time.Millisecond
	return max((hold+ms-1)/ms*ms+late, hold)
}

// byLivedHold returns sim, simulating each hold bound as it lives
// (livedHold, late the timers' lateness) once: the halving searches of a
// hold bound try several under a millisecond, which all live about one,
// and the simulation depends on the lived hold alone.
func byLivedHold(late time.Duration, sim func(hold time.Duration) smdp.Tail) func(hold time.Duration) smdp.Tail {
	type simulated struct {
		lived time.Duration
		tail  smdp.Tail
	}
	var done []simulated
	return func(hold time.Duration) smdp.Tail {
		lived := livedHold(hold, late)
		for _, d := range done {
			if d.lived == lived {
				return d.tail
			}
		}
		t := sim(hold)
		done = append(done, simulated{lived, t})
		return t
	}
}

// holdLate is how late past the whole milliseconds a poller's wait ends
// on an idle host, counted until the proxy's own are measured.
const holdLate = 100 * time.Microsecond

// withTail holds a mean-constrained plan to the p99 bound as well
// (docs/ALGORITHMS.md, "The tail"). The tail model predicts the plan's
// latency distribution and ad-hoc's; when the plan's p99 is within the
// bound it stands. Otherwise the most requests per joule within both
// bounds is searched among the plan's own limits and every pure control
// limit, each with the longest hold bound that keeps the p99 and the mean
// (meanMs; +Inf without a mean budget) within their bounds: a hold bound
// cuts off the waits that make the tail. Ad-hoc (a hold of 0) is always
// within both.
//
// It stays one function: one search over the candidate limits, each priced
// by the same tail model.
func (p *Budget) withTail(r BudgetRule, m smdp.Model, meanMs float64) BudgetRule {
	o := smdp.TailOptions{Requests: tailRequests, Seed: tailSeed}
	late := time.Duration(p.lateSteps) * lateStep
	adhoc := smdp.TailLatency(m, smdp.TailRule{First: 1, Second: 1}, o)
	factor := p.tailFactor(m, adhoc, o)
	bound := p.p99Bound(adhoc.P99Ms, factor)
	r.tail = &tailPlan{adhoc: adhoc, boundMs: bound, factor: factor, capped: factor < p.Tail}
	if bound <= 0 {
		r.tail.planned = smdp.TailLatency(m, tailOf(r.first.Limit, r.second.Limit, r.mix, r.first.MaxWait, late), o)
		return r
	}
	if r.first.Limit > 1 || r.second.Limit > 1 {
		// Its mean is the chain's, within the budget by construction:
		// only the tail is checked (the simulation's mean is a sample).
		planned := smdp.TailLatency(m, tailOf(r.first.Limit, r.second.Limit, r.mix, r.first.MaxWait, late), o)
		if planned.P99Ms <= bound {
			r.tail.planned = planned
			return r
		}
	}
	type candidate struct {
		first, second int
		mix           float64
		hold          time.Duration
		tail          smdp.Tail
	}
	best := candidate{first: 1, second: 1, tail: adhoc}
	try := func(first, second int, mix float64) {
		hi := min(poissonWait(max(first, second), m.LambdaPerMs), time.Duration(bound*float64(time.Millisecond)))
		lo := time.Duration(0)
		var at smdp.Tail
		found := false
		tail := byLivedHold(late, func(hold time.Duration) smdp.Tail {
			return smdp.TailLatency(m, tailOf(first, second, mix, hold, late), o)
		})
		// The longest hold saves the most; a candidate that does not beat
		// the best so far even there is not searched.
		if t := tail(hi); !(t.EnergyMJ < best.tail.EnergyMJ) {
			return
		} else if t.P99Ms <= bound && t.MeanMs <= meanMs {
			lo, at, found = hi, t, true
		}
		for range tailHoldSteps {
			if found && lo == hi {
				break
			}
			mid := (lo + hi) / 2
			t := tail(mid)
			if t.P99Ms <= bound && t.MeanMs <= meanMs {
				lo, at, found = mid, t, true
			} else {
				hi = mid
			}
		}
		if found && at.EnergyMJ < best.tail.EnergyMJ {
			best = candidate{first: first, second: second, mix: mix, hold: lo, tail: at}
		}
	}
	if r.mix > 0 && r.first.Limit != r.second.Limit {
		try(r.first.Limit, r.second.Limit, r.mix)
	}
	for _, l := range tailLimits(m.MaxBatch) {
		try(l, l, 0)
	}
	r.tail.planned = best.tail
	r.first.Limit, r.second.Limit, r.mix = best.first, best.second, best.mix
	r.first.MaxWait, r.second.MaxWait = best.hold, best.hold
	r.tail.held = true
	return r
}

// tailFactor is the relative tail bound at m's rate: the tail budget,
// its slack capped by the capacity floor (capacitySlack) but never under
// floorResolution; 0 without a tail budget.
func (p *Budget) tailFactor(m smdp.Model, adhoc smdp.Tail, o smdp.TailOptions) float64 {
	if p.Tail <= 0 {
		return 0
	}
	if p.CapacityFloor <= 0 || !(adhoc.P99Ms > 0) {
		return p.Tail
	}
	return 1 + min(p.Tail-1, max(capacitySlack(m, adhoc, p.CapacityFloor, o), floorResolution))
}

// floorResolution is the least slack the capacity floor leaves the tail
// budget, a share of ad-hoc's p99: about two standard errors of a p99
// measured over one step of a capacity search (ten seconds, some thousands
// of calls). A bound that lies within it of ad-hoc's p99 where ad-hoc's p99
// is flat with the load is within a search's noise of ad-hoc's own p99:
// ad-hoc's capacity under it is chance, and the floor cannot keep a share
// of a capacity no search measures. Below it the live holds' p99, measured
// against ad-hoc's over a few thousand calls of each, could not be told
// from ad-hoc's, and the phases would stop holds that kept their bound.
const floorResolution = 0.05

// capacitySlack is how far, as a share of ad-hoc's p99 at m's rate, a
// plan's p99 may lie above it while the plans keep the share floor of
// ad-hoc's capacity under any absolute p99 bound: ad-hoc's p99 at the
// rate lambda/floor, over its p99 at lambda, less one (the tail model's
// simulation of both, on the same arrivals scaled).
//
// Capacity under a bound B is the highest rate whose p99 stays under B
// (MLPerf's server scenario; scripts/capacity-p99.sh). If at every rate
// lambda the plan's p99 is at most ad-hoc's at lambda/floor, then
// wherever ad-hoc keeps B at lambda/floor the plan keeps it at lambda:
// its capacity is at least floor times ad-hoc's, whatever B is (above
// floorResolution over ad-hoc's p99 where that is flat). A
// relative slack alone does not give that: where ad-hoc's p99 is flat
// with the load (light load, where a host's stalls set the p99), a bound
// that ad-hoc crosses only a long way up in rate is crossed by the plan's
// 1.20x at a fraction of it. Where ad-hoc's p99 climbs with the load the
// cap leaves the tail budget's slack, and near overload nearOverload
// keeps the plan from holding anyway.
func capacitySlack(m smdp.Model, adhoc smdp.Tail, floor float64, o smdp.TailOptions) float64 {
	up := m
	up.LambdaPerMs /= floor
	if up.Rho() >= 1 {
		return math.Inf(1)
	}
	t := smdp.TailLatency(up, smdp.TailRule{First: 1, Second: 1}, o)
	return max(t.P99Ms/adhoc.P99Ms-1, 0)
}

// tailLimits are the pure control limits the tail search tries: every
// limit up to 4, then steps of about a half, and B_max.
func tailLimits(maxBatch int) []int {
	var out []int
	for l := 2; l < maxBatch; l = max(l+1, l*3/2) {
		out = append(out, l)
	}
	if maxBatch >= 2 {
		out = append(out, maxBatch)
	}
	return out
}

// tailNote says what the tail model predicts, for the rule's status.
func (t *tailPlan) note() string {
	if t == nil {
		return ""
	}
	s := fmt.Sprintf("; tail model: p99 %.4g ms, mean %.4g ms (ad-hoc p99 %.4g, mean %.4g)", t.planned.P99Ms, t.planned.MeanMs, t.adhoc.P99Ms, t.adhoc.MeanMs)
	if t.boundMs > 0 {
		s += fmt.Sprintf(", p99 bound %.4g ms", t.boundMs)
	}
	if t.capped {
		s += fmt.Sprintf(" (%.3gx ad-hoc's: the tail budget's slack capped by the capacity floor)", t.factor)
	}
	return s
}

// saving is 1 - energy per request / ad-hoc's, from the tail model's
// simulation of both.
func (t *tailPlan) saving() float64 {
	if !(t.adhoc.EnergyMJ > 0) {
		return 0
	}
	return 1 - t.planned.EnergyMJ/t.adhoc.EnergyMJ
}

// heldNote says how the p99 bound changed the mean's plan.
func (t *tailPlan) heldNote(r BudgetRule) string {
	return fmt.Sprintf("; held to the p99 bound: control limits %d/%d mixed %.3f, hold bound %v, %.2f%% of ad-hoc's energy per request saved",
		r.first.Limit, r.second.Limit, r.mix, r.first.MaxWait.Round(10*time.Microsecond), 100*t.saving())
}

// waitFor is the hold bound of a mean-constrained plan: MaxWait when set,
// else the time its limit's arrivals take (poissonWait).
func (p *Budget) waitFor(c smdp.Constrained, m smdp.Model) time.Duration {
	if p.MaxWait > 0 {
		return p.MaxWait
	}
	return poissonWait(max(c.First.Limit, c.Second.Limit), m.LambdaPerMs)
}

// solveSLO is the plan of a p99 bound without a mean budget: the most
// requests per joule whose predicted p99 stays under the SLO.
func (p *Budget) solveSLO(m smdp.Model, busyTime bool) Rule {
	r := p.withTail(BudgetRule{
		first:  Limit{Policy: NameBudget, Limit: 1},
		second: Limit{Policy: NameBudget, Limit: 1},
		seed:   p.Seed, model: m,
	}, m, math.Inf(1))
	r.tail.held = true
	r.constrained = smdp.Constrained{AdhocLatencyMs: r.tail.adhoc.MeanMs, Mix: r.mix}
	r.constrained.LatencyMs, r.constrained.MeanBatch = r.tail.planned.MeanMs, r.tail.planned.MeanBatch
	r.constrained.First.Limit, r.constrained.Second.Limit = r.first.Limit, r.second.Limit
	note := fmt.Sprintf("p99 at most %v at %.4g req/s (rho %.3f): control limits %d/%d mixed %.3f, hold bound %v, %.2f%% of ad-hoc's energy per request saved",
		p.SLOP99, 1000*m.LambdaPerMs, m.Rho(), r.first.Limit, r.second.Limit, r.mix, r.first.MaxWait.Round(10*time.Microsecond), 100*r.tail.saving())
	note += r.tail.note() + spreadNote(m)
	if g := p.tailGapMs(r.tail.adhoc.P99Ms); g > 0 {
		note += fmt.Sprintf("; %.3g ms of it kept for the model's measured shortfall at ad-hoc's p99", g)
	}
	note += "; slo_p99 bounds the p99 inside the proxy (arrival to answer written): a client's adds its own exchange"
	if busyTime {
		note += "; no energy meter: energy taken proportional to GPU busy time"
	}
	r.first.Note, r.second.Note = note, note
	return r
}

// setTail reads the tail budget and the SLO from the options: the tail
// budget defaults to DefaultTailBudget unless an SLO is set, and an SLO
// without a latency budget bounds the p99 alone.
func (p *Budget) setTail(o BudgetOptions) error {
	tail, err := o.tailBudget()
	if err != nil {
		return err
	}
	p.SLOP99 = o.SLOP99
	if p.CapacityFloor, err = o.capacityFloor(); err != nil {
		return err
	}
	switch {
	case o.TailBudget != "":
		p.Tail = tail
	case o.SLOP99 <= 0:
		p.Tail = DefaultTailBudget
	}
	if o.SLOP99 > 0 && o.LatencyBudget == "" {
		// No mean budget: nothing for the mean's trim to hold either.
		p.MeanFree, p.NoTrim = true, true
	}
	return nil
}

// The tail's live trim: the p99 the calls lived, against its bound.
//
// The tail model prices what the plan's model holds (the fit, the
// overheads around a batch, the spread of the batch times, the timers'
// lateness), not what it leaves out (the client's own exchange, the
// host's scheduling), and those fall on the tail more than on the mean.
// So, as the mean's trim does for the mean (budgettrim.go), the tail's
// follows the calls: over at least tailTrimSlices slices and
// tailTrimCalls calls of the budget's own rule (the first slice after
// another rule not counted), the lived p99 (the monitor's histogram of
// the calls, Live.Hist) is held against the live bound: the SLO, or the
// tail budget times the p99 ad-hoc lives at the slice's rate (the model's
// ad-hoc p99 there times the calibration ad-hoc's slices measured: the
// mean's trim and the learning phase run them; without them the
// relative bound is not checked). Each slice's calls are counted in units
// of that slice's bound (and ad-hoc's in units of the model's ad-hoc p99
// at its rate), so that slices of different rates add up. The trim aims
// under the bound (tailTrimAim of it), so that the p99 a client measures
// over a run, a few per cent off the one the trim measured, stays within
// the bound. When more calls than 1% lived over the aim, by two binomial
// standard errors, the bound the plans hold moves down by the ratio of
// the lived p99 to the aim (at most halved per step); when fewer than 1%
// lived over 90% of the aim, back up by a damped square root, never past
// the user's; when none of the plans measured held anything (the bound at
// this scale leaves them ad-hoc), back up by the most a step grows, as
// soon as the calls did not live over the aim: ad-hoc's calls say nothing
// of how much room the scale has, only that the bound leaves holds none,
// and ad-hoc's p99 lies near 90% of the aim (a tail budget of 1.20x puts
// it at 83% of the bound), where the test for "under" cannot tell it from
// its aim; otherwise the measurement goes on (up to a minute). A p99
// over a few thousand calls is a few per cent off either way, and steps
// on that noise, down at once and up damped, would walk the bound to the
// floor. The scale is rounded to tailTrimStep and each scale has its own
// plan cache, so a scale visited again is not solved again.
type tailTrim struct {
	scale float64 // of the bound the plans hold: 1 at the user's
	// budget counts the budget slices' calls since the last step, in
	// units of each slice's live bound.
	budget Hist
	// holding counts the same calls since the holds last started,
	// decayed by tailHoldingDecay at each slice: the evidence the phases
	// stop the holds on (broken). A step of the trim does not restart it:
	// a host's stall delays every call in flight at once, and a count
	// begun afresh after each step would read one stall's cluster of a
	// few calls, early in it, as a p99 gone over its bound.
	holding Hist
	slices  int
	// adhoc counts the ad-hoc slices' calls, decayed, in units of the
	// model's ad-hoc p99 at each slice's rate: its p99 is the
	// calibration of the model's ad-hoc p99 (tailCalib).
	adhoc       Hist
	last, prior slice
	// ref is the model's ad-hoc p99 (ms) at the rate the rule in force
	// was planned for: the unit of that slice's calls (0: none, the
	// slice is not counted).
	ref float64
	// factor is the relative tail bound at that rate (tailPlan.factor):
	// the tail budget, or less where the capacity floor caps it.
	factor float64
	// lived is the last measured p99, in units of the bound, and
	// liveBound that bound (ms) when it was measured.
	lived, liveBound float64
	steps            int
	// lastHolds says the rule of the slice last begun holds calls (its
	// plan saves energy over ad-hoc); held, that a slice measured since
	// the last step did.
	lastHolds, held bool
}

// restart begins a new measurement of the budget slices' calls.
func (t *tailTrim) restart() { t.budget, t.slices, t.held = Hist{}, 0, false }

// restartHolding begins a new measurement and a new count of the holds'
// calls, as the holds start or stop.
func (t *tailTrim) restartHolding() {
	t.restart()
	t.holding = Hist{}
}

const (
	tailTrimSlices = 30
	tailTrimCalls  = 1000
	// tailTrimMaxSlices bounds a measurement that cannot tell the p99
	// from its bound (a minute at the default window).
	tailTrimMaxSlices = 600
	tailTrimStep      = 0.02
	// tailTrimGrow is the most one step grows the scale by.
	tailTrimGrow = 1.2
	tailTrimMin  = 0.2
	// tailTrimAim is the share of the live bound the trim aims at: a
	// p99 measured over a thousand calls is a few per cent off, and so
	// is a client's over its run.
	tailTrimAim = 0.95
	// tailAdhocDecay is the weight ad-hoc's calls keep at each new
	// ad-hoc slice: a memory of about a hundred slices.
	tailAdhocDecay = 0.99
	// tailAdhocCalls is how many ad-hoc calls the relative bound needs.
	tailAdhocCalls = 500
	// tailHoldingDecay is the weight the holds' calls keep at each new
	// budget slice in the phases' count (tailTrim.holding): as ad-hoc's,
	// a memory of about a hundred slices.
	tailHoldingDecay = tailAdhocDecay
)

// tailScaleNow is the trim's scale of the bound (1 before it measured).
func (p *Budget) tailScaleNow() float64 {
	if p.tt.scale == 0 {
		return 1
	}
	return p.tt.scale
}

// setTailScale moves the scale to s on the trim's grid, within its
// range, and points the plan cache at its plans.
func (p *Budget) setTailScale(s float64) {
	p.tt.scale = min(max(math.Round(s/tailTrimStep)*tailTrimStep, tailTrimMin), 1)
	p.useTailKey()
}

// tailCalib is live ad-hoc's p99 over the model's ad-hoc p99 at the same
// rates, as the ad-hoc slices measured it; 0 before tailAdhocCalls of
// their calls are in.
func (p *Budget) tailCalib() float64 {
	if p.tt.adhoc.Count() < tailAdhocCalls {
		return 0
	}
	return p.tt.adhoc.QuantileMs(0.99)
}

// liveBound is the p99 (ms) the calls of a slice whose model's ad-hoc p99
// is refMs are held to: the SLO, or the relative tail bound at that rate
// (tt.factor: the tail budget, capped by the capacity floor) times live
// ad-hoc's p99 there (the calibration times refMs), the tighter; 0 while
// neither is known.
func (p *Budget) liveBound(refMs float64) float64 {
	bound := 0.0
	if p.SLOP99 > 0 {
		bound = float64(p.SLOP99) / float64(time.Millisecond)
	}
	if c, f := p.tailCalib(), p.tt.factor; f > 0 && c > 0 && refMs > 0 {
		if b := f * c * refMs; bound == 0 || b < bound {
			bound = b
		}
	}
	return bound
}

// observeTail counts the calls of the slice that just ended, run under
// the rule the last Plan returned, and steps the scale when a measurement
// is complete. It reports whether the scale moved.
func (p *Budget) observeTail(live Live) bool {
	t := &p.tt
	if live.Hist == nil || (p.Tail <= 0 && p.SLOP99 <= 0) || !(t.ref > 0) {
		return false
	}
	switch {
	case t.last == sliceBudget && t.prior == sliceBudget:
		bound := p.liveBound(t.ref)
		if bound <= 0 {
			return false
		}
		t.budget.MergeScaled(live.Hist, bound)
		t.holding.Scale(tailHoldingDecay)
		t.holding.MergeScaled(live.Hist, bound)
		t.slices++
		t.held = t.held || t.lastHolds
	case t.last == sliceAdhoc && t.prior == sliceAdhoc:
		t.adhoc.Scale(tailAdhocDecay)
		t.adhoc.MergeScaled(live.Hist, t.ref)
	}
	if t.slices < tailTrimSlices || t.budget.Count() < tailTrimCalls {
		return false
	}
	// A step only when the calls over the aim (or under nine tenths of
	// it) are more (fewer) than 1% of them by two binomial standard
	// errors; otherwise the measurement goes on, up to tailTrimMaxSlices.
	n, aim := t.budget.Count(), tailTrimAim
	sd := math.Sqrt(n * 0.01 * 0.99)
	over, under := t.budget.CountAbove(aim) > 0.01*n+2*sd, t.budget.CountAbove(0.9*aim) < 0.01*n-2*sd
	held := t.held
	if !over && !under && held && t.slices < tailTrimMaxSlices {
		return false
	}
	lived := t.budget.QuantileMs(0.99)
	t.restart()
	t.lived, t.liveBound = lived, p.liveBound(t.ref)
	if !over {
		p.keptBounds()
	}
	s := p.tailScaleNow()
	r := lived / aim
	switch {
	case over:
		s *= max(1/r, 0.5)
	case !held:
		s *= tailTrimGrow
	case under:
		s *= min(math.Sqrt(1/r), tailTrimGrow)
	default:
		return false
	}
	before := p.tailScaleNow()
	p.setTailScale(s)
	if p.tailScaleNow() == before {
		return false
	}
	t.steps++
	return true
}

// tailKey keys the plan caches by what the tail search's plans depend on
// beside the model: the trim's scale of the bound, the shortfall of the
// model's tail a SLO plan makes room for (tailGapSteps), and the timers'
// lateness (lateSteps).
type tailKey struct {
	scale     float64
	gap, late int
}

// useTailKey points the plan cache at the current key's.
func (p *Budget) useTailKey() {
	k := tailKey{scale: p.tailScaleNow(), gap: p.gapSteps, late: p.lateSteps}
	if p.byTail == nil {
		p.byTail = make(map[tailKey]map[smdp.Budget]*planCache)
	}
	if p.byTail[k] == nil {
		p.byTail[k] = make(map[smdp.Budget]*planCache)
	}
	p.caches = p.byTail[k]
}

// ranTail records what kind of rule the slice starting now runs, and
// whether it holds calls.
func (p *Budget) ranTail(r Rule) {
	k := sliceOther
	p.tt.lastHolds = false
	switch x := unwrapped(r).(type) {
	case budgetPlan:
		k = sliceBudget
		p.tt.lastHolds = x.saving() > 0
	case Fill:
		if x.Policy == NameBudget {
			k = sliceAdhoc
		}
	}
	p.tt.prior, p.tt.last = p.tt.last, k
}

// unwrapped is the rule inside the guards and notes a plan may wrap it
// in.
func unwrapped(r Rule) Rule {
	for {
		switch x := r.(type) {
		case guarded:
			r = x.Rule
		case noted:
			r = x.Rule
		default:
			return r
		}
	}
}

// tailTrimNote says where the tail's trim stands.
func (p *Budget) tailTrimNote() string {
	t := &p.tt
	if t.liveBound == 0 {
		return ""
	}
	return fmt.Sprintf("; tail trim: bound x%.2f (calls lived p99 %.3g of their bound, %.4g ms live, %d steps)", p.tailScaleNow(), t.lived, t.liveBound, t.steps)
}

// promise names the bounds the plans keep, for notes.
func (p *Budget) promise() string {
	var parts []string
	if !p.MeanFree {
		parts = append(parts, "mean "+p.Budget.String())
	}
	if p.Tail > 0 {
		parts = append(parts, "p99 "+strconv.FormatFloat(p.Tail, 'f', -1, 64)+"x")
	}
	if p.SLOP99 > 0 {
		parts = append(parts, "p99 under "+p.SLOP99.String())
	}
	return strings.Join(parts, ", ")
}
