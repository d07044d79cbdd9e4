package policy

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// The budget's phases: holds are earned (docs/ALGORITHMS.md, "Earning the
// right to hold").
//
// The plan prices a hold on a model, and live the model is short of the
// calls' latency by an amount the proxy can only measure: its timers end
// late, the host schedules it among other processes, a load generator
// shares its cores. The live trims (budgettrim.go, the tail trim in
// budgettail.go) close the gap, but only after they have measured: a
// fresh proxy held the user's plan from its first second and broke its
// own bounds for the first tens of seconds of a run. So the budget starts
// as ad-hoc does (work-conserving) and holds only on evidence:
//
//   - learning: ad-hoc, every slice, until learnCalls of its calls are in
//     and, for a relative budget, the mean trim's calibration of ad-hoc
//     (calibMinSlices slices, or calibLeastSlices that agree:
//     trim.calibrated): ad-hoc's live mean and p99 against the model's,
//     the reference both bounds are held to.
//   - holding: the plan, first at holdStartShare of the user's slack
//     (the mean's, and the p99's over ad-hoc's when no SLO is set), the
//     trims growing it as the calls show room. Each
//     slice the calls' p99 is tested against the live bound: when more
//     than 1% of the holds' calls since they started (decayed,
//     tailTrim.holding) lived over it, at significance phaseStopAlpha
//     (exact binomial), or the calls'
//     mean lived over the mean budget by phaseStopSigmas standard errors,
//     the holds stop at once.
//   - adhoc: work-conserving for a reason (a stop, near capacity, a rate
//     that stepped, a saving too small, ...). After a stop ad-hoc runs
//     stopWaitSlices slices, doubled at each stop since the holds last
//     kept their bound (up to 2^maxStopDoublings), with the bounds the
//     plans hold cut by what the calls lived; then the holds are tried
//     again.
//
// The phase and why are on /status (Phaser) and in the rule's note.

// The phases as /status names them.
const (
	PhaseLearning = "learning"
	PhaseHolding  = "holding"
	PhaseAdhoc    = "adhoc"
)

// Phaser is a policy that says which phase it is in on its model and why
// (the budget's: learning, holding or adhoc); the monitor shows it on
// /status.
type Phaser interface {
	Phase() (phase, reason string)
}

const (
	// learnCalls is how many calls of ad-hoc the learning phase needs: a
	// p99 over a thousand calls rests on its ten slowest, and a tail
	// bound relative to it is as good as they are.
	learnCalls = 1000
	// holdStartShare is the share of the user's slack (the mean's over
	// ad-hoc, the p99's over ad-hoc's p99) the first holds are planned
	// for; the trims grow it while the calls live within their aims.
	holdStartShare = 0.5
	// phaseStopAlpha is the significance at which the calls' count over
	// the p99 bound ends the holds: tested every slice, so small, and a
	// stop that was chance costs only the energy of the slices at ad-hoc.
	phaseStopAlpha = 0.001
	// phaseStopMinCalls is the fewest calls the p99 test is made on.
	phaseStopMinCalls = 100
	// phaseStopSigmas: the mean lived over the user's budget by this many
	// standard errors (the mean trim's measurement since its last step,
	// over at least phaseStopMeanCalls calls) ends the holds.
	phaseStopSigmas    = 3
	phaseStopMeanCalls = 300
	// phaseConfidence is the confidence at which /status says the holds'
	// p99 lived within the bound: the upper limit of the share of calls
	// over it at this confidence is at most 1%.
	phaseConfidence = 0.95
	// stopWaitSlices is how long the budget stays ad-hoc after a stop.
	stopWaitSlices   = trimPeriod
	maxStopDoublings = 6
)

// phaseState is where the phase machine stands (what /status shows may be
// adhoc for another reason meanwhile: a guard).
type phaseState int

const (
	stateLearning phaseState = iota
	stateHolding
	stateStopped
)

// phases is the budget's phase machine. Its zero value is learning.
type phases struct {
	state phaseState
	// learnt counts the ad-hoc calls measured (slices that ran ad-hoc
	// after a slice that did too), undecayed.
	learnt int
	// started says holds have started once: the trims' first plans were
	// set to holdStartShare of the user's slack.
	started bool
	// wait is how many slices more the budget stays ad-hoc after a stop;
	// stops counts stops since the holds last kept their bounds.
	wait, stops int
	// reason is why the phase shown is the one it is.
	reason string
}

// shownPhase is what /status shows: read without the policy's lock, which
// a plan holds through its solves.
type shownPhase struct{ phase, reason string }

// Phase implements Phaser.
func (p *Budget) Phase() (phase, reason string) {
	if s := p.shown.Load(); s != nil {
		return s.phase, s.reason
	}
	return "", ""
}

// show sets what /status shows.
func (p *Budget) show(phase, reason string) {
	p.ph.reason = reason
	p.shown.Store(&shownPhase{phase, reason})
}

// conserve is the work-conserving rule for a reason that is not the
// phase machine's (a guard): shown as adhoc, or as learning while the
// evidence is not in yet.
func (p *Budget) conserve(reason string, e Estimate) Rule {
	if !p.NoLearn && p.ph.state == stateLearning {
		p.show(PhaseLearning, p.learnMissing()+"; work-conserving meanwhile: "+reason)
	} else {
		p.show(PhaseAdhoc, reason)
	}
	return p.untrimmed(workConserving(reason), e)
}

// conserveLearning is the work-conserving rule for a reason the model
// gives at a known rate (a saving too small, an SLO without room): ad-hoc
// as the learning phase runs it, whose calls the trims and the learning
// count as ad-hoc's. With the phases off (NoLearn) it is the plain
// work-conserving rule.
func (p *Budget) conserveLearning(reason string, e Estimate) Rule {
	if p.NoLearn {
		return p.conserve(reason, e)
	}
	if p.tt.last == sliceAdhoc && p.tt.prior == sliceAdhoc {
		p.ph.learnt += e.Live.Calls
	}
	if p.ph.state == stateLearning && p.learnMissing() != "" {
		p.show(PhaseLearning, p.learnMissing()+"; work-conserving meanwhile: "+reason)
	} else {
		p.show(PhaseAdhoc, reason)
	}
	return p.adhocSlice(e, reason)
}

// earn runs the phase machine for the slice starting now, on the live
// estimate e (closed: its callers are planned as a closed loop; guard:
// why the near-overload guard still holds, "" when it does not): the
// ad-hoc rule of the learning and stopped phases, or ok false when the
// holds may go on (holding).
func (p *Budget) earn(e Estimate, closed bool, guard string) (Rule, bool) {
	ph := &p.ph
	if p.tt.last == sliceAdhoc && p.tt.prior == sliceAdhoc {
		ph.learnt += e.Live.Calls
	}
	switch ph.state {
	case stateLearning:
		if missing := p.learnMissing(); missing != "" {
			if guard != "" {
				missing += "; then " + guard
			}
			p.show(PhaseLearning, missing)
			return p.adhocSlice(e, fmt.Sprintf("learning before holding for budget %s: %s; ad-hoc meanwhile", p.Budget, missing)), true
		}
		if guard != "" {
			// Learnt, but the load was near the capacity line lately
			// (unplannable): ad-hoc, still counted as ad-hoc's.
			p.show(PhaseAdhoc, guard)
			return p.adhocSlice(e, guard), true
		}
		p.startHolding(closed)
	case stateStopped:
		if ph.wait > 0 {
			ph.wait--
			return p.adhocSlice(e, p.ph.reason+fmt.Sprintf("; ad-hoc %d slices more", ph.wait)), true
		}
		ph.state = stateHolding
		p.tt.restartHolding()
	case stateHolding:
		if why := p.broken(); why != "" {
			p.stop(why)
			return p.adhocSlice(e, p.ph.reason), true
		}
	}
	return nil, false
}

// learnMissing says what the learning phase still needs ("" when
// nothing): learnCalls calls of ad-hoc and, for a relative mean budget
// the trim holds, its calibration of ad-hoc.
func (p *Budget) learnMissing() string {
	var miss []string
	if n := p.ph.learnt; n < learnCalls {
		miss = append(miss, fmt.Sprintf("%s of %s round trips", thousands(n), thousands(learnCalls)))
	}
	if !p.NoTrim && p.Budget.Relative() && !p.trim.calibrated(p.Budget) {
		m := fmt.Sprintf("ad-hoc's mean over %d of %d slices", p.trim.calibSlices, calibMinSlices)
		if se := p.trim.calibRelSE(); !math.IsInf(se, 0) {
			m += fmt.Sprintf(" (±%.2g%%, enough at ±%.2g%% after %d)", 100*se, 100*calibReadySE*(p.Budget.Factor-1), calibLeastSlices)
		}
		miss = append(miss, m)
	}
	if len(miss) == 0 {
		return ""
	}
	s := strings.Join(miss, ", ")
	if c := p.tailCalib(); c > 0 {
		lo, hi := p.tailCalibInterval()
		s += fmt.Sprintf(" (live ad-hoc p99 %.3gx the model's so far, %.0f%%: %.3g-%.3gx)", c, 100*phaseConfidence, lo, hi)
	}
	return s
}

// tailCalibInterval is the calibration's confidence interval at
// phaseConfidence: the quantiles of ad-hoc's calls (in units of the
// model's p99) whose ranks bound the 99th percentile's order statistic
// (normal approximation of the binomial count under it).
func (p *Budget) tailCalibInterval() (lo, hi float64) {
	h := &p.tt.adhoc
	n := h.Count()
	if n < 1 {
		return 0, 0
	}
	z := 1.96 // two-sided, phaseConfidence
	d := z * math.Sqrt(0.01*0.99/n)
	return h.QuantileMs(max(0.99-d, 0)), h.QuantileMs(min(0.99+d, 1))
}

// startHolding ends the learning phase: the trims' first plans are for
// holdStartShare of the user's slack (their scales grow from there as the
// calls show room), and the tail's measurement starts afresh. A closed
// loop's p99 bound starts at the user's: its tail model takes the think
// times as exponential (finiteTail), which overstates the wait for
// synchronous clients' partners, whose think times vary far less, and a
// tail scale of a half leaves their group waits no room at all: the tail
// trim would grow it back (a scale whose plans hold nothing grows a step
// per measurement), but only after a few measurements of ad-hoc's calls,
// the energy of a short run.
func (p *Budget) startHolding(closed bool) {
	p.ph.state = stateHolding
	p.tt.restartHolding()
	if p.ph.started {
		return
	}
	p.ph.started = true
	if p.Tail > 0 && p.SLOP99 <= 0 && !closed && p.tailScaleNow() > holdStartShare {
		// The scale of a relative bound is of its slack over ad-hoc's
		// p99; an SLO's would be of the SLO itself, which the shortfall
		// the learning measured already cuts (tailGapMs).
		p.setTailScale(holdStartShare)
	}
	if !p.NoTrim && p.Budget.Relative() {
		p.trim.budget(p.Budget) // sets the slack if unset
		p.trim.eff = quantize(min(p.trim.eff, holdStartShare*(p.Budget.Factor-1)))
	}
}

// broken says why the calls say the holds break a bound ("" when they do
// not): the p99's count over the live bound, or the mean over the user's
// budget.
//
// The p99 bound is a multiple of ad-hoc's live p99, itself measured on
// a sample of ad-hoc's calls (a thousand when the holds first start), so
// the calls are counted over the bound at the top of that p99's
// confidence interval (boundDoubt): a bound read low by chance is not
// the holds' breach.
func (p *Budget) broken() string {
	if n, _ := p.tailCounts(); n >= phaseStopMinCalls {
		doubt := p.boundDoubt()
		k := int(math.Round(p.tt.holding.CountAbove(doubt)))
		if pv := binomAtLeast(n, k, 0.01); pv < phaseStopAlpha {
			over := "over it"
			if doubt > 1 {
				over = fmt.Sprintf("over %.3gx it, the top of ad-hoc's p99's %.0f%% interval", doubt, 100*phaseConfidence)
			}
			return fmt.Sprintf("the holds' p99 lived over its bound: %s of %s calls %s (%.1f%%, p = %.1g)",
				thousands(k), thousands(n), over, 100*float64(k)/float64(n), pv)
		}
	}
	if p.NoTrim || !p.trim.set || p.trim.calls < phaseStopMeanCalls || p.trim.wins < 2 {
		return ""
	}
	ratio := p.trim.liveMs / p.trim.refMs
	bound := 1.0
	if p.Budget.Relative() {
		bound = p.Budget.Factor
	}
	if se := p.trim.ratioSE(ratio, p.Budget.Relative()); ratio > bound+phaseStopSigmas*se {
		return fmt.Sprintf("the holds' mean lived %.3fx against the budget's %.2fx (%d standard errors over it, %s calls)",
			ratio, bound, phaseStopSigmas, thousands(p.trim.calls))
	}
	return ""
}

// boundDoubt is how far the live p99 bound may be short of what ad-hoc's
// p99 is, at the confidence of its interval (tailCalibInterval): the top
// of the interval over the estimate, when the relative bound binds at the
// slice's rate; 1 when an SLO binds or nothing is measured.
func (p *Budget) boundDoubt() float64 {
	c, ref := p.tailCalib(), p.tt.ref
	bound := p.liveBound(ref)
	if !(c > 0) || !(bound > 0) || !(p.tt.factor > 0) || p.tt.factor*c*ref > bound {
		return 1
	}
	_, hi := p.tailCalibInterval()
	if !(hi > c) {
		return 1
	}
	if p.SLOP99 > 0 {
		// The SLO caps the bound however high ad-hoc's p99 may be.
		return min(hi/c, float64(p.SLOP99)/float64(time.Millisecond)/bound)
	}
	return hi / c
}

// stop ends the holds: the bounds the plans hold are cut by what the
// calls lived (as the trims would step), and ad-hoc runs a while.
func (p *Budget) stop(why string) {
	ph := &p.ph
	ph.state = stateStopped
	ph.wait = stopWaitSlices << min(ph.stops, maxStopDoublings)
	ph.stops++
	if n, _ := p.tailCounts(); n > 0 {
		if lived := p.tt.holding.QuantileMs(0.99); lived > 0 {
			p.setTailScale(p.tailScaleNow() * max(tailTrimAim/lived, 0.5))
		}
	}
	p.tt.restartHolding()
	if !p.NoTrim && p.trim.set && p.trim.calls > 0 {
		p.trim.cut(p.Budget)
	}
	p.show(PhaseAdhoc, "stopped: "+why)
}

// keptBounds records that a measurement of the holds lived within its bound:
// the back-off after stops starts over.
func (p *Budget) keptBounds() { p.ph.stops = 0 }

// adhocSlice is the ad-hoc rule of the learning and stopped phases: its
// calls are counted as ad-hoc's by both trims (the first after another
// rule settles the queue and is not), and no measurement of the holds
// runs meanwhile.
func (p *Budget) adhocSlice(e Estimate, note string) Rule {
	if p.ph.state != stateHolding {
		p.trim.restart()
	}
	p.trim.last = sliceSettle
	if p.tt.last == sliceAdhoc {
		p.trim.last = sliceAdhoc
	}
	return p.guard(trimAdhocRule(e, note), e)
}

// holdingNote says how the holds live against their bounds, for /status
// (the reason of the holding phase) and the rule's note.
func (p *Budget) holdingNote() string {
	n, k := p.tailCounts()
	switch {
	case !(p.tt.ref > 0):
		return "the plan's mean held by the live trim (no tail model for this plan)"
	case n == 0:
		return "the first calls under the plan are being measured"
	}
	lived := p.tt.holding.QuantileMs(0.99)
	var s string
	switch {
	case p.Tail > 0 && p.SLOP99 <= 0:
		s = fmt.Sprintf("p99 lived %.3gx live ad-hoc's (bound %.3gx)", lived*p.tt.factor, p.tt.factor)
	case p.SLOP99 > 0 && p.Tail <= 0:
		s = fmt.Sprintf("p99 lived %.3g ms inside the proxy (slo_p99 %v)", lived*float64(p.SLOP99)/float64(time.Millisecond), p.SLOP99)
	default:
		s = fmt.Sprintf("p99 lived %.3g of its bound", lived)
	}
	up := binomUpper(n, k, 1-phaseConfidence)
	if up <= 0.01 {
		return s + fmt.Sprintf(": %s of %s calls over the bound, under 1%% at %.0f%% confidence", thousands(k), thousands(n), 100*phaseConfidence)
	}
	return s + fmt.Sprintf(": %s of %s calls over the bound, on trial (under %.3g%% at %.0f%% confidence)", thousands(k), thousands(n), 100*up, 100*phaseConfidence)
}

// tailCounts are the holds' calls since they last started (decayed:
// tailTrim.holding) and those over their live bound, rounded. Weighted
// by their decay, the calls' count over the bound varies less than a
// binomial count of that many, so the tests on it err towards holding on.
func (p *Budget) tailCounts() (n, k int) {
	return int(math.Round(p.tt.holding.Count())), int(math.Round(p.tt.holding.CountAbove(1)))
}

// thousands writes n with a comma every three digits (1,000).
func thousands(n int) string {
	s := fmt.Sprint(n)
	if n < 0 {
		return "-" + thousands(-n)
	}
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
