package smdp

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Budget is a bound on mean latency: relative to work-conserving batching
// (Factor > 0: at most Factor times the mean latency of the control limit
// 1, ad-hoc, on the same model) or absolute (Factor 0, AbsoluteMs > 0).
type Budget struct {
	Factor     float64
	AbsoluteMs float64
}

// ParseBudget reads a budget as users write it: "1.10x" (relative to
// ad-hoc's mean latency, >= 1) or a duration, "4ms", "2.5ms", "800us".
func ParseBudget(s string) (Budget, error) {
	t := strings.TrimSpace(s)
	if f, ok := strings.CutSuffix(strings.ToLower(t), "x"); ok {
		v, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || !(v >= 1) || math.IsInf(v, 0) {
			return Budget{}, fmt.Errorf("latency budget %q: a relative budget is a number >= 1 followed by x (1.10x: 10%% above ad-hoc's mean latency)", s)
		}
		return Budget{Factor: v}, nil
	}
	d, err := time.ParseDuration(t)
	if err != nil || d <= 0 {
		return Budget{}, fmt.Errorf("latency budget %q: want a factor of ad-hoc's mean latency (1.10x) or a duration > 0 (4ms)", s)
	}
	return Budget{AbsoluteMs: float64(d) / float64(time.Millisecond)}, nil
}

// Relative reports whether the budget is a factor of ad-hoc's latency.
func (b Budget) Relative() bool { return b.Factor > 0 }

// IsZero reports whether no budget is set.
func (b Budget) IsZero() bool { return b == Budget{} }

// LimitMs is the mean-latency bound in ms given ad-hoc's mean latency.
func (b Budget) LimitMs(adhocMs float64) float64 {
	if b.Relative() {
		return b.Factor * adhocMs
	}
	return b.AbsoluteMs
}

// String writes the budget as ParseBudget reads it.
func (b Budget) String() string {
	if b.Relative() {
		return strconv.FormatFloat(b.Factor, 'f', -1, 64) + "x"
	}
	return (time.Duration(b.AbsoluteMs * float64(time.Millisecond))).String()
}

// Point is one pure control-limit policy (ControlLimit) and its exact
// evaluation.
type Point struct {
	Limit int
	Evaluation
}

// Constrained is the optimum of "minimise mean power subject to mean
// latency <= budget" over the stationary policies of the model, found
// through the Lagrangian (see SolveBudget).
type Constrained struct {
	// BudgetMs is the bound the optimum meets; AdhocLatencyMs the mean
	// latency of ad-hoc batching (limit 1) it is relative to, and
	// AdhocPowerW its power (the same arrivals served, so the ratio of
	// powers is the ratio of energies per request).
	BudgetMs       float64
	AdhocLatencyMs float64
	AdhocPowerW    float64
	// W2 is the Lagrange multiplier: the weight of power (ms per W, with
	// w1 = 1) at which First and Second are both optimal. 0 when the
	// budget does not bind at w2 = 0 (cannot happen above ad-hoc) or when
	// it never binds (Mix 0, First alone).
	W2 float64
	// First meets the budget, Second exceeds it with less power; when the
	// budget does not bind, Second equals First and Mix is 0.
	First, Second Point
	// Mix is the probability with which a decision in a state where the
	// two policies differ follows Second (serving is deferred to Second's
	// limit); the rest of the time it follows First.
	Mix float64
	// TimeShare is Second's weight theta on the segment: the mixed
	// policy's latency and power are (1-theta)*First + theta*Second.
	TimeShare float64
	// Evaluation is the exact performance of the mixed policy.
	Evaluation
	// Binding reports whether the budget is met with equality (the budget
	// lies between the least latency and the latency of the least power).
	Binding bool
	// Solves counts the SMDP solves of the Lagrangian search.
	Solves int
}

// Randomized returns the two tables and the per-state share of the mixed
// policy, as evaluateRandomized takes them.
func (c Constrained) Randomized(m Model, sMax int) (first, second []int, share []float64) {
	first = ControlLimit(m, sMax, c.First.Limit)
	second = ControlLimit(m, sMax, c.Second.Limit)
	share = make([]float64, len(first))
	for s := range first {
		if first[s] != second[s] {
			share[s] = c.Mix
		}
	}
	return first, second, share
}

// ErrBudgetInfeasible is wrapped when no policy meets the budget.
var ErrBudgetInfeasible = errors.New("latency budget below the least achievable mean latency")

// SolveBudget finds the policy with the least mean power whose mean latency
// is at most the budget (ALGORITHMS.md, "Latency budget").
//
// The constrained problem min P(pi) s.t. L(pi) <= B has the Lagrangian
// min_pi L(pi) + w2*P(pi), which is the existing weighted problem with
// w1 = 1 (Solve). Its value is concave and piecewise linear in w2; between
// breakpoints one policy is optimal, and as w2 grows the optimal policy's
// latency rises and its power falls. The search keeps two policies, First
// feasible and Second infeasible, and asks the solver at the weight where
// their Lagrangian lines cross, w = (L2 - L1)/(P1 - P2): if the optimum
// there is one of them, they are neighbours on the lower convex hull of
// (latency, power) and w is the multiplier; otherwise the new policy is a
// hull vertex between them and replaces the one on its side of the budget.
// Each step finds a new vertex, so the search ends after at most as many
// solves as there are control limits (in practice 3 to 8).
//
// The solved tables are taken as their control limits (ControlLimit: the
// package tests find those within 0.1% of the tables), which makes the two
// neighbours differ exactly in the states First.Limit..Second.Limit-1. The
// mix randomises there: the result meets the budget with equality and,
// for adjacent limits, lies exactly on the hull segment (see Mix).
//
// The model must have an energy line (BetaMJ or Zeta0MJ > 0); sMax is the
// state bound of the finite model (0: DefaultSMax or 2*B_max, whichever is
// larger).
//
// SolveBudget stays one function: it is the search the paragraphs above
// describe, step by step, and reads best beside them.
func SolveBudget(ctx context.Context, m Model, b Budget, sMax int) (Constrained, error) {
	if err := m.Validate(); err != nil {
		return Constrained{}, fmt.Errorf("smdp model: %w", err)
	}
	if !(m.BetaMJ > 0 || m.Zeta0MJ > 0) {
		return Constrained{}, errors.New("latency budget: the model has no energy line zeta(b); power cannot be traded for latency")
	}
	if !(b.Factor >= 1 || (b.Factor == 0 && b.AbsoluteMs > 0)) || math.IsInf(b.Factor, 0) || math.IsInf(b.AbsoluteMs, 0) {
		return Constrained{}, fmt.Errorf("latency budget %+v: want a factor >= 1 or an absolute bound > 0 ms", b)
	}
	if sMax == 0 {
		sMax = max(DefaultSMax, 2*m.MaxBatch)
	}
	eval, err := NewEvaluator(m, Options{W1: 1, Epsilon: DefaultEpsilon, SMax: sMax, IterMax: DefaultIterMax})
	if err != nil {
		return Constrained{}, err
	}
	s := &budgetSearch{ctx: ctx, m: m, sMax: sMax, eval: eval, points: map[int]Point{}}
	adhoc, err := s.point(1)
	if err != nil {
		return Constrained{}, err
	}
	c := Constrained{AdhocLatencyMs: adhoc.LatencyMs, AdhocPowerW: adhoc.PowerW, BudgetMs: b.LimitMs(adhoc.LatencyMs)}
	budget := c.BudgetMs
	feasible := func(p Point) bool { return p.LatencyMs <= budget }

	// First: ad-hoc when it meets the budget (any relative budget), else
	// the least-latency policy (w2 = 0). Ad-hoc need not be on the hull
	// (at high load a small limit can be faster); the crossing steps below
	// replace it by the hull vertex if not.
	lo, wLo := adhoc, 0.0
	if !feasible(lo) {
		if lo, err = s.optimum(0); err != nil {
			return Constrained{}, err
		}
	}
	if !feasible(lo) {
		return Constrained{}, fmt.Errorf("%w: the budget %.4g ms is below %.4g ms, the mean latency of the fastest policy at this load",
			ErrBudgetInfeasible, budget, lo.LatencyMs)
	}
	// Second: the control limits bracket the budget (latency grows with
	// the limit past the fastest one), which gives the crossing steps below
	// a start that is usually already the pair of neighbours; failing that
	// (a budget above every limit's latency), raise w2 until the optimum
	// exceeds the budget.
	hi, found, err := s.bracket(&lo, feasible)
	if err != nil {
		return Constrained{}, err
	}
	for w := 1.0; !found && w <= maxBudgetW2; w *= 4 {
		p, err := s.optimum(w)
		if err != nil {
			return Constrained{}, err
		}
		if !feasible(p) && cheaper(p, lo) {
			hi, found = p, true
		}
		if feasible(p) && cheaper(p, lo) {
			lo, wLo = p, w
		}
	}
	if !found {
		// The budget never binds: the least-power policy meets it.
		c.W2, c.First, c.Second = wLo, lo, lo
		c.Evaluation, c.Solves = lo.Evaluation, s.solves
		return c, nil
	}
	for range maxBudgetSteps {
		if lo.Limit == hi.Limit || !cheaper(hi, lo) {
			break // solver noise: hi saves nothing over lo
		}
		w := (hi.LatencyMs - lo.LatencyMs) / (lo.PowerW - hi.PowerW)
		p, err := s.optimum(w)
		if err != nil {
			return Constrained{}, err
		}
		c.W2 = w
		if p.Limit == lo.Limit || p.Limit == hi.Limit {
			break
		}
		// A vertex strictly below the segment at w, or solver noise.
		here := p.LatencyMs + w*p.PowerW
		line := lo.LatencyMs + w*lo.PowerW
		if !(here < line-1e-9*math.Abs(line)) {
			break
		}
		if feasible(p) {
			lo = p
		} else {
			hi = p
		}
	}
	c.First, c.Second, c.Solves = lo, hi, s.solves
	c.Binding = true
	if err := c.mix(m, sMax, eval); err != nil {
		return Constrained{}, err
	}
	return c, nil
}

// Bounds of the Lagrangian search.
const (
	// maxBudgetW2 is the largest weight tried when looking for a policy
	// over the budget: at 1e5 ms per W one watt outweighs any latency the
	// finite model can hold, so the optimum is the least-power policy.
	maxBudgetW2 = 1e5
	// maxBudgetSteps caps the crossing steps; each finds a new hull vertex.
	maxBudgetSteps = 40
)

type budgetSearch struct {
	ctx    context.Context
	m      Model
	sMax   int
	eval   *Evaluator
	points map[int]Point
	solves int
}

// point evaluates the pure control-limit policy with the given limit.
func (s *budgetSearch) point(limit int) (Point, error) {
	if p, ok := s.points[limit]; ok {
		return p, nil
	}
	ev, err := s.eval.Evaluate(ControlLimit(s.m, s.sMax, limit))
	if err != nil {
		return Point{}, fmt.Errorf("evaluating control limit %d: %w", limit, err)
	}
	p := Point{Limit: limit, Evaluation: ev}
	s.points[limit] = p
	return p, nil
}

// bracket walks the control limits up from lo (feasible), doubling the
// step, to the first infeasible one, then bisects to the adjacent pair:
// lo becomes the largest feasible limit found and the next one is
// returned. Each step is one exact evaluation, far cheaper than a solve.
// found is false when every limit up to B_max+1 meets the budget.
func (s *budgetSearch) bracket(lo *Point, feasible func(Point) bool) (hi Point, found bool, err error) {
	top := s.m.MaxBatch + 1
	a := *lo
	for step := 1; ; step *= 2 {
		l := min(a.Limit+step, top)
		if l <= a.Limit {
			return Point{}, false, nil
		}
		p, err := s.point(l)
		if err != nil {
			return Point{}, false, err
		}
		if !feasible(p) {
			hi = p
			break
		}
		a = p
	}
	for hi.Limit-a.Limit > 1 {
		p, err := s.point((a.Limit + hi.Limit) / 2)
		if err != nil {
			return Point{}, false, err
		}
		if feasible(p) {
			a = p
		} else {
			hi = p
		}
	}
	if cheaper(hi, a) && a.PowerW <= lo.PowerW {
		*lo = a
		return hi, true, nil
	}
	if a.PowerW <= lo.PowerW {
		// Nothing past a saves power: the budget does not bind, and a
		// (as fast as any limit that draws its power) is the answer.
		*lo = a
	}
	return Point{}, false, nil
}

// powerTol is the relative power saving below which two policies draw the
// same power. Past the load where every batch is B_max, limits B_max and
// B_max+1 draw the same power to 14 digits, and one of them read as
// cheaper in the last digit made the search mix in the limit above B_max,
// which holds a full batch for a row it cannot take: latency for nothing
// (live at rho 0.93: "control limits 8/9" with B_max 8, docs/ALGORITHMS.md).
const powerTol = 1e-9

// cheaper reports whether p draws less power than q by more than powerTol.
func cheaper(p, q Point) bool { return p.PowerW < q.PowerW*(1-powerTol) }

// optimum solves the weighted problem at w2 and returns its control limit
// as a pure control-limit policy.
func (s *budgetSearch) optimum(w2 float64) (Point, error) {
	co, err := DefaultCo(s.m, 1, w2, s.sMax)
	if err != nil {
		return Point{}, err
	}
	sol, err := Solve(s.ctx, s.m, Options{W1: 1, W2: w2, Co: co, Epsilon: DefaultEpsilon, SMax: s.sMax, IterMax: DefaultIterMax})
	if err != nil {
		return Point{}, fmt.Errorf("latency budget: solving at w2 = %.4g: %w", w2, err)
	}
	s.solves++
	return s.point(min(max(sol.ControlLimit, 1), s.sMax))
}

// mix sets Mix, TimeShare and Evaluation so that the mixed policy's mean
// latency equals the budget.
//
// Why randomising per decision is exact: let the two policies differ in
// one state d (adjacent limits, L and L+1, differ only in state L). Every
// decision in d starts a cycle that ends at the next decision in d; in
// between the chain follows the action taken in d and then the common
// actions, so a cycle started with Second's action has the cost C2 and
// length T2 of Second's own cycles, likewise C1, T1 for First. With Second
// chosen with probability p, renewal-reward gives every long-run average
// as (p*C2 + (1-p)*C1) / (p*T2 + (1-p)*T1): latency and power share the
// denominator, so the point is (1-theta)*First + theta*Second with
// theta = p*T2 / (p*T2 + (1-p)*T1), on the segment between them. theta is
// a linear-fractional function of p, so one evaluation (at p = 1/2) gives
// T2/T1 and the p that hits the budget in closed form; the exact
// evaluation of the randomised chain then confirms it.
//
// For limits further apart (First.Limit+1 < Second.Limit, when the limits
// between them are not on the hull) the policies differ in several states
// and the same p is used in each; the point then lies on a curve close to
// the segment, and p is found by bisection on exact evaluations.
func (c *Constrained) mix(m Model, sMax int, eval *Evaluator) error {
	lo, hi := c.First, c.Second
	target := (c.BudgetMs - lo.LatencyMs) / (hi.LatencyMs - lo.LatencyMs)
	at := func(p float64) (Evaluation, error) {
		c.Mix = p
		first, second, share := c.Randomized(m, sMax)
		return eval.k.evaluateRandomized(first, second, share)
	}
	theta := func(ev Evaluation) float64 {
		return (ev.LatencyMs - lo.LatencyMs) / (hi.LatencyMs - lo.LatencyMs)
	}
	var p float64
	if hi.Limit == lo.Limit+1 || lo.Limit == hi.Limit+1 {
		half, err := at(0.5)
		if err != nil {
			return err
		}
		th := theta(half)
		// theta(1/2) = T2/(T1+T2), so T2/T1 = th/(1-th).
		r := th / (1 - th)
		p = target / (r*(1-target) + target)
	} else {
		a, b := 0.0, 1.0
		for range 60 {
			mid := (a + b) / 2
			ev, err := at(mid)
			if err != nil {
				return err
			}
			if ev.LatencyMs > c.BudgetMs {
				b = mid
			} else {
				a = mid
			}
		}
		p = a
	}
	ev, err := at(min(max(p, 0), 1))
	if err != nil {
		return err
	}
	c.Evaluation = ev
	c.TimeShare = theta(ev)
	return nil
}

// Frontier returns the lower convex hull of the pure control-limit
// policies 1..B_max+1 in the (mean latency, mean power) plane, fastest
// first: the vertices of the constrained optimum's curve. For any budget
// between two adjacent vertices the constrained optimum is their mix, on
// the segment between them, so the curve is this polyline (SolveBudget
// lands on it; the tests check that). Each vertex costs one exact
// evaluation, no solve.
func Frontier(m Model, sMax int) ([]Point, error) {
	if sMax == 0 {
		sMax = max(DefaultSMax, 2*m.MaxBatch)
	}
	eval, err := NewEvaluator(m, Options{W1: 1, Epsilon: DefaultEpsilon, SMax: sMax, IterMax: DefaultIterMax})
	if err != nil {
		return nil, err
	}
	pts := make([]Point, 0, m.MaxBatch+1)
	for l := 1; l <= m.MaxBatch+1; l++ {
		ev, err := eval.Evaluate(ControlLimit(m, sMax, l))
		if err != nil {
			return nil, fmt.Errorf("evaluating control limit %d: %w", l, err)
		}
		pts = append(pts, Point{Limit: l, Evaluation: ev})
	}
	return lowerHull(pts), nil
}

// lowerHull keeps the points on the lower-left convex hull: sorted by
// latency, each with less power than every faster one, and no point above
// the segment between its neighbours.
func lowerHull(pts []Point) []Point {
	sorted := append([]Point(nil), pts...)
	slices.SortStableFunc(sorted, func(a, b Point) int { return cmp.Compare(a.LatencyMs, b.LatencyMs) })
	var out []Point
	for _, p := range sorted {
		if len(out) > 0 && !(p.PowerW < out[len(out)-1].PowerW) {
			continue // slower and no cheaper: dominated
		}
		// Pop while the last point lies on or above the segment from the
		// one before it to p.
		for len(out) >= 2 {
			a, b := out[len(out)-2], out[len(out)-1]
			cross := (b.LatencyMs-a.LatencyMs)*(p.PowerW-a.PowerW) - (b.PowerW-a.PowerW)*(p.LatencyMs-a.LatencyMs)
			if cross > 0 {
				break // b is below the chord a-p: keep it
			}
			out = out[:len(out)-1]
		}
		out = append(out, p)
	}
	return out
}

// OnFrontier returns the frontier's power at the given mean latency (the
// constrained optimum's), by linear interpolation between vertices; ok is
// false outside the curve's latency range.
func OnFrontier(hull []Point, latencyMs float64) (powerW float64, ok bool) {
	for i := 1; i < len(hull); i++ {
		a, b := hull[i-1], hull[i]
		if latencyMs >= a.LatencyMs && latencyMs <= b.LatencyMs {
			t := (latencyMs - a.LatencyMs) / (b.LatencyMs - a.LatencyMs)
			return a.PowerW + t*(b.PowerW-a.PowerW), true
		}
	}
	if len(hull) > 0 && latencyMs >= hull[len(hull)-1].LatencyMs {
		return hull[len(hull)-1].PowerW, true
	}
	return 0, false
}

// WeightedOptimum returns the frontier vertex that minimises
// latency + w2*power: the weighted optimum within the control-limit class.
func WeightedOptimum(hull []Point, w2 float64) Point {
	best := hull[0]
	for _, p := range hull[1:] {
		if p.LatencyMs+w2*p.PowerW < best.LatencyMs+w2*best.PowerW {
			best = p
		}
	}
	return best
}
