package smdp

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
)

// finiteModel is googlenet-p4's lines with B_max capped (the arrival rate
// is not used by the finite model).
func finiteModel(t testing.TB, bmax int) Model {
	p := capped(t, "googlenet-p4", bmax)
	return Model{Latency: p.Latency, Energy: p.Energy, MaxBatch: p.MaxBatch}
}

func relClose(got, want, tol float64) bool {
	return math.Abs(got-want) <= tol*math.Max(math.Abs(want), 1e-300)
}

// Small populations have closed forms: the chain is short enough to solve
// by hand.
func TestEvaluateFiniteClosedForms(t *testing.T) {
	m := finiteModel(t, 8)
	m.Extra = Extra{HoldLoneMs: 0.05, HoldMergedMs: 0.1, AfterLoneMs: 0.02, AfterMergedMs: 0.04}
	const th = 0.7
	T := func(a int) float64 { return m.ServiceMs(a) }
	A := func(a int) float64 { return m.Extra.AfterMs(a) }
	Z := func(a int) float64 { return m.ZetaMJ(a) }
	p1 := 1 - math.Exp(-T(1)/th)
	for _, tc := range []struct {
		name   string
		n      int
		policy []int
		want   FiniteEvaluation
	}{
		// One client: think, then a batch of one; nothing else can happen.
		{"N=1 adhoc", 1, []int{0, 1}, FiniteEvaluation{
			LatencyMs: T(1) + A(1), EnergyPerRequestMJ: Z(1), ThroughputPerMs: 1 / (th + T(1)), MeanBatch: 1}},
		// Two clients, ad-hoc: state 2 is never reached; in state 1 the
		// other client may arrive during the batch (prob p1) and then
		// waits the residual, E[(T-t)^+] = T - th*p1. The chain alternates
		// 0 -> 1 and 1 -> {0: 1-p1, 1: p1}, so pi0 = (1-p1)*pi1.
		{"N=2 adhoc", 2, []int{0, 1, 1}, FiniteEvaluation{
			LatencyMs: 2*T(1) - th*p1 + A(1), EnergyPerRequestMJ: Z(1),
			ThroughputPerMs: 1 / ((1-p1)*th/2 + T(1)), MeanBatch: 1}},
		// Two clients, limit 2: 0 -(th/2)-> 1 -(th, area th)-> 2 -> serve 2 -> 0.
		{"N=2 limit 2", 2, []int{0, 0, 2}, FiniteEvaluation{
			LatencyMs: (th + 2*T(2) + 2*A(2)) / 2, EnergyPerRequestMJ: Z(2) / 2,
			ThroughputPerMs: 2 / (th/2 + th + T(2)), MeanBatch: 2}},
		// Three clients, limit 3: waits th/3, th/2, th with 0, 1, 2 waiting.
		{"N=3 limit 3", 3, []int{0, 0, 0, 3}, FiniteEvaluation{
			LatencyMs: (th/2 + 2*th + 3*T(3) + 3*A(3)) / 3, EnergyPerRequestMJ: Z(3) / 3,
			ThroughputPerMs: 3 / (th/3 + th/2 + th + T(3)), MeanBatch: 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := EvaluateFinite(m, Population{Clients: tc.n, ThinkMs: th}, tc.policy)
			if err != nil {
				t.Fatal(err)
			}
			tc.want.PowerW = tc.want.ThroughputPerMs * tc.want.EnergyPerRequestMJ
			for _, f := range []struct {
				name      string
				got, want float64
			}{
				{"latency", got.LatencyMs, tc.want.LatencyMs},
				{"energy/request", got.EnergyPerRequestMJ, tc.want.EnergyPerRequestMJ},
				{"throughput", got.ThroughputPerMs, tc.want.ThroughputPerMs},
				{"power", got.PowerW, tc.want.PowerW},
				{"mean batch", got.MeanBatch, tc.want.MeanBatch},
			} {
				if !relClose(f.got, f.want, 1e-12) {
					t.Errorf("%s = %.15g, want %.15g", f.name, f.got, f.want)
				}
			}
			if rpj := got.RequestsPerJoule(); !relClose(rpj, 1000/tc.want.EnergyPerRequestMJ, 1e-12) {
				t.Errorf("requests per joule %v, want %v", rpj, 1000/tc.want.EnergyPerRequestMJ)
			}
		})
	}
}

// simulateFinite runs the closed loop event by event: exponential think
// times, FIFO queue, the policy consulted whenever the server is free
// after a batch or an arrival. It returns latency, energy per request and
// throughput over the given number of served requests.
func simulateFinite(m Model, pop Population, policy []int, requests int, seed uint64) FiniteEvaluation {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	next := make([]float64, pop.Clients) // next arrival per thinking client; Inf while queued
	for i := range next {
		next[i] = rng.ExpFloat64() * pop.ThinkMs
	}
	type req struct {
		client int
		at     float64
	}
	var queue []req
	now, latSum, energy := 0.0, 0.0, 0.0
	served, batches := 0, 0
	for served < requests {
		a := policy[len(queue)]
		if a == 0 {
			j := 0
			for i, v := range next {
				if v < next[j] {
					j = i
				}
			}
			now = next[j]
			queue = append(queue, req{j, now})
			next[j] = math.Inf(1)
			continue
		}
		end := now + m.ServiceMs(a)
		batch := slices.Clone(queue[:a])
		queue = queue[a:]
		// Arrivals during the batch, in time order.
		var during []req
		for i, v := range next {
			if v <= end {
				during = append(during, req{i, v})
				next[i] = math.Inf(1)
			}
		}
		slices.SortFunc(during, func(x, y req) int { return cmpFloat(x.at, y.at) })
		queue = append(queue, during...)
		for _, r := range batch {
			latSum += end + m.Extra.AfterMs(a) - r.at
			next[r.client] = end + rng.ExpFloat64()*pop.ThinkMs
		}
		served += a
		batches++
		energy += m.ZetaMJ(a)
		now = end
	}
	return FiniteEvaluation{
		LatencyMs: latSum / float64(served), EnergyPerRequestMJ: energy / float64(served),
		ThroughputPerMs: float64(served) / now, MeanBatch: float64(served) / float64(batches),
	}
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// The exact evaluation agrees with a direct simulation of the closed loop.
func TestEvaluateFiniteMatchesSimulation(t *testing.T) {
	m := finiteModel(t, 8)
	for _, n := range []int{4, 16} {
		pop := Population{Clients: n, ThinkMs: 1.5}
		for _, limit := range []int{1, 3} {
			t.Run(fmt.Sprintf("N=%d limit %d", n, limit), func(t *testing.T) {
				policy := FiniteControlLimit(m, pop, limit)
				ev, err := EvaluateFinite(m, pop, policy)
				if err != nil {
					t.Fatal(err)
				}
				sim := simulateFinite(m, pop, policy, 200_000, uint64(17*n+limit))
				for _, f := range []struct {
					name      string
					got, want float64
				}{
					{"latency", ev.LatencyMs, sim.LatencyMs},
					{"energy/request", ev.EnergyPerRequestMJ, sim.EnergyPerRequestMJ},
					{"throughput", ev.ThroughputPerMs, sim.ThroughputPerMs},
					{"mean batch", ev.MeanBatch, sim.MeanBatch},
				} {
					if !relClose(f.got, f.want, 0.02) {
						t.Errorf("%s: exact %.6g, simulated %.6g", f.name, f.got, f.want)
					}
				}
				t.Logf("exact %+v\nsim   %+v", ev, sim)
			})
		}
	}
}

// allFinitePolicies evaluates every deterministic policy of a small loop
// (those with two recurrent classes, which EvaluateFinite rejects, are
// skipped: each of their classes is also the class of a unichain policy).
// The enumeration is cached across tests.
var finiteEnum sync.Map

func allFinitePolicies(t *testing.T, m Model, pop Population) []FinitePoint {
	t.Helper()
	key := fmt.Sprint(m, pop)
	if v, ok := finiteEnum.Load(key); ok {
		return v.([]FinitePoint)
	}
	c := newFiniteChain(m, pop)
	var out []FinitePoint
	policy := make([]int, pop.Clients+1)
	policy[pop.Clients] = 1
	multichain := 0
	for {
		ev, err := c.evaluate(policy, policy, nil)
		if err == nil {
			out = append(out, FinitePoint{Policy: slices.Clone(policy), FiniteEvaluation: ev})
		} else if strings.Contains(err.Error(), "more than one recurrent class") {
			multichain++
		} else {
			t.Fatalf("policy %v: %v", policy, err)
		}
		// Next policy in mixed radix; state N's actions are 1..min(N, B_max).
		q := 0
		for ; q <= pop.Clients; q++ {
			policy[q]++
			if policy[q] <= c.maxAction(q) {
				break
			}
			policy[q] = 0
			if q == pop.Clients {
				policy[q] = 1
			}
		}
		if q > pop.Clients {
			break
		}
	}
	t.Logf("N=%d: %d unichain policies, %d with several recurrent classes", pop.Clients, len(out), multichain)
	finiteEnum.Store(key, out)
	return out
}

// SolveFinite reaches the minimum of L + w2*E over every deterministic
// policy of small loops.
func TestSolveFiniteMatchesBruteForce(t *testing.T) {
	m := finiteModel(t, 4)
	for _, n := range []int{1, 2, 3, 5, 8} {
		for _, think := range []float64{0.3, 3} {
			pop := Population{Clients: n, ThinkMs: think}
			all := allFinitePolicies(t, m, pop)
			for _, w2 := range []float64{0, 0.02, 0.2, 2} {
				t.Run(fmt.Sprintf("N=%d think %g w2 %g", n, think, w2), func(t *testing.T) {
					sol, err := SolveFinite(context.Background(), m, pop, w2)
					if err != nil {
						t.Fatal(err)
					}
					best := all[0]
					for _, p := range all[1:] {
						if p.LatencyMs+w2*p.EnergyPerRequestMJ < best.LatencyMs+w2*best.EnergyPerRequestMJ {
							best = p
						}
					}
					want := best.LatencyMs + w2*best.EnergyPerRequestMJ
					if !relClose(sol.Objective, want, 1e-6) {
						t.Errorf("solver %.10g (policy %v), brute force %.10g (policy %v)", sol.Objective, sol.Policy, want, best.Policy)
					}
					ev, err := EvaluateFinite(m, pop, sol.Policy)
					if err != nil {
						t.Fatal(err)
					}
					if ev != sol.FiniteEvaluation {
						t.Errorf("solution evaluation %+v, re-evaluated %+v", sol.FiniteEvaluation, ev)
					}
					limit, ok := FiniteControlLimitOf(m, sol.Policy)
					if limit != sol.ControlLimit || ok != sol.IsControlLimit {
						t.Errorf("control limit %d/%v, want %d/%v", sol.ControlLimit, sol.IsControlLimit, limit, ok)
					}
				})
			}
		}
	}
}

// finiteHull is the lower convex hull of the (L, E) points, reusing the
// package's hull with energy per request in the PowerW slot.
func finiteHull(all []FinitePoint) []Point {
	pts := make([]Point, len(all))
	for i, p := range all {
		pts[i] = Point{Limit: i, Evaluation: Evaluation{LatencyMs: p.LatencyMs, PowerW: p.EnergyPerRequestMJ}}
	}
	return lowerHull(pts)
}

// The budget optimum meets the budget with equality, no deterministic
// policy within the budget spends less energy per request, and it lies on
// the lower convex hull of all deterministic policies, which is the
// optimum over randomised stationary policies (ratios of occupation
// measures with a common denominator map the policy polytope onto a convex
// set whose vertices are deterministic policies).
func TestSolveFiniteBudgetMatchesBruteForce(t *testing.T) {
	m := finiteModel(t, 4)
	binding := 0
	defer func() {
		if binding < 10 {
			t.Errorf("only %d cases bind: the mix is barely exercised", binding)
		}
	}()
	for _, n := range []int{2, 3, 5, 8} {
		for _, think := range []float64{0.3, 3} {
			pop := Population{Clients: n, ThinkMs: think}
			all := allFinitePolicies(t, m, pop)
			hull := finiteHull(all)
			for _, b := range []Budget{{Factor: 1.05}, {Factor: 1.1}, {Factor: 1.5}} {
				t.Run(fmt.Sprintf("N=%d think %g %v", n, think, b), func(t *testing.T) {
					c, err := SolveFiniteBudget(context.Background(), m, pop, b)
					if err != nil {
						t.Fatal(err)
					}
					adhoc, err := EvaluateFinite(m, pop, FiniteAdHoc(m, pop))
					if err != nil {
						t.Fatal(err)
					}
					if !relClose(c.BudgetMs, b.Factor*adhoc.LatencyMs, 1e-12) || c.Adhoc != adhoc {
						t.Fatalf("budget %v ms, ad-hoc %+v; want %v x %+v", c.BudgetMs, c.Adhoc, b.Factor, adhoc)
					}
					ev, err := EvaluateFiniteRandomized(m, pop, c.First.Policy, c.Second.Policy, c.Share)
					if err != nil {
						t.Fatal(err)
					}
					if !relClose(ev.EnergyPerRequestMJ, c.EnergyPerRequestMJ, 1e-9) || !relClose(ev.LatencyMs, c.LatencyMs, 1e-9) {
						t.Errorf("reported %+v, re-evaluated %+v", c.FiniteEvaluation, ev)
					}
					if c.Binding {
						binding++
						if !relClose(ev.LatencyMs, c.BudgetMs, 1e-6) {
							t.Errorf("binding, but latency %.9g ms != budget %.9g ms", ev.LatencyMs, c.BudgetMs)
						}
						if !(c.First.LatencyMs <= c.BudgetMs && c.Second.LatencyMs > c.BudgetMs) {
							t.Errorf("first %.6g ms and second %.6g ms do not straddle the budget", c.First.LatencyMs, c.Second.LatencyMs)
						}
					} else if ev.LatencyMs > c.BudgetMs*(1+1e-12) {
						t.Errorf("not binding, but latency %v ms over the budget %v", ev.LatencyMs, c.BudgetMs)
					}
					for _, p := range all {
						if p.LatencyMs <= c.BudgetMs && p.EnergyPerRequestMJ < ev.EnergyPerRequestMJ*(1-1e-9) {
							t.Errorf("policy %v meets the budget (%.6g ms) with %.9g mJ/req < the optimum's %.9g",
								p.Policy, p.LatencyMs, p.EnergyPerRequestMJ, ev.EnergyPerRequestMJ)
						}
					}
					if want, ok := OnFrontier(hull, math.Min(c.BudgetMs, hull[len(hull)-1].LatencyMs)); ok {
						if !relClose(ev.EnergyPerRequestMJ, want, 1e-7) {
							t.Errorf("energy %.9g mJ/req, lower hull at the budget %.9g", ev.EnergyPerRequestMJ, want)
						}
					}
				})
			}
		}
	}
}

// With one client nothing can be batched: the only policy is ad-hoc and
// the budget never binds.
func TestSolveFiniteBudgetOneClient(t *testing.T) {
	m := finiteModel(t, 8)
	pop := Population{Clients: 1, ThinkMs: 0.3}
	c, err := SolveFiniteBudget(context.Background(), m, pop, Budget{Factor: 1.5})
	if err != nil {
		t.Fatal(err)
	}
	if c.Binding || !slices.Equal(c.First.Policy, []int{0, 1}) || !slices.Equal(c.Second.Policy, []int{0, 1}) || c.Mix != 0 {
		t.Errorf("got %+v, want ad-hoc alone", c)
	}
	if want := m.ServiceMs(1); !relClose(c.LatencyMs, want, 1e-12) || !relClose(c.EnergyPerRequestMJ, m.ZetaMJ(1), 1e-12) {
		t.Errorf("latency %v energy %v, want %v and %v", c.LatencyMs, c.EnergyPerRequestMJ, want, m.ZetaMJ(1))
	}
}

// On realistic loops: with a 3 ms think time the budget binds, the mix
// sits in one state and saves energy per request against ad-hoc; with
// 0.3 ms think time the clients are back before a batch ends, so full
// batches cost no more latency than the budget allows (for small N the
// least-energy policy, waiting for everyone, is even faster than ad-hoc)
// and the optimum is the least-energy policy, zeta(B_max)/B_max per request
// once N >= B_max.
func TestSolveFiniteBudgetLarger(t *testing.T) {
	m := finiteModel(t, 8)
	for _, tc := range []struct {
		n       int
		think   float64
		binding bool
	}{{8, 3, true}, {16, 3, true}, {16, 0.3, false}, {64, 0.3, false}} {
		pop := Population{Clients: tc.n, ThinkMs: tc.think}
		c, err := SolveFiniteBudget(context.Background(), m, pop, Budget{Factor: 1.1})
		if err != nil {
			t.Fatal(err)
		}
		name := fmt.Sprintf("N=%d think %g", tc.n, tc.think)
		if c.Binding != tc.binding {
			t.Fatalf("%s: binding %v, want %v", name, c.Binding, tc.binding)
		}
		if !tc.binding {
			if want := m.ZetaMJ(8) / 8; !relClose(c.EnergyPerRequestMJ, want, 1e-12) || c.LatencyMs > c.BudgetMs {
				t.Errorf("%s: %v mJ/req at %v ms, want the least energy %v within %v ms", name, c.EnergyPerRequestMJ, c.LatencyMs, want, c.BudgetMs)
			}
			continue
		}
		if !relClose(c.LatencyMs, c.BudgetMs, 1e-6) {
			t.Errorf("%s: latency %v, budget %v", name, c.LatencyMs, c.BudgetMs)
		}
		if !(c.EnergyPerRequestMJ < c.Adhoc.EnergyPerRequestMJ) {
			t.Errorf("%s: %v mJ/req not below ad-hoc's %v", name, c.EnergyPerRequestMJ, c.Adhoc.EnergyPerRequestMJ)
		}
		if c.MixState < 0 || !(c.Mix > 0 && c.Mix < 1) {
			t.Errorf("%s: mix %v in state %d, want a share in (0,1) in one state", name, c.Mix, c.MixState)
		}
		diff := 0
		for q := range c.First.Policy {
			if c.First.Policy[q] != c.Second.Policy[q] {
				diff++
			}
		}
		if diff != 1 {
			t.Errorf("%s: first and second differ in %d states, want 1", name, diff)
		}
		t.Logf("%s: %d solves, w2 %.4g, L %.4g ms (ad-hoc %.4g), E %.4g mJ/req (ad-hoc %.4g)\n first %s\n second %s",
			name, c.Solves, c.W2, c.LatencyMs, c.Adhoc.LatencyMs, c.EnergyPerRequestMJ, c.Adhoc.EnergyPerRequestMJ,
			FinitePolicySummary(c.First.Policy), FinitePolicySummary(c.Second.Policy))
	}
}

func TestSolveFiniteBudgetInfeasible(t *testing.T) {
	m := finiteModel(t, 8)
	_, err := SolveFiniteBudget(context.Background(), m, Population{Clients: 8, ThinkMs: 0.3}, Budget{AbsoluteMs: 0.5})
	if !errors.Is(err, ErrBudgetInfeasible) {
		t.Errorf("err = %v, want ErrBudgetInfeasible", err)
	}
}

func TestFiniteInvalidInput(t *testing.T) {
	m := finiteModel(t, 4)
	pop := Population{Clients: 4, ThinkMs: 1}
	ctx := context.Background()
	noEnergy := m
	noEnergy.BetaMJ, noEnergy.Zeta0MJ = 0, 0
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"no clients", second(EvaluateFinite(m, Population{ThinkMs: 1}, []int{0})), "clients must be in 1..1024"},
		{"too many clients", second(SolveFinite(ctx, m, Population{Clients: MaxClients + 1, ThinkMs: 1}, 0)), "clients must be in"},
		{"zero think", second(SolveFinite(ctx, m, Population{Clients: 4}, 0)), "think time"},
		{"infinite think", second(SolveFinite(ctx, m, Population{Clients: 4, ThinkMs: math.Inf(1)}, 0)), "think time"},
		{"bad bmax", second(SolveFinite(ctx, Model{Latency: m.Latency}, pop, 0)), "B_max"},
		{"negative w2", second(SolveFinite(ctx, m, pop, -1)), "w2"},
		{"w2 without energy", second(SolveFinite(ctx, noEnergy, pop, 1)), "no energy line"},
		{"budget without energy", second(SolveFiniteBudget(ctx, noEnergy, pop, Budget{Factor: 1.1})), "no energy line"},
		{"bad budget", second(SolveFiniteBudget(ctx, m, pop, Budget{Factor: 0.5})), "factor >= 1"},
		{"short policy", second(EvaluateFinite(m, pop, []int{0, 1})), "want 5"},
		{"waits when all queued", second(EvaluateFinite(m, pop, []int{0, 1, 2, 3, 0})), "must serve"},
		{"serves too many", second(EvaluateFinite(m, pop, []int{0, 1, 3, 3, 4})), "outside 0..2"},
		{"serves from empty", second(EvaluateFinite(m, pop, []int{1, 1, 2, 3, 4})), "outside 0..0"},
		// {3,4} and {0,1,2} are both closed: serving 1 at 4 leads to 3,
		// which waits for the last client; serving 2 at 2 returns to <= 2.
		{"two recurrent classes", second(EvaluateFinite(m, pop, []int{0, 0, 2, 0, 1})), "more than one recurrent class"},
		{"cancelled", second(SolveFinite(cancelled(), m, pop, 0)), "interrupted"},
	} {
		if tc.err == nil || !strings.Contains(tc.err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", tc.name, tc.err, tc.want)
		}
	}
}

func second[T any](_ T, err error) error { return err }

func cancelled() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

func TestFinitePolicySummary(t *testing.T) {
	m := finiteModel(t, 4)
	pol := FiniteControlLimit(m, Population{Clients: 9}, 3)
	if got, want := FinitePolicySummary(pol), "0-2 wait, 3-4 serve all, 5-9 serve 4"; got != want {
		t.Errorf("summary %q, want %q", got, want)
	}
	if l, ok := FiniteControlLimitOf(m, pol); l != 3 || !ok {
		t.Errorf("control limit %d %v, want 3 true", l, ok)
	}
	pol[6] = 3
	if l, ok := FiniteControlLimitOf(m, pol); l != 3 || ok {
		t.Errorf("modified table: control limit %d %v, want 3 false", l, ok)
	}
}

func BenchmarkSolveFinite(b *testing.B) {
	m := finiteModel(b, 8)
	pop := Population{Clients: 64, ThinkMs: 0.3}
	b.Run("weights N=64", func(b *testing.B) {
		for range b.N {
			if _, err := SolveFinite(context.Background(), m, pop, 0.1); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("budget 1.10x N=64", func(b *testing.B) {
		for range b.N {
			if _, err := SolveFiniteBudget(context.Background(), m, pop, Budget{Factor: 1.1}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
