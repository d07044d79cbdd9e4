package smdp

// Finite-source (closed-loop) batching.
//
// The Poisson model of the rest of the package has an infinite population:
// requests keep coming at rate lambda whatever the server does. A load
// generator or a fleet of synchronous clients is different: N clients each
// send one request, wait for its answer, think, and send the next, so the
// arrival rate falls as requests queue up and the throughput depends on the
// policy. This file solves that model exactly.
//
// Model. N clients; after its answer each thinks for an exponential time of
// mean Theta (ms), then sends one request (one row). One server instance
// with batch cap B_max serves a batch of a requests in T(a) = m.ServiceMs(a)
// (tau(a) plus the proxy's hold, Model.Extra) and spends zeta(a) =
// m.ZetaMJ(a). Each served request also waits m.Extra.AfterMs(a) after its
// batch; as in the Poisson model that is latency only: the client is taken
// to think from the end of its batch (exact when Extra is zero, as the CLI
// uses it; otherwise the think time is measured from the batch's end).
// m.LambdaPerMs is ignored: the arrival rate is (N - q)/Theta in state q.
//
// Decision epochs are the moments the server is free and either a batch
// has just ended or a request has just arrived. The state is q = requests
// waiting, 0..N; the other N - q clients are thinking (none is in service
// at an epoch). Actions:
//
//   - wait (a = 0), allowed when q < N: the next arrival comes after an
//     exponential time of mean Theta/(N - q) and the state becomes q + 1.
//     The latency area (integral of requests in the system) is
//     q*Theta/(N - q); no energy; nothing served.
//   - serve a in 1..min(q, B_max): the epoch lasts T = T(a). Each of the
//     N - q thinking clients arrives during it independently with
//     probability p = 1 - exp(-T/Theta), so K ~ Binomial(N - q, p) and the
//     next state is q - a + K. Area: the q waiting stay for all of T, a
//     client arriving at t < T stays T - t, and E[(T - t)^+] = T - Theta*p,
//     so q*T + (N - q)*(T - Theta*p), plus a*After(a). Energy zeta(a);
//     a served.
//
// In q = 0 only waiting is possible, in q = N only serving (no arrival can
// come). The criteria are long-run ratios over the embedded chain (N+1
// states): mean latency L = E[area]/E[served] (Little's law on the sample
// path), energy per request E = E[zeta]/E[served], throughput X =
// E[served]/E[sojourn], mean power P = E[zeta]/E[sojourn].
//
// Why energy per request and not power: in a closed loop a policy that
// holds requests longer also slows the clients down, so it draws less
// power simply by doing less work. Energy per request (equivalently
// requests per joule) does not reward that, so the weighted problem is
// min L + w2*E and the budget problem is min E subject to L <= budget.
//
// Solving. min (E[area] + w2*E[zeta]) / E[served] is a ratio (fractional)
// MDP. Dinkelbach: g* is the optimum iff the per-stage average problem with
// cost area + w2*zeta - g*served has optimal average 0. SolveFinite runs
// that as policy iteration with g updated at every evaluation (Jewell's
// SMDP policy iteration with "served" as the time): evaluation solves
// h(q) + g*served(q) = c(q) + sum_j P(j|q) h(j), h(0) = 0, exactly with a
// dense linear solve; improvement takes in each state the action with the
// least c - g*served + P h, keeping the current one unless another is
// strictly better. It stops when no state improves, which certifies that
// every stationary policy (deterministic or randomised, in each of its
// recurrent classes) has a ratio >= g, i.e. the Dinkelbach optimum is 0 at
// g. Serving can always move down (K = 0 has positive probability) and
// waiting up, so the MDP is communicating; an improvement step can still
// produce a policy with two recurrent classes, and then the class with the
// least ratio (no more than the old g) is kept and the other states are
// sent towards it (see unichain).
//
// The budget problem is solved as SolveBudget does it: a Lagrangian search
// over w2 between policies on the lower convex hull of (L, E), then a
// randomised mix that meets the budget with equality. Unlike the Poisson
// case the two neighbours are whole tables, not control limits, and may
// differ in several states; SolveFiniteBudget walks from one to the other
// switching one state at a time and mixes the two adjacent tables that
// straddle the budget in their single differing state, where a renewal
// argument makes the mixed point exactly linear-fractional in the mix.
//
// Limits: no open Poisson stream is mixed with the clients; one server
// instance; one row per request; the state bound MaxClients keeps the
// dense O(N^3) linear algebra fast.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// MaxClients bounds the population: the evaluation and the solver use
// dense (N+1)x(N+1) matrices (8 MB at 1024) and O(N^3) eliminations.
const MaxClients = 1024

// Population is the closed loop of synchronous clients.
type Population struct {
	Clients int     // N, the number of clients
	ThinkMs float64 // Theta, the mean exponential think time between an answer and the next request
}

// Validate reports a population the model cannot use.
func (p Population) Validate() error {
	switch {
	case p.Clients < 1 || p.Clients > MaxClients:
		return fmt.Errorf("clients must be in 1..%d, got %d", MaxClients, p.Clients)
	case !(p.ThinkMs > 0) || math.IsInf(p.ThinkMs, 0):
		return fmt.Errorf("think time must be a finite number > 0 ms, got %v", p.ThinkMs)
	}
	return nil
}

// validateFinite checks the parts of m the finite model uses (not the
// arrival rate) and the population.
func validateFinite(m Model, p Population) error {
	for _, err := range []error{m.Latency.Validate(), m.Energy.Validate(), m.Extra.Validate()} {
		if err != nil {
			return fmt.Errorf("smdp model: %w", err)
		}
	}
	if m.MaxBatch < 1 {
		return fmt.Errorf("smdp model: max batch (B_max) must be >= 1, got %d", m.MaxBatch)
	}
	if err := p.Validate(); err != nil {
		return fmt.Errorf("smdp population: %w", err)
	}
	return nil
}

// FiniteEvaluation is the exact long-run performance of a policy in the
// closed loop.
type FiniteEvaluation struct {
	LatencyMs          float64 // mean response time, arrival to answer
	EnergyPerRequestMJ float64 // batch energy per served request
	ThroughputPerMs    float64 // requests served per ms
	PowerW             float64 // batch energy per ms (mJ/ms = W)
	MeanBatch          float64 // mean size of the batches sent
}

// RequestsPerJoule is 1000/EnergyPerRequestMJ, or 0 without an energy line.
func (e FiniteEvaluation) RequestsPerJoule() float64 {
	if e.EnergyPerRequestMJ > 0 {
		return 1000 / e.EnergyPerRequestMJ
	}
	return 0
}

// FiniteControlLimit waits while fewer than limit requests wait and then
// serves min(q, B_max); len N+1, indexed by q. limit must be in 1..N.
func FiniteControlLimit(m Model, p Population, limit int) []int {
	policy := make([]int, p.Clients+1)
	for q := range policy {
		if q >= limit {
			policy[q] = min(q, m.MaxBatch)
		}
	}
	return policy
}

// FiniteAdHoc is work-conserving batching, FiniteControlLimit(1).
func FiniteAdHoc(m Model, p Population) []int { return FiniteControlLimit(m, p, 1) }

// FiniteControlLimitOf returns the limit L if policy is FiniteControlLimit(L)
// and ok false otherwise.
func FiniteControlLimitOf(m Model, policy []int) (limit int, ok bool) {
	limit = ControlLimitOf(policy)
	if limit == len(policy) {
		return limit, false
	}
	return limit, slices.Equal(policy, FiniteControlLimit(m, Population{Clients: len(policy) - 1}, limit))
}

// FinitePolicySummary writes a policy table as runs of states with the
// same rule, "0-2 wait, 3-8 serve all, 9-16 serve 8".
func FinitePolicySummary(policy []int) string {
	runs := PolicyRuns(policy)
	out := make([]string, len(runs))
	for i, r := range runs {
		out[i] = r.States + " " + r.Action
	}
	return strings.Join(out, ", ")
}

// PolicyRun is a range of consecutive states ("3-8", or one state "2")
// with the same kind of action: "wait", "serve all" or "serve N".
type PolicyRun struct{ States, Action string }

// PolicyRuns groups a policy table's consecutive states by the kind of
// their action.
func PolicyRuns(policy []int) []PolicyRun {
	label := func(q int) string {
		switch a := policy[q]; {
		case a == 0:
			return "wait"
		case a == q:
			return "serve all"
		default:
			return "serve " + strconv.Itoa(a)
		}
	}
	var runs []PolicyRun
	for start := 0; start < len(policy); {
		end := start
		for end+1 < len(policy) && label(end+1) == label(start) {
			end++
		}
		states := strconv.Itoa(start)
		if end > start {
			states += "-" + strconv.Itoa(end)
		}
		runs = append(runs, PolicyRun{States: states, Action: label(start)})
		start = end + 1
	}
	return runs
}

// finiteChain is the closed-loop model with what every (state, action)
// needs precomputed.
type finiteChain struct {
	m       Model
	n       int // clients N
	think   float64
	logFact []float64 // ln k!, k = 0..N
	// Per batch size a = 1..B_max: service time T(a), energy, the After
	// delay, ln p(a) and T(a)/Theta (= -ln(1 - p(a)), exact for any T).
	svc, zeta, after, logP, x, p []float64
}

func newFiniteChain(m Model, pop Population) *finiteChain {
	c := &finiteChain{m: m, n: pop.Clients, think: pop.ThinkMs, logFact: make([]float64, pop.Clients+1)}
	for k := 1; k <= c.n; k++ {
		c.logFact[k] = c.logFact[k-1] + math.Log(float64(k))
	}
	b := m.MaxBatch + 1
	c.svc, c.zeta, c.after = make([]float64, b), make([]float64, b), make([]float64, b)
	c.logP, c.x, c.p = make([]float64, b), make([]float64, b), make([]float64, b)
	for a := 1; a <= m.MaxBatch; a++ {
		c.svc[a], c.zeta[a], c.after[a] = m.ServiceMs(a), m.ZetaMJ(a), m.Extra.AfterMs(a)
		c.x[a] = c.svc[a] / c.think
		c.p[a] = -math.Expm1(-c.x[a])
		c.logP[a] = math.Log(c.p[a])
	}
	return c
}

func (c *finiteChain) states() int         { return c.n + 1 }
func (c *finiteChain) maxAction(q int) int { return min(q, c.m.MaxBatch) }

// parts returns the epoch's sojourn (ms), latency area (request*ms),
// energy (mJ) and requests served for action a in state q.
func (c *finiteChain) parts(q, a int) (sojourn, area, energy float64, served int) {
	thinking := float64(c.n - q)
	if a == 0 {
		y := c.think / thinking
		return y, float64(q) * y, 0, 0
	}
	t := c.svc[a]
	area = float64(q)*t + thinking*(t-c.think*c.p[a]) + float64(a)*c.after[a]
	return t, area, c.zeta[a], a
}

// row calls visit(j, p) for every next state of action a in state q.
func (c *finiteChain) row(q, a int, visit func(j int, p float64)) {
	if a == 0 {
		visit(q+1, 1)
		return
	}
	thinking, base := c.n-q, q-a
	if thinking == 0 {
		visit(base, 1)
		return
	}
	// Binomial(thinking, p) in log space: (1-p)^thinking underflows for
	// long batches next to short think times, the terms near the mean do not.
	for k := 0; k <= thinking; k++ {
		lp := c.logFact[thinking] - c.logFact[k] - c.logFact[thinking-k] - float64(thinking-k)*c.x[a]
		if k > 0 {
			lp += float64(k) * c.logP[a]
		}
		if pr := math.Exp(lp); pr > 0 {
			visit(base+k, pr)
		}
	}
}

func (c *finiteChain) checkPolicy(policy []int) error {
	if len(policy) != c.states() {
		return fmt.Errorf("finite policy has %d actions, want %d (states q = 0..%d)", len(policy), c.states(), c.n)
	}
	for q, a := range policy {
		if a < 0 || a > c.maxAction(q) {
			return fmt.Errorf("finite policy action %d in state %d is outside 0..%d", a, q, c.maxAction(q))
		}
	}
	if policy[c.n] == 0 {
		return fmt.Errorf("finite policy waits in state %d with every client queued: no arrival can come, so it must serve", c.n)
	}
	return nil
}

// matrix returns the dense transition matrix of the randomised policy that
// follows second[q] with probability share[q] and first[q] otherwise
// (share nil: first).
func (c *finiteChain) matrix(first, second []int, share []float64) [][]float64 {
	n := c.states()
	flat := make([]float64, n*n)
	P := make([][]float64, n)
	for q := range P {
		P[q] = flat[q*n : (q+1)*n]
		w1, w2 := mixWeights(first, second, share, q)
		for _, act := range [2]struct {
			a int
			w float64
		}{{first[q], w1}, {second[q], w2}} {
			if act.w > 0 {
				c.row(q, act.a, func(j int, p float64) { P[q][j] += act.w * p })
			}
		}
	}
	return P
}

func mixWeights(first, second []int, share []float64, q int) (w1, w2 float64) {
	if share == nil || first[q] == second[q] {
		return 1, 0
	}
	return 1 - share[q], share[q]
}

// evaluate prices a randomised policy exactly from the stationary
// distribution of its embedded chain: per-epoch expectations are the
// share-weighted mix of the two actions', so the renewal-reward ratios
// stay exact.
func (c *finiteChain) evaluate(first, second []int, share []float64) (FiniteEvaluation, error) {
	P := c.matrix(first, second, share)
	pi, err := gthStationary(P, nil)
	if err != nil {
		return FiniteEvaluation{}, fmt.Errorf("finite policy evaluation: %w", err)
	}
	var time, area, energy, served, batches float64
	for q, pq := range pi {
		if pq == 0 {
			continue
		}
		w1, w2 := mixWeights(first, second, share, q)
		for _, act := range [2]struct {
			a int
			w float64
		}{{first[q], w1}, {second[q], w2}} {
			if act.w == 0 {
				continue
			}
			y, ar, e, s := c.parts(q, act.a)
			w := pq * act.w
			time += w * y
			area += w * ar
			energy += w * e
			served += w * float64(s)
			if s > 0 {
				batches += w
			}
		}
	}
	if !(served > 0) {
		return FiniteEvaluation{}, errors.New("finite policy evaluation: the policy serves nothing in the long run")
	}
	return FiniteEvaluation{
		LatencyMs:          area / served,
		EnergyPerRequestMJ: energy / served,
		ThroughputPerMs:    served / time,
		PowerW:             energy / time,
		MeanBatch:          served / batches,
	}, nil
}

// gthStationary is the stationary distribution of a unichain transition
// matrix: its recurrent class by closedClass, transient states 0, and on
// the class GTH (Grassmann, Taksar, Heyman 1985), which solves pi P = pi
// without subtractions and so keeps tiny probabilities accurate to a few
// ulps. Both models evaluate through it (kernel.stationary,
// finiteChain.evaluate).
//
// GTH anchors the first state of the class at 1 and builds the others up
// from it; in a closed loop the first state (fewest requests waiting) can
// be rarer than the likely ones by more than float64's range (64 clients
// thinking 0.3 ms against 3.5 ms batches: all of them thinking at once has
// probability ~1e-280 per batch), so the back-substitution would overflow
// to Inf and NaN. Rescaling the partial solution whenever it grows large
// keeps it finite; the states it underflows to 0 are beyond 1e-300 of the
// likely ones. For the same reason (1024 clients: the queue never drains
// in float64) the probability of going back down from a state can
// underflow to 0: with stuck nil the states below it then get 0 and the
// solution starts at that state (see anchor); otherwise stuck names the
// error, as the Poisson model, whose chain must drain, reports it.
func gthStationary(P [][]float64, stuck func(class int) error) ([]float64, error) {
	idx, err := closedClass(P)
	if err != nil {
		return nil, err
	}
	c := len(idx)
	A := make([][]float64, c)
	for i, s := range idx {
		A[i] = make([]float64, c)
		for j, t := range idx {
			A[i][j] = P[s][t]
		}
	}
	outOf := func(m int) float64 {
		out := 0.0
		for j := range m {
			out += A[m][j]
		}
		return out
	}
	// anchor is the lowest state the solution builds on. If a state's
	// probability of moving below it underflows to 0 in elimination, the
	// states below it carry no mass float64 can show (mass flows up from
	// them by waiting, and back down with probability 0): they get 0 and
	// the solution starts at that state.
	anchor := 0
	for m := c - 1; m > 0; m-- {
		out := outOf(m)
		if !(out > 0) {
			if stuck != nil {
				return nil, stuck(idx[m])
			}
			anchor = m
			break
		}
		for i := range m {
			if f := A[i][m] / out; f != 0 {
				axpy(f, A[m], A[i][:m])
			}
		}
	}
	x := make([]float64, c)
	x[anchor] = 1
	for m := anchor + 1; m < c; m++ {
		v := 0.0
		for i := anchor; i < m; i++ {
			v += x[i] * A[i][m]
		}
		out := outOf(m)
		if r := v / out; r > 1e250 || math.IsInf(r, 0) {
			// Everything below m is negligible next to m; out/v may
			// underflow to 0, which says just that.
			f := out / v
			for i := anchor; i < m; i++ {
				x[i] *= f
			}
			x[m] = 1
		} else {
			x[m] = r
		}
		if x[m] > 1e200 {
			for i := anchor; i <= m; i++ {
				x[i] *= 1e-200
			}
		}
	}
	total := 0.0
	for _, v := range x {
		total += v
	}
	pi := make([]float64, len(P))
	for i, s := range idx {
		pi[s] = x[i] / total
	}
	return pi, nil
}

// EvaluateFinite computes the exact long-run performance of a
// deterministic policy in the closed loop; policy[q] is the action with q
// requests waiting (0 wait, else the batch size), q = 0..N.
func EvaluateFinite(m Model, p Population, policy []int) (FiniteEvaluation, error) {
	if err := validateFinite(m, p); err != nil {
		return FiniteEvaluation{}, err
	}
	c := newFiniteChain(m, p)
	if err := c.checkPolicy(policy); err != nil {
		return FiniteEvaluation{}, err
	}
	return c.evaluate(policy, policy, nil)
}

// EvaluateFiniteRandomized prices the stationary randomised policy that in
// state q follows second[q] with probability share[q] and first[q]
// otherwise, as FiniteConstrained describes its optimum.
func EvaluateFiniteRandomized(m Model, p Population, first, second []int, share []float64) (FiniteEvaluation, error) {
	if err := validateFinite(m, p); err != nil {
		return FiniteEvaluation{}, err
	}
	c := newFiniteChain(m, p)
	for _, pol := range [][]int{first, second} {
		if err := c.checkPolicy(pol); err != nil {
			return FiniteEvaluation{}, err
		}
	}
	if len(share) != len(first) {
		return FiniteEvaluation{}, fmt.Errorf("share has %d entries, want %d", len(share), len(first))
	}
	for q, s := range share {
		if !(s >= 0 && s <= 1) {
			return FiniteEvaluation{}, fmt.Errorf("share %v in state %d is not a probability", s, q)
		}
	}
	return c.evaluate(first, second, share)
}

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
// exactly (policy iteration on the ratio, see the file comment). With
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

// closedClasses returns every closed communicating class of P (states in
// increasing order), by Tarjan's strongly connected components: a
// component is closed when no transition leaves it.
func closedClasses(P [][]float64) [][]int {
	n := len(P)
	index, low, comp := make([]int, n), make([]int, n), make([]int, n)
	onStack := make([]bool, n)
	var stack []int
	var comps [][]int
	counter := 0
	var visit func(v int)
	visit = func(v int) {
		counter++
		index[v], low[v] = counter, counter
		stack = append(stack, v)
		onStack[v] = true
		for w, p := range P[v] {
			if p == 0 {
				continue
			}
			if index[w] == 0 {
				visit(w)
				low[v] = min(low[v], low[w])
			} else if onStack[w] {
				low[v] = min(low[v], index[w])
			}
		}
		if low[v] == index[v] {
			var cl []int
			for {
				w := stack[len(stack)-1]
				stack = stack[:len(stack)-1]
				onStack[w] = false
				comp[w] = len(comps)
				cl = append(cl, w)
				if w == v {
					break
				}
			}
			slices.Sort(cl)
			comps = append(comps, cl)
		}
	}
	for v := range n {
		if index[v] == 0 {
			visit(v)
		}
	}
	var closed [][]int
	for i, cl := range comps {
		leaves := false
		for _, s := range cl {
			for t, p := range P[s] {
				if p != 0 && comp[t] != i {
					leaves = true
				}
			}
		}
		if !leaves {
			closed = append(closed, cl)
		}
	}
	return closed
}

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
// them to meet the budget (see SolveFiniteBudget).
func (out *FiniteConstrained) mix(c *finiteChain, lo, hi FinitePoint) error {
	var diff []int
	for q := range lo.Policy {
		if lo.Policy[q] != hi.Policy[q] {
			diff = append(diff, q)
		}
	}
	step := func(k int) []int { // hi's actions in the first k differing states
		pol := slices.Clone(lo.Policy)
		for _, q := range diff[:k] {
			pol[q] = hi.Policy[q]
		}
		return pol
	}
	a, b := 0, len(diff)
	first, second := lo, hi
	walk := true
	for b-a > 1 {
		mid := (a + b) / 2
		pol := step(mid)
		ev, err := c.evaluate(pol, pol, nil)
		if err != nil {
			walk = false
			break
		}
		if ev.LatencyMs <= out.BudgetMs {
			a, first = mid, FinitePoint{Policy: pol, FiniteEvaluation: ev}
		} else {
			b, second = mid, FinitePoint{Policy: pol, FiniteEvaluation: ev}
		}
	}
	if walk {
		d := diff[a]
		share := make([]float64, len(lo.Policy))
		at := func(p float64) (FiniteEvaluation, error) {
			share[d] = p
			return c.evaluate(first.Policy, second.Policy, share)
		}
		half, err := at(0.5)
		if err == nil {
			l1, l2, B := first.LatencyMs, second.LatencyMs, out.BudgetMs
			// L(1/2) = (L1 + r*L2)/(1 + r) with r = S2/S1.
			r := (l1 - half.LatencyMs) / (half.LatencyMs - l2)
			p := (l1 - B) / ((l1 - B) - r*(l2-B))
			if ev, err := at(min(max(p, 0), 1)); err == nil && math.Abs(ev.LatencyMs-B) <= 1e-9*B {
				out.First, out.Second, out.MixState, out.Mix, out.Share = first, second, d, share[d], share
				out.FiniteEvaluation = ev
				return nil
			}
		}
	}
	// Fallback: one p in every differing state, by bisection.
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
