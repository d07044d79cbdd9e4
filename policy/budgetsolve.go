package policy

import (
	"context"
	"fmt"

	"github.com/ratebatch/ratebatch/policy/smdp"
)

// rule is the constrained optimum for the grid rate and model, at budget
// b, from the cache or solved.
func (p *Budget) rule(b smdp.Budget, grid int, m smdp.Model, busyTime bool) Rule {
	if p.caches == nil {
		p.useTailKey()
	}
	cache := p.caches[b]
	if cache == nil {
		cache = &planCache{}
		p.caches[b] = cache
	}
	if r, ok := cache.lookup(grid, m, p.resolve()); ok {
		return r
	}
	if !p.meter.allow() {
		if r, ok := p.nearest(b, grid, m.MaxBatch); ok {
			return r
		}
	}
	r := p.meter.time(func() Rule { return p.solve(m, b, busyTime) })
	p.solves++
	cache.add(grid, m, r, budgetCacheSize)
	return r
}

// nearest is the cached rule nearest to grid (planCache.nearest), of the
// budget b if it has one, else of the loosest budget solved that is not
// looser than b; its status says it was not solved for this rate. With
// neither it reports none, and the caller solves b now, whatever the
// meter: the meter spaces the re-solves of budgets already planned as
// the rate moves over the grid, while a budget without any plan comes
// only from a step of a trim or a phase (their measurements are tens of
// slices apart), and its first solve is the only way to plan it.
//
// A looser budget's plan is never taken for b. The live trim tightens the
// budget when the calls lived above the promise; planning the tighter
// budget with the looser one's rule until a solve was allowed would keep
// the very rule that broke the promise, and the trim, measuring it under
// the new budget, would step on down past where it meant to go
// (docs/ALGORITHMS.md, "Solves within a share of a core"). Nor does b wait
// for the meter with the work-conserving rule: after a solve of d the
// meter allows the next only d(1/share - 1) later, and on a busy host,
// where a solve's wall time is long, the first holds' budget and each
// budget a trim steps to would wait for seconds at ad-hoc, most of a
// short benchmark (TestBudgetSolvesANewBudgetAtOnce).
func (p *Budget) nearest(b smdp.Budget, grid, maxBatch int) (Rule, bool) {
	var (
		r    Rule
		dist int
		ok   bool
	)
	if c := p.caches[b]; c != nil {
		r, dist, ok = c.nearest(grid, maxBatch)
	}
	if !ok {
		var best smdp.Budget
		for ob, c := range p.caches {
			or, od, ok2 := c.nearest(grid, maxBatch)
			if ok2 && stricter(ob, b) && (!ok || stricter(best, ob)) {
				best, r, dist, ok = ob, or, od, true
			}
		}
	}
	if !ok {
		return nil, false // nothing solved for b or under it: solve
	}
	if br, isBR := r.(BudgetRule); isBR {
		br.solveNote = deferredNote(dist)
		return br, true
	}
	return r, true
}

// stricter reports whether budget a is at least as strict as b: of the
// same kind (relative or absolute) and no looser.
func stricter(a, b smdp.Budget) bool {
	if a.Relative() != b.Relative() {
		return false
	}
	if b.Relative() {
		return a.Factor <= b.Factor
	}
	return a.AbsoluteMs <= b.AbsoluteMs
}

// budgetFirstStates is the state space a default solve starts with: four
// full batches (and at least 32 states), doubled while the optimum's
// overflow share is at or above smdp.DeltaAccept, up to SMDPStates. A
// solve's cost grows as the cube of its states (GTH elimination of the
// embedded chain, several evaluations per Lagrangian search), and away
// from saturation the queue almost never holds four batches; the solves'
// bursts cost the calls latency of their own (BenchmarkBudgetSolve;
// docs/ALGORITHMS.md, "Solves within a share of a core"). Truncated where
// the queue does not reach, the optimum is the same
// (TestBudgetSolveStartsSmall).
func budgetFirstStates(maxBatch int) int { return max(4*maxBatch, 32) }

// solve computes the constrained optimum for m and turns it into a rule; a
// failed solve gives the work-conserving rule (cached too, so a model the
// solver rejects is not retried every window).
//
// It stays one function: the solve, the tail's bound over it and the rule's
// note are one result, built in that order.
func (p *Budget) solve(m smdp.Model, budget smdp.Budget, busyTime bool) (out Rule) {
	if p.MeanFree {
		return p.solveSLO(m, busyTime)
	}
	sMax := p.SMax
	states := sMax
	if sMax == 0 {
		sMax = SMDPStates(m.MaxBatch)
		states = min(budgetFirstStates(m.MaxBatch), sMax)
	}
	sMax = max(sMax, m.MaxBatch)
	states = max(states, m.MaxBatch)
	var (
		c   smdp.Constrained
		err error
	)
	for ; ; states = min(2*states, sMax) {
		c, err = smdp.SolveBudget(context.Background(), m, budget, states)
		if err == nil && c.Delta < smdp.DeltaAccept || states >= sMax {
			break
		}
	}
	if err != nil {
		return Limit{Policy: NameBudget, Limit: 1, Note: "latency budget solve failed, work-conserving: " + err.Error()}
	}
	if p.Tail > 0 || p.SLOP99 > 0 {
		// The hold bound of the mean's plan, kept unless the tail needs
		// a shorter one.
		r := p.withTail(BudgetRule{
			first:  Limit{Policy: NameBudget, Limit: c.First.Limit, MaxWait: p.waitFor(c, m)},
			second: Limit{Policy: NameBudget, Limit: c.Second.Limit, MaxWait: p.waitFor(c, m)},
			mix:    c.Mix,
		}, m, c.BudgetMs)
		defer func() {
			br := out.(BudgetRule)
			br.tail = r.tail
			if r.tail.held {
				br.first.Limit, br.second.Limit, br.mix = r.first.Limit, r.second.Limit, r.mix
				br.first.MaxWait, br.second.MaxWait = r.first.MaxWait, r.second.MaxWait
				br.first.Note += r.tail.heldNote(r)
			}
			br.first.Note += r.tail.note()
			br.second.Note = br.first.Note
			out = br
		}()
	}
	wait := p.waitFor(c, m)
	unit := "W"
	if busyTime {
		unit = "GPU-busy share"
	}
	note := fmt.Sprintf("budget %s = %.4g ms at %.4g req/s (rho %.3f): control limits %d/%d mixed %.3f, mean latency %.4g ms (ad-hoc %.4g), power %.4g %s, w2 %.4g, %d solves",
		budget, c.BudgetMs, 1000*m.LambdaPerMs, m.Rho(), c.First.Limit, c.Second.Limit, c.Mix, c.LatencyMs, c.AdhocLatencyMs, c.PowerW, unit, c.W2, c.Solves)
	if !c.Binding {
		note += "; the budget does not bind"
	}
	note += spreadNote(m)
	if busyTime {
		note += "; no energy meter: energy taken proportional to GPU busy time, the budget maximises requests per GPU-second"
	}
	if c.Delta >= smdp.DeltaAccept {
		note += fmt.Sprintf("; overflow share %.2g above %g: approximate", c.Delta, smdp.DeltaAccept)
	}
	return BudgetRule{
		first:  Limit{Policy: NameBudget, Limit: c.First.Limit, MaxWait: wait, Note: note},
		second: Limit{Policy: NameBudget, Limit: c.Second.Limit, MaxWait: wait, Note: note},
		mix:    c.Mix, seed: p.Seed, constrained: c, model: m,
	}
}
