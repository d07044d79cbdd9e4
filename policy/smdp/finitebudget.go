package smdp

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
)

// FinitePoint is one deterministic policy of the closed loop and its
// evaluation.
type FinitePoint struct {
	Policy []int
	FiniteEvaluation
}

// FiniteConstrained is the least energy per request with mean latency at
// most a budget, over the stationary (randomised) policies of the closed
// loop.
type FiniteConstrained struct {
	// BudgetMs is the latency bound; Adhoc is work-conserving batching
	// (control limit 1) in the same loop, which relative budgets scale.
	BudgetMs float64
	Adhoc    FiniteEvaluation
	// W2 is the Lagrange multiplier (ms per mJ/request) at which the
	// search's two hull neighbours are both optimal for L + W2*E.
	W2 float64
	// First meets the budget, Second exceeds it with less energy per
	// request. When the budget binds they differ in exactly one state,
	// MixState, where the optimum follows Second with probability Mix;
	// when it does not bind Second equals First, MixState is -1, Mix 0.
	// (If the one-state walk cannot be used, see SolveFiniteBudget,
	// MixState is -1 and Mix applies in every state where they differ.)
	First, Second FinitePoint
	MixState      int
	Mix           float64
	// Share is the per-state probability of following Second, as
	// EvaluateFiniteRandomized takes it.
	Share []float64
	// FiniteEvaluation is the exact performance of the mixed policy.
	FiniteEvaluation
	// Binding reports whether the budget is met with equality.
	Binding bool
	// Solves counts SolveFinite calls of the Lagrangian search.
	Solves int
}

// SolveFiniteBudget finds the policy with the least energy per request
// whose mean latency is at most the budget (relative budgets are factors
// of ad-hoc's mean latency in the same closed loop).
//
// Lagrangian: min_pi L(pi) + w2*E(pi) is SolveFinite. As in SolveBudget
// the search keeps First (feasible) and Second (over the budget, less
// energy), both vertices of the lower convex hull of (L, E), and solves at
// the weight where their lines cross, w = (L2 - L1)/(E1 - E2): if nothing
// beats the line there they are neighbours and w is the multiplier,
// otherwise the new optimum is a vertex between them and replaces the one
// on its side of the budget.
//
// Mix. Neighbouring tables may differ in several states. Switching them
// one state at a time from First to Second gives a path of tables whose
// latency goes from <= budget to > budget; bisection finds two adjacent
// ones on each side, and those differ in one state d. Mixing in d alone
// is exact: every decision in d starts a cycle to the next decision in d
// whose cost, served count and length are those of whichever table's
// action was taken, so with Second taken with probability p the mean
// latency is ((1-p)*A1 + p*A2) / ((1-p)*S1 + p*S2) (A area, S served per
// cycle), linear-fractional in p. One evaluation at p = 1/2 gives S2/S1
// and the p meeting the budget in closed form; the result is then
// evaluated exactly. If an intermediate table has two recurrent classes
// (the walk cannot be priced), the two neighbours are mixed with one p in
// all their differing states instead, found by bisection.
//
// SolveFiniteBudget stays one function, as SolveBudget does: the search the
// paragraphs above describe, step by step.
func SolveFiniteBudget(ctx context.Context, m Model, p Population, b Budget) (FiniteConstrained, error) {
	if err := validateFinite(m, p); err != nil {
		return FiniteConstrained{}, err
	}
	if !(m.BetaMJ > 0 || m.Zeta0MJ > 0) {
		return FiniteConstrained{}, errors.New("latency budget: the model has no energy line zeta(b); energy cannot be traded for latency")
	}
	if !(b.Factor >= 1 || (b.Factor == 0 && b.AbsoluteMs > 0)) || math.IsInf(b.Factor, 0) || math.IsInf(b.AbsoluteMs, 0) {
		return FiniteConstrained{}, fmt.Errorf("latency budget %+v: want a factor >= 1 or an absolute bound > 0 ms", b)
	}
	c := newFiniteChain(m, p)
	adhocPol := FiniteAdHoc(m, p)
	adhoc, err := c.evaluate(adhocPol, adhocPol, nil)
	if err != nil {
		return FiniteConstrained{}, fmt.Errorf("evaluating ad-hoc: %w", err)
	}
	out := FiniteConstrained{BudgetMs: b.LimitMs(adhoc.LatencyMs), Adhoc: adhoc, MixState: -1}
	budget := out.BudgetMs
	feasible := func(pt FinitePoint) bool { return pt.LatencyMs <= budget }
	cheaper := func(a, b FinitePoint) bool {
		return a.EnergyPerRequestMJ < b.EnergyPerRequestMJ*(1-powerTol)
	}
	optimum := func(w2 float64) (FinitePoint, float64, error) {
		sol, err := c.solve(ctx, w2, adhocPol)
		if err != nil {
			return FinitePoint{}, 0, fmt.Errorf("latency budget: solving at w2 = %.4g: %w", w2, err)
		}
		out.Solves++
		return FinitePoint{Policy: sol.Policy, FiniteEvaluation: sol.FiniteEvaluation}, sol.Objective, nil
	}

	lo := FinitePoint{Policy: adhocPol, FiniteEvaluation: adhoc}
	if !feasible(lo) {
		if lo, _, err = optimum(0); err != nil {
			return FiniteConstrained{}, err
		}
	}
	if !feasible(lo) {
		return FiniteConstrained{}, fmt.Errorf("%w: the budget %.4g ms is below %.4g ms, the mean latency of the fastest policy for %d clients",
			ErrBudgetInfeasible, budget, lo.LatencyMs, p.Clients)
	}
	var hi FinitePoint
	found := false
	wLo := 0.0
	for w := 1.0 / 64; !found && w <= maxBudgetW2; w *= 4 {
		pt, _, err := optimum(w)
		if err != nil {
			return FiniteConstrained{}, err
		}
		switch {
		case !feasible(pt) && cheaper(pt, lo):
			hi, found = pt, true
		case feasible(pt) && cheaper(pt, lo):
			lo, wLo = pt, w
		}
	}
	if !found {
		// The least-energy policy meets the budget.
		out.W2, out.First, out.Second = wLo, lo, lo
		out.Share = make([]float64, len(lo.Policy))
		out.FiniteEvaluation = lo.FiniteEvaluation
		return out, nil
	}
	for range maxBudgetSteps {
		if !cheaper(hi, lo) {
			break
		}
		w := (hi.LatencyMs - lo.LatencyMs) / (lo.EnergyPerRequestMJ - hi.EnergyPerRequestMJ)
		pt, v, err := optimum(w)
		if err != nil {
			return FiniteConstrained{}, err
		}
		out.W2 = w
		line := lo.LatencyMs + w*lo.EnergyPerRequestMJ
		if !(v < line-1e-9*math.Abs(line)) {
			break // nothing below the segment: lo and hi are neighbours
		}
		if feasible(pt) {
			lo = pt
		} else {
			hi = pt
		}
	}
	out.Binding = true
	if err := out.mix(c, lo, hi); err != nil {
		return FiniteConstrained{}, err
	}
	return out, nil
}

// mix narrows lo and hi to adjacent tables on the one-state walk and mixes
// them to meet the budget (see SolveFiniteBudget): in their one differing
// state when the walk can be priced, else with one share in every state
// where lo and hi differ.
func (out *FiniteConstrained) mix(c *finiteChain, lo, hi FinitePoint) error {
	var diff []int
	for q := range lo.Policy {
		if lo.Policy[q] != hi.Policy[q] {
			diff = append(diff, q)
		}
	}
	if out.mixOneState(c, lo, hi, diff) {
		return nil
	}
	return out.mixAll(c, lo, hi, diff)
}

// mixOneState bisects the walk from lo to hi, switching the states diff
// one at a time, for two adjacent tables on either side of the budget,
// and mixes them in their one differing state with the share that meets
// the budget exactly. It reports false when a table on the walk cannot be
// priced or the mixed table misses the budget.
func (out *FiniteConstrained) mixOneState(c *finiteChain, lo, hi FinitePoint, diff []int) bool {
	step := func(k int) []int { // hi's actions in the first k differing states
		pol := slices.Clone(lo.Policy)
		for _, q := range diff[:k] {
			pol[q] = hi.Policy[q]
		}
		return pol
	}
	a, b := 0, len(diff)
	first, second := lo, hi
	for b-a > 1 {
		mid := (a + b) / 2
		pol := step(mid)
		ev, err := c.evaluate(pol, pol, nil)
		if err != nil {
			return false
		}
		if ev.LatencyMs <= out.BudgetMs {
			a, first = mid, FinitePoint{Policy: pol, FiniteEvaluation: ev}
		} else {
			b, second = mid, FinitePoint{Policy: pol, FiniteEvaluation: ev}
		}
	}
	d := diff[a]
	share := make([]float64, len(lo.Policy))
	at := func(p float64) (FiniteEvaluation, error) {
		share[d] = p
		return c.evaluate(first.Policy, second.Policy, share)
	}
	half, err := at(0.5)
	if err != nil {
		return false
	}
	l1, l2, B := first.LatencyMs, second.LatencyMs, out.BudgetMs
	// L(1/2) = (L1 + r*L2)/(1 + r) with r = S2/S1.
	r := (l1 - half.LatencyMs) / (half.LatencyMs - l2)
	p := (l1 - B) / ((l1 - B) - r*(l2-B))
	ev, err := at(min(max(p, 0), 1))
	if err != nil || math.Abs(ev.LatencyMs-B) > 1e-9*B {
		return false
	}
	out.First, out.Second, out.MixState, out.Mix, out.Share = first, second, d, share[d], share
	out.FiniteEvaluation = ev
	return true
}

// mixAll mixes lo and hi with one share in every state of diff, found by
// bisection so that the mean latency meets the budget.
func (out *FiniteConstrained) mixAll(c *finiteChain, lo, hi FinitePoint, diff []int) error {
	share := make([]float64, len(lo.Policy))
	at := func(p float64) (FiniteEvaluation, error) {
		for _, q := range diff {
			share[q] = p
		}
		return c.evaluate(lo.Policy, hi.Policy, share)
	}
	pa, pb := 0.0, 1.0
	for range 60 {
		mid := (pa + pb) / 2
		ev, err := at(mid)
		if err != nil {
			return fmt.Errorf("latency budget: mixing the two policies: %w", err)
		}
		if ev.LatencyMs > out.BudgetMs {
			pb = mid
		} else {
			pa = mid
		}
	}
	ev, err := at(pa)
	if err != nil {
		return fmt.Errorf("latency budget: mixing the two policies: %w", err)
	}
	out.First, out.Second, out.MixState, out.Mix, out.Share = lo, hi, -1, pa, share
	out.FiniteEvaluation = ev
	return nil
}
