package smdp

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
)

// FiniteSolution is the policy minimising L + W2*E and its evaluation.
type FiniteSolution struct {
	FiniteEvaluation
	W2 float64
	// Objective is LatencyMs + W2*EnergyPerRequestMJ, the optimum.
	Objective float64
	// Policy is the action per state q = 0..N.
	Policy []int
	// ControlLimit is the smallest q that serves; IsControlLimit reports
	// whether Policy is exactly FiniteControlLimit(ControlLimit).
	ControlLimit   int
	IsControlLimit bool
	// Iterations counts the policy-iteration steps.
	Iterations int
}

// SolveFinite finds the deterministic stationary policy minimising mean
// latency + w2 * energy per request (ms + ms/mJ * mJ) in the closed loop,
// exactly (policy iteration on the ratio, see the comment atop finite.go). With
// w2 > 0 the model needs an energy line.
func SolveFinite(ctx context.Context, m Model, p Population, w2 float64) (FiniteSolution, error) {
	if err := validateFinite(m, p); err != nil {
		return FiniteSolution{}, err
	}
	if !(w2 >= 0) || math.IsInf(w2, 0) {
		return FiniteSolution{}, fmt.Errorf("w2 (energy weight) must be a finite number >= 0, got %v", w2)
	}
	if w2 > 0 && !(m.BetaMJ > 0 || m.Zeta0MJ > 0) {
		return FiniteSolution{}, errors.New("w2 > 0 weighs energy, but the model has no energy line zeta(b)")
	}
	c := newFiniteChain(m, p)
	return c.solve(ctx, w2, FiniteAdHoc(m, p))
}

// maxFiniteIterations caps policy iteration; it converges in a handful of
// steps (each strictly improves g or the policy's relative values).
const maxFiniteIterations = 500

func (c *finiteChain) solve(ctx context.Context, w2 float64, start []int) (FiniteSolution, error) {
	policy := slices.Clone(start)
	n := c.states()
	cost := func(q, a int) (float64, float64) {
		_, area, energy, served := c.parts(q, a)
		return area + w2*energy, float64(served)
	}
	for it := 1; it <= maxFiniteIterations; it++ {
		if err := ctx.Err(); err != nil {
			return FiniteSolution{}, fmt.Errorf("finite smdp solve interrupted after %d steps: %w", it-1, err)
		}
		g, h, err := c.relativeValues(policy, cost)
		if err != nil {
			return FiniteSolution{}, fmt.Errorf("finite smdp solve, step %d: %w", it, err)
		}
		scale := math.Abs(g)
		for _, v := range h {
			scale = max(scale, math.Abs(v))
		}
		tol := 1e-11 * (1 + scale)
		q := func(s, a int) float64 {
			cs, ys := cost(s, a)
			v := cs - g*ys
			c.row(s, a, func(j int, p float64) { v += p * h[j] })
			return v
		}
		changed := false
		for s := range n {
			cur := q(s, policy[s])
			lo := 0
			if s == c.n {
				lo = 1 // waiting is impossible with every client queued
			}
			for a := lo; a <= c.maxAction(s); a++ {
				if a == policy[s] {
					continue
				}
				if v := q(s, a); v < cur-tol {
					cur, policy[s], changed = v, a, true
				}
			}
		}
		if !changed {
			ev, err := c.evaluate(policy, policy, nil)
			if err != nil {
				return FiniteSolution{}, fmt.Errorf("finite smdp solve: evaluating the optimum: %w", err)
			}
			limit, ok := FiniteControlLimitOf(c.m, policy)
			return FiniteSolution{
				FiniteEvaluation: ev, W2: w2, Objective: ev.LatencyMs + w2*ev.EnergyPerRequestMJ,
				Policy: policy, ControlLimit: limit, IsControlLimit: ok, Iterations: it,
			}, nil
		}
		if err := c.unichain(policy, cost); err != nil {
			return FiniteSolution{}, fmt.Errorf("finite smdp solve, step %d: %w", it, err)
		}
	}
	return FiniteSolution{}, fmt.Errorf("finite smdp solve: policy iteration did not settle in %d steps", maxFiniteIterations)
}

// relativeValues solves the evaluation equations of a unichain policy,
//
//	h(q) + g*served(q) = c(q) + sum_j P(j|q) h(j),  h(0) = 0,
//
// for the ratio g = E[c]/E[served] and the relative values h. The system
// is nonsingular for a unichain policy that serves: with zero right-hand
// side, weighting by the stationary distribution gives g*E[served] = 0, so
// g = 0 and h is constant, hence 0.
func (c *finiteChain) relativeValues(policy []int, cost func(q, a int) (float64, float64)) (g float64, h []float64, err error) {
	n := c.states()
	A := make([][]float64, n)
	flat := make([]float64, n*n)
	b := make([]float64, n)
	for q := range A {
		A[q] = flat[q*n : (q+1)*n]
		A[q][q] = 1
		c.row(q, policy[q], func(j int, p float64) { A[q][j] -= p })
		// Column 0 carries g instead of h(0) = 0.
		var y float64
		b[q], y = cost(q, policy[q])
		A[q][0] = y
	}
	x, err := solveDense(A, b)
	if err != nil {
		return 0, nil, fmt.Errorf("evaluating the policy: %w", err)
	}
	g = x[0]
	x[0] = 0
	return g, x, nil
}

// solveDense solves A x = b by Gaussian elimination with partial pivoting,
// overwriting A and b.
func solveDense(A [][]float64, b []float64) ([]float64, error) {
	n := len(A)
	for k := range n {
		piv := k
		for i := k + 1; i < n; i++ {
			if math.Abs(A[i][k]) > math.Abs(A[piv][k]) {
				piv = i
			}
		}
		if A[piv][k] == 0 {
			return nil, fmt.Errorf("singular system at column %d (the policy has more than one recurrent class)", k)
		}
		A[k], A[piv] = A[piv], A[k]
		b[k], b[piv] = b[piv], b[k]
		for i := k + 1; i < n; i++ {
			if f := A[i][k] / A[k][k]; f != 0 {
				axpy(-f, A[k][k:], A[i][k:])
				b[i] -= f * b[k]
			}
		}
	}
	x := make([]float64, n)
	for i := n - 1; i >= 0; i-- {
		v := b[i]
		for j := i + 1; j < n; j++ {
			v -= A[i][j] * x[j]
		}
		x[i] = v / A[i][i]
	}
	return x, nil
}

// unichain makes an improved policy unichain, in place. If it has several
// closed classes, each has a ratio no larger than the previous policy's g
// (the improvement inequality averaged over the class), so keeping the
// class with the least ratio keeps policy iteration improving. The states
// outside it are sent towards its lowest state lo: below lo they wait,
// above they serve down to lo (K = 0 always has positive probability), so
// every state reaches the class and the policy is unichain.
func (c *finiteChain) unichain(policy []int, cost func(q, a int) (float64, float64)) error {
	P := c.matrix(policy, policy, nil)
	classes := closedClasses(P)
	if len(classes) <= 1 {
		return nil
	}
	best, bestRatio := -1, math.Inf(1)
	for i, cl := range classes {
		sub := make([][]float64, len(cl))
		for r, s := range cl {
			sub[r] = make([]float64, len(cl))
			for col, t := range cl {
				sub[r][col] = P[s][t]
			}
		}
		pi, err := gthStationary(sub, nil)
		if err != nil {
			return fmt.Errorf("finite policy evaluation: %w", err)
		}
		var num, den float64
		for r, s := range cl {
			cs, ys := cost(s, policy[s])
			num += pi[r] * cs
			den += pi[r] * ys
		}
		if den > 0 && num/den < bestRatio {
			best, bestRatio = i, num/den
		}
	}
	if best < 0 {
		return errors.New("no recurrent class of the improved policy serves")
	}
	in := make([]bool, len(policy))
	for _, s := range classes[best] {
		in[s] = true
	}
	lo := classes[best][0]
	for q := range policy {
		switch {
		case in[q]:
		case q < lo:
			policy[q] = 0
		default:
			policy[q] = min(q-lo, c.m.MaxBatch)
		}
	}
	return nil
}
