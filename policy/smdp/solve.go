package smdp

import (
	"context"
	"fmt"
	"math"
)

// Solve computes an optimal policy of the finite model by relative value
// iteration on the uniformized chain (ALGORITHMS.md section 3):
//
//	J(s) <- min_a { c(s,a)/y(s,a) + J(s) + eta/y(s,a) * (sum_j m(j|s,a) J(j) - J(s)) } - J(0)
//
// which is the section's update with m~ written out. It stops when
// span(J_new - J) < Epsilon or after IterMax sweeps, then evaluates the
// greedy policy exactly (Evaluate), so G is the policy's true average cost,
// not the iteration's estimate. Ties between actions go to the smaller
// batch. The context is checked between sweeps.
//
// Solve stays one function: it is the iteration written out above, sweep by
// sweep, and reads best beside it.
func Solve(ctx context.Context, m Model, o Options) (Solution, error) {
	if err := m.Validate(); err != nil {
		return Solution{}, fmt.Errorf("smdp model: %w", err)
	}
	if err := o.validate(m); err != nil {
		return Solution{}, fmt.Errorf("smdp options: %w", err)
	}
	k := newKernel(m, o)
	eta := k.eta()

	// Per-action constants. Serving a at effective count n costs
	// w1*(n/lambda + (tau+theta)/2) + w2*zeta/tau per ms (costParts) and
	// waiting w1*n/lambda, so c/y = hold(n) + fixed(a) with
	// hold(n) = w1*n/lambda (+ Co in S_o).
	fixed := make([]float64, m.MaxBatch+1)
	step := make([]float64, m.MaxBatch+1) // eta / y
	for a := 1; a <= m.MaxBatch; a++ {
		bt := &k.b[a]
		fixed[a] = o.W1*(bt.tau+k.theta)/2 + o.W2*bt.zeta/bt.tau
		step[a] = eta / bt.tau
	}
	waitStep := eta * k.lambda
	perCount := o.W1 / k.lambda

	ex := newExpecter(k)

	J := make([]float64, k.n)
	next := make([]float64, k.n)
	best := make([]float64, k.n) // per state: best action's part of Q
	policy := make([]int, k.n)
	sol := Solution{Eta: eta}
	for it := 1; it <= o.IterMax; it++ {
		if it%64 == 0 {
			if err := ctx.Err(); err != nil {
				return Solution{}, fmt.Errorf("smdp solve interrupted after %d sweeps: %w", it-1, err)
			}
		}
		// Q(s,a) = hold(s) + J(s) + [fixed(a) + eta/y(a) * (E_a(s-a) - J(s))];
		// only the bracket depends on a, so best holds its minimum.
		for s := range best {
			up := k.so // waiting moves to s+1; S_o stays in S_o
			if s < o.SMax {
				up = s + 1
			}
			best[s], policy[s] = waitStep*(J[up]-J[s]), 0
		}
		jo := J[k.so]
		ex.each(J, func(a int, e []float64) {
			for base, eb := range e[:o.SMax-a+1] {
				s := base + a
				if q := fixed[a] + step[a]*(eb-J[s]); q < best[s] {
					best[s], policy[s] = q, a
				}
			}
			// S_o moves like state SMax: same expectation, its own J.
			if q := fixed[a] + step[a]*(e[o.SMax-a]-jo); q < best[k.so] {
				best[k.so], policy[k.so] = q, a
			}
		})
		for s := range next {
			hold := perCount * float64(k.effective(s))
			if s == k.so {
				hold += o.Co
			}
			next[s] = hold + J[s] + best[s]
		}
		lo, hi := math.Inf(1), math.Inf(-1)
		for s := range next {
			d := next[s] - J[s]
			lo, hi = min(lo, d), max(hi, d)
		}
		ref := next[0]
		for s := range next {
			J[s] = next[s] - ref
		}
		sol.Iterations, sol.GLower, sol.GUpper = it, lo, hi
		if hi-lo < o.Epsilon {
			sol.Converged = true
			break
		}
		if math.IsNaN(lo) || math.IsInf(hi, 0) {
			return Solution{}, fmt.Errorf("smdp solve: value iteration diverged at sweep %d (span %v)", it, hi-lo)
		}
	}
	ev, err := k.evaluate(policy)
	if err != nil {
		return Solution{}, fmt.Errorf("smdp solve: evaluating the optimal policy: %w", err)
	}
	sol.Evaluation = ev
	sol.Policy = policy
	sol.ControlLimit = ControlLimitOf(policy)
	return sol, nil
}

// expecter computes, for every serving action a, the expected next value
// after serving a from each base = (requests held) - a:
//
//	E_a(base) = sum_k p_k(a) Jx(base+k),  Jx(j) = J(j) for j <= SMax, J(S_o) beyond,
//
// since K ~ Poisson(lambda*tau(a)) arrivals join the base and every count
// past SMax is S_o. Because tau(a+1) = tau(a) + alpha, Poisson(lambda*tau(a+1))
// is Poisson(lambda*tau(a)) convolved with q = Poisson(lambda*alpha), so
// E_{a+1}(base) = sum_i q_i E_a(base+i), with E_a(base) = J(S_o) past SMax.
// Each action then costs one short convolution (lambda*alpha < 1 keeps q
// within about 15 terms) instead of a sum over its own arrival
// distribution, which widens with a: this is where Solve spends its time.
//
// A batch time that varies (Model.ServiceSCV) keeps the structure: its
// variance grows in proportion to its mean, so the arrivals during tau(a+1)
// are those during tau(a) plus an independent negative binomial count of
// mean lambda*alpha (kernel.disp), q's distribution.
type expecter struct {
	sMax     int
	maxBatch int
	lo       int       // first term of the a = 1 window
	first    []float64 // the arrivals during tau(1) over its window
	q        []float64 // those during alpha, upper tail below windowCut cut
	cur, nxt []float64 // E_a and scratch, over bases 0..SMax plus padding
}

func newExpecter(k *kernel) *expecter {
	p1 := &k.b[1]
	q, _ := arrivals(k.lambda*k.m.AlphaMs, k.disp, 0)
	for up := 0.0; len(q) > 1 && up+q[len(q)-1] < windowCut; q = q[:len(q)-1] {
		up += q[len(q)-1]
	}
	size := k.o.SMax + 1 + max(len(q), p1.hi+1)
	return &expecter{
		sMax: k.o.SMax, maxBatch: k.m.MaxBatch,
		lo: p1.lo, first: p1.pmf[p1.lo : p1.hi+1], q: q,
		cur: make([]float64, size), nxt: make([]float64, size),
	}
}

// each calls fn(a, e) for a = 1..B_max in order, where e[base] = E_a(base)
// for base = 0..SMax. e is valid only during the call.
func (x *expecter) each(J []float64, fn func(a int, e []float64)) {
	n := x.sMax + 1
	jo := J[n] // S_o
	// nxt = Jx, then cur = E_1.
	copy(x.nxt, J[:n])
	fill(x.nxt[n:], jo)
	e := x.cur[:n]
	clear(e)
	for i, p := range x.first {
		axpy(p, x.nxt[x.lo+i:], e)
	}
	fill(x.cur[n:], jo)
	for a := 1; ; a++ {
		fn(a, x.cur[:n])
		if a == x.maxBatch {
			return
		}
		e := x.nxt[:n]
		clear(e)
		for i, qi := range x.q {
			axpy(qi, x.cur[i:], e)
		}
		fill(x.nxt[n:], jo)
		x.cur, x.nxt = x.nxt, x.cur
	}
}

func fill(x []float64, v float64) {
	for i := range x {
		x[i] = v
	}
}

// axpy adds p*x to y (len(x) >= len(y)). This loop is where Solve and the
// exact evaluation spend their time; unrolled by four, its iterations are
// independent.
//
// It is left out of the race detector's instrumentation (go:norace): it
// touches only the two slices it is handed, from one goroutine, and
// instrumented it makes every solve 10 to 20 times slower, which under
// `go test -race` turned the comparison tests' minutes into the 10-minute
// test timeout. Its callers stay instrumented.
//
//go:norace
func axpy(p float64, x, y []float64) {
	x = x[:len(y)]
	i := 0
	for ; i+4 <= len(y); i += 4 {
		y[i] += p * x[i]
		y[i+1] += p * x[i+1]
		y[i+2] += p * x[i+2]
		y[i+3] += p * x[i+3]
	}
	for ; i < len(y); i++ {
		y[i] += p * x[i]
	}
}
