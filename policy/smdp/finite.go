package smdp

// Finite-source (closed-loop) batching.
//
// The Poisson model of the rest of the package has an infinite population:
// requests keep coming at rate lambda whatever the server does. A load
// generator or a fleet of synchronous clients is different: N clients each
// send one request, wait for its answer, think, and send the next, so the
// arrival rate falls as requests queue up and the throughput depends on the
// policy. This file and finitechain.go, finitesolve.go and finitebudget.go
// solve that model exactly.
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
