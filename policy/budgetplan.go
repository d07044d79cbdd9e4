package policy

import (
	"fmt"
	"math"
	"time"

	"github.com/ratebatch/ratebatch/policy/smdp"
)

// Plan implements Policy.
func (p *Budget) Plan(e Estimate) Rule {
	p.mu.Lock()
	p.observeTail(e.Live)
	p.mu.Unlock()
	r := p.plan(e)
	p.mu.Lock()
	p.ranTail(r)
	p.mu.Unlock()
	return r
}

// plan is the slice's rule: ad-hoc while the load cannot be planned for
// (unplannable), while the plan for the user's bounds does not pay
// (departs) or while the learning phase has not earned the holds (earn),
// else the plan for the bounds the trims give (hold). It stays one
// function: the order of those decisions is the policy, read whole.
func (p *Budget) plan(e Estimate) Rule {
	if err := e.Validate(); err != nil {
		return p.invalid(e, err)
	}
	busyTime := !e.HasEnergy
	if busyTime {
		// Energy proportional to GPU busy time: 1 W while a batch runs.
		e.BetaMJ, e.Zeta0MJ, e.HasEnergy = e.AlphaMs, e.Tau0Ms, true
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.meter.at(e.Now)
	grid, m, reason := gridModel(e, p.resolve())
	if reason != "" {
		return p.conserve(reason, e)
	}
	pop, closed := closedLoop(e, m)
	r, ok, guard := p.unplannable(e, m, closed, closed && pop.Clients <= m.MaxBatch)
	if ok {
		return r
	}
	p.setTailKeys(e)
	pickFor := func(b smdp.Budget) Rule {
		if closed {
			return p.finiteRule(b, pop, m, busyTime)
		}
		return p.rule(b, grid, m, busyTime)
	}
	// The plan for the user's bounds as set, whatever the tail trim's
	// scale: its saving decides whether to depart from ad-hoc at all.
	userRule := p.atUserScale(func() Rule { return pickFor(p.Budget) })
	// The model's ad-hoc p99 at this rate: the unit the next slice's calls
	// are counted in by the tail trim (observeTail).
	p.tt.ref, p.tt.factor = tailRef(userRule)
	ubp, ok := userRule.(budgetPlan)
	if !ok {
		p.show(PhaseAdhoc, userRule.Status().Note)
		return p.untrimmed(userRule, e)
	}
	if r, ok := p.departs(e, ubp); !ok {
		return r
	}
	if !p.NoLearn {
		if r, ok := p.earn(e, closed, guard); ok {
			return r
		}
	}
	// The plan at the budget and the scale of the p99 bound the trims
	// give: the user's plan above when they sit at the user's.
	rule := userRule
	if b := p.trim.budget(p.Budget); (!p.NoTrim && b != p.Budget) || p.tailScaleNow() != 1 {
		if p.NoTrim {
			b = p.Budget
		}
		rule = pickFor(b)
	}
	bp, ok := rule.(budgetPlan)
	if !ok {
		p.show(PhaseAdhoc, rule.Status().Note)
		return p.untrimmed(rule, e)
	}
	return p.hold(bp, e)
}

// invalid is the fallback rule of an estimate that does not validate.
func (p *Budget) invalid(e Estimate, err error) Rule {
	r := fallback(NameBudget, e, err)
	p.mu.Lock()
	p.show(PhaseAdhoc, r.Status().Note)
	p.tt.ref, p.tt.factor = 0, 0
	p.mu.Unlock()
	return r
}

// unplannable is the rule, and true, of a slice whose load cannot be
// planned for: no decision could wait (the last plan is kept), the rate
// stepped, or the load cannot be told from overload now or did lately
// (work-conserving). While learning, a load near the line lately is not
// the slice's rule (learning runs ad-hoc anyway) but guard, the note
// earn holds the holds back by. m is the slice's model, closed whether its callers
// are a closed loop, and group whether that loop's whole population fits
// in one batch.
//
// Only such a loop is planned near the capacity line: its waits cannot
// build a queue past one batch. A larger loop near capacity fills its
// batches whether it waits or not, and a pool of keep-alive connections
// under an open stream, read as a loop of as many clients while its
// feedback score wanders (docs/ALGORITHMS.md, "A pool of connections is
// not a closed loop"), would build the backlog the guard keeps an open
// stream from. Called with p.mu held.
func (p *Budget) unplannable(e Estimate, m smdp.Model, closed, group bool) (r Rule, ok bool, guard string) {
	if e.Decisions > 0 && e.OpenDecisions == 0 && p.kept != nil {
		// No caller could have sent a partner at any decision of the
		// slice (synchronous clients, all waiting): the rule sent at once
		// whatever its plan, so the plan is kept rather than solved
		// again for a fit that moved by noise.
		p.trim.next(p.Budget, false)
		return noted{p.kept, fmt.Sprintf("; kept: none of the last slice's %d decisions could wait (no caller idle)", e.Decisions)}, true, ""
	}
	if e.Stepped {
		p.load.reset()
	}
	if e.Stepped && !closed {
		// A burst or a step: the queue holds the old rate's transient and
		// the new rate is one slice's count, so waiting planned for a
		// steady load does not hold (docs/ALGORITHMS.md, "Bursts"). A
		// closed loop's rate is not its load but its output: the plan for
		// it raises the rate it measures, which is no step (its load is
		// the population).
		return p.conserve(fmt.Sprintf(
			"the rate stepped (%.4g req/s over the last %v): work-conserving until it has held for a window", e.RatePerSec, e.Window), e), true, ""
	}
	p.capacity.add(math.Log(m.ServiceMuPerMs(m.MaxBatch)))
	p.load.add(e.Now, e.RatePerSec, e.Window)
	rho, n, over := p.load.guardLoad(e, m.Rho())
	if !group && nearOverload(rho, n, p.capacity.variance(), e.ServiceSCV) {
		// The count itself reached the line: a load near it falls on
		// either side from one window to the next, so the guard holds
		// (guardHoldPlans). The capacity's spread alone: it holds as
		// long as the spread's memory (capacityHoldPlans).
		p.guarded = max(p.guarded, capacityHoldPlans)
		if nearOverload(rho, n, 0, e.ServiceSCV) {
			p.guarded = guardHoldPlans
		}
		return p.conserve(fmt.Sprintf(
			"%d arrivals over the last %.3g s, a capacity varying %.1f%% and batch times varying %.0f%% cannot tell rho %.3f (congested as %.3f with exact batches) from the capacity line %.2f (%d standard errors): work-conserving",
			n, over.Seconds(), 100*math.Sqrt(p.capacity.variance()), 100*math.Sqrt(max(e.ServiceSCV, 0)), rho,
			congestedRho(rho, e.ServiceSCV), 1-congestionMargin, overloadSigmas), e), true, ""
	}
	if !group && p.guarded > 0 {
		p.guarded--
		guard = fmt.Sprintf(
			"the load reached the capacity line lately (now rho %.3f, %d arrivals over the last %.3g s, a capacity varying %.1f%%): work-conserving %d plans more",
			rho, n, over.Seconds(), 100*math.Sqrt(p.capacity.variance()), p.guarded)
		if !p.NoLearn && p.ph.state == stateLearning {
			// Learning runs ad-hoc anyway, and its slices teach it
			// ad-hoc's calls; the holds wait for the guard (earn).
			return nil, false, guard
		}
		return p.conserve(guard, e), true, ""
	}
	return nil, false, ""
}

// departs reports whether the plan for the user's bounds, ubp, departs
// from ad-hoc: the live trim takes the slice's calls against its ad-hoc
// prediction, and an SLO that leaves no room for holds or a saving too
// small to tell from the model's error keep ad-hoc, whose rule departs
// returns with false. Called with p.mu held.
func (p *Budget) departs(e Estimate, ubp budgetPlan) (Rule, bool) {
	if !p.NoTrim {
		// The rule's model is at the rate (or the closed loop) of the
		// window that just ended, so its ad-hoc latency is the prediction
		// for that window's calls.
		p.trim.observe(p.Budget, e.Live, ubp.adhocMs())
	}
	why := p.noRoom()
	if why == "" && ubp.saving() < minSaving {
		why = fmt.Sprintf("the plan for %s saves %.2f%% of ad-hoc's energy per request at this load, under the %g%% the model can tell from its own error: work-conserving (%s)",
			p.promise(), 100*ubp.saving(), 100*minSaving, ubp.Status().Note)
	}
	if why != "" {
		// Ad-hoc, on a model whose rate and ad-hoc latency are known: its
		// calls teach the trims and the learning phase ad-hoc's.
		return p.conserveLearning(why, e), false
	}
	return nil, true
}

// hold is the rule of a slice that holds by the plan bp: bp with the
// trims' and the phase's notes, or one of the live trim's ad-hoc windows,
// or ad-hoc while the trim found no plan the calls lived within the
// budget. Called with p.mu held.
func (p *Budget) hold(bp budgetPlan, e Estimate) Rule {
	holding := ""
	if !p.NoLearn {
		why := p.holdingNote()
		p.show(PhaseHolding, why)
		holding = "; holding: " + why
	} else {
		p.show(PhaseHolding, "the plan alone (no learning phase)")
	}
	if p.NoTrim {
		return p.untrimmed(bp.withTrim(p.tailTrimNote()+holding), e)
	}
	if p.trim.next(p.Budget, true) {
		// A window of ad-hoc, whose calls measure the live latency the
		// budget is relative to (budgettrim.go).
		return p.guard(trimAdhocRule(e, fmt.Sprintf("live trim: %d slices of ad-hoc in %d, measuring the latency the budget is relative to (model: %.4g ms)%s",
			trimAdhoc, trimPeriod, bp.adhocMs(), holding)), e)
	}
	if p.trim.atAdhoc(p.Budget) {
		// Calls lived over the budget even under the plan for a 1% slack:
		// ad-hoc until the trim tries a plan again (budgettrim.go).
		note := "live trim: the calls lived over the budget with every plan down to a 1% slack; ad-hoc" + p.trim.note(p.Budget)
		p.show(PhaseAdhoc, note)
		p.kept = p.guard(trimAdhocRule(e, note), e)
		return p.kept
	}
	p.kept = p.guard(bp.withTrim(p.trim.note(p.Budget)+p.tailTrimNote()+holding), e)
	return p.kept
}

// atUserScale runs plan with the p99 bound at the user's (the tail
// trim's scale 1, its own plan cache), and the trim's scale back after.
func (p *Budget) atUserScale(plan func() Rule) Rule {
	s := p.tt.scale
	if s == 0 || s == 1 {
		return plan()
	}
	p.tt.scale = 1
	p.useTailKey()
	defer func() {
		p.tt.scale = s
		p.useTailKey()
	}()
	return plan()
}

// tailRef is the model's ad-hoc p99 a planned rule's tail model
// predicted (ms) and the relative tail bound it was held to at its rate
// (tailPlan.factor); zeros without a tail model.
func tailRef(r Rule) (ms, factor float64) {
	var t *tailPlan
	switch x := r.(type) {
	case BudgetRule:
		t = x.tail
	case FiniteRule:
		t = x.tail
	}
	if t == nil {
		return 0, 0
	}
	return t.adhoc.P99Ms, t.factor
}

// noRoom says why an SLO leaves no room for holds at this load ("" when
// it does): ad-hoc itself lives a p99 at or over tailTrimAim of it (its
// calibrated p99: the model's at this rate times what the ad-hoc slices
// lived over the model's).
func (p *Budget) noRoom() string {
	c := p.tailCalib()
	if p.SLOP99 <= 0 || c <= 0 || !(p.tt.ref > 0) {
		return ""
	}
	slo := float64(p.SLOP99) / float64(time.Millisecond)
	if live := c * p.tt.ref; live >= tailTrimAim*slo {
		return fmt.Sprintf("ad-hoc itself lives p99 %.3g ms at this load (the model's %.3g x%.3g measured), at or over %.0f%% of slo_p99 %v: no room to hold",
			live, p.tt.ref, c, 100*tailTrimAim, p.SLOP99)
	}
	return ""
}

// untrimmed applies a rule the live trim takes no part in: the slice is
// neither a plan nor one of the trim's ad-hoc windows, and the trim's
// rhythm of plans and ad-hoc windows does not advance across it.
func (p *Budget) untrimmed(r Rule, e Estimate) Rule {
	p.trim.next(p.Budget, false)
	return p.guard(r, e)
}

// trimAdhocRule is the ad-hoc the live trim runs, in its ad-hoc windows
// and while it holds at ad-hoc: every batch at once, its calls counted by
// the trim (untrimmed's are not).
func trimAdhocRule(e Estimate, note string) Rule {
	return Fill{Policy: NameBudget, Batch: e.MaxBatch, Note: note}
}

// workConserving sends every batch at once, with the reason the budget
// chose not to wait.
func workConserving(reason string) Rule {
	return Limit{Policy: NameBudget, Limit: 1, Note: reason}
}

// minSaving is the least share of ad-hoc's energy per request a plan must
// save, at the user's budget, for the budget to depart from ad-hoc: below
// it ad-hoc runs (work-conserving). A plan's saving is the model's, and
// the model is a few per cent off live (its fit, its overheads, the
// arrivals it assumes); a wait that saves less than that is as likely to
// cost as to save, and its wait costs latency for certain
// (docs/ALGORITHMS.md, "A saving too small to tell from the model's
// error"). It is also where the tail's bound leaves nothing to save (a
// trickle of requests): the default then sends at once.
const minSaving = 0.01
