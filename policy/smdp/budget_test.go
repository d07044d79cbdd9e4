package smdp

import (
	"context"
	"errors"
	"math"
	"testing"
)

func TestParseBudget(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Budget
		ok   bool
	}{
		{"1.10x", Budget{Factor: 1.1}, true},
		{" 2X ", Budget{Factor: 2}, true},
		{"1x", Budget{Factor: 1}, true},
		{"4ms", Budget{AbsoluteMs: 4}, true},
		{"800us", Budget{AbsoluteMs: 0.8}, true},
		{"0.9x", Budget{}, false},
		{"x", Budget{}, false},
		{"-4ms", Budget{}, false},
		{"0ms", Budget{}, false},
		{"4", Budget{}, false},
		{"infx", Budget{}, false},
		{"", Budget{}, false},
	} {
		got, err := ParseBudget(tc.in)
		if (err == nil) != tc.ok || (tc.ok && math.Abs(got.Factor-tc.want.Factor)+math.Abs(got.AbsoluteMs-tc.want.AbsoluteMs) > 1e-12) {
			t.Errorf("ParseBudget(%q) = %+v, %v; want %+v ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
		if err == nil {
			back, err := ParseBudget(got.String())
			if err != nil || back != got {
				t.Errorf("ParseBudget(%q).String() = %q does not read back (%+v, %v)", tc.in, got.String(), back, err)
			}
		}
	}
}

// budgetCase is a model and budget the constrained optimum is checked on.
type budgetCase struct {
	name   string
	m      Model
	budget Budget
}

func budgetCases(t *testing.T) []budgetCase {
	return []budgetCase{
		{"googlenet-p4 rho 0.1 1.10x", modelFor(lookupPreset(t, "googlenet-p4"), 0.1), Budget{Factor: 1.1}},
		{"googlenet-p4 rho 0.3 1.10x", modelFor(lookupPreset(t, "googlenet-p4"), 0.3), Budget{Factor: 1.1}},
		{"googlenet-p4 rho 0.6 1.5x", modelFor(lookupPreset(t, "googlenet-p4"), 0.6), Budget{Factor: 1.5}},
		{"resnet50-p4/32 rho 0.4 4ms", modelFor(capped(t, "resnet50-p4", 32), 0.4), Budget{AbsoluteMs: 4.5}},
	}
}

// The constrained optimum meets the budget with equality, lies on the
// segment between its two policies, and no pure control-limit policy that
// meets the budget draws less power.
func TestSolveBudgetMeetsBudgetOnTheHull(t *testing.T) {
	for _, tc := range budgetCases(t) {
		t.Run(tc.name, func(t *testing.T) {
			c, err := SolveBudget(context.Background(), tc.m, tc.budget, 0)
			if err != nil {
				t.Fatal(err)
			}
			sMax := max(DefaultSMax, 2*tc.m.MaxBatch)
			o := Options{W1: 1, Epsilon: DefaultEpsilon, SMax: sMax, IterMax: DefaultIterMax}
			adhoc, err := Evaluate(tc.m, o, AdHoc(tc.m, sMax))
			if err != nil {
				t.Fatal(err)
			}
			if got, want := c.BudgetMs, tc.budget.LimitMs(adhoc.LatencyMs); math.Abs(got-want) > 1e-12*want {
				t.Fatalf("budget %v ms, want %v", got, want)
			}
			if !c.Binding || c.First.Limit == c.Second.Limit {
				t.Fatalf("budget does not bind: %+v", c)
			}
			// Re-evaluate the mixed policy independently of SolveBudget.
			e, err := NewEvaluator(tc.m, o)
			if err != nil {
				t.Fatal(err)
			}
			first, second, share := c.Randomized(tc.m, sMax)
			ev, err := e.k.evaluateRandomized(first, second, share)
			if err != nil {
				t.Fatal(err)
			}
			if math.Abs(ev.LatencyMs-c.BudgetMs) > 1e-6*c.BudgetMs {
				t.Errorf("mixed policy latency %.9g ms, budget %.9g ms", ev.LatencyMs, c.BudgetMs)
			}
			if math.Abs(ev.PowerW-c.PowerW) > 1e-9*c.PowerW {
				t.Errorf("reported power %v, re-evaluated %v", c.PowerW, ev.PowerW)
			}
			// On the segment: power is the same convex combination as latency.
			th := c.TimeShare
			if want := (1-th)*c.First.PowerW + th*c.Second.PowerW; math.Abs(ev.PowerW-want) > 1e-6*want {
				t.Errorf("power %.9g W off the segment (%.9g W at theta %.4f)", ev.PowerW, want, th)
			}
			if !(c.First.LatencyMs <= c.BudgetMs && c.Second.LatencyMs > c.BudgetMs && c.Second.PowerW < c.First.PowerW) {
				t.Errorf("neighbours do not bracket the budget: first %+v second %+v", c.First, c.Second)
			}
			// Every pure control-limit policy meeting the budget uses at
			// least as much power (the mix is on the lower hull).
			for l := 1; l <= tc.m.MaxBatch+4; l++ {
				p, err := e.Evaluate(ControlLimit(tc.m, sMax, l))
				if err != nil {
					t.Fatal(err)
				}
				if p.LatencyMs <= c.BudgetMs && p.PowerW < ev.PowerW*(1-1e-9) {
					t.Errorf("limit %d meets the budget (%.6g ms) with %.6g W < the mix's %.6g W", l, p.LatencyMs, p.PowerW, ev.PowerW)
				}
			}
			// A different share misses: more of Second exceeds the budget,
			// less wastes power.
			for _, d := range []float64{-0.02, 0.02} {
				c2 := c
				c2.Mix = min(max(c.Mix+d, 0), 1)
				f, s, sh := c2.Randomized(tc.m, sMax)
				ev2, err := e.k.evaluateRandomized(f, s, sh)
				if err != nil {
					t.Fatal(err)
				}
				if d > 0 && !(ev2.LatencyMs > c.BudgetMs) {
					t.Errorf("mix %.4f + %.2f: latency %.6g ms still within %.6g", c.Mix, d, ev2.LatencyMs, c.BudgetMs)
				}
				if d < 0 && !(ev2.PowerW > ev.PowerW) {
					t.Errorf("mix %.4f - %.2f: power %.6g W not above %.6g", c.Mix, -d, ev2.PowerW, ev.PowerW)
				}
			}
		})
	}
}

// The randomised evaluation reduces to the deterministic one at shares 0
// and 1, and its latency at a share is what a brute-force bisection finds.
func TestEvaluateRandomizedEndpoints(t *testing.T) {
	m := modelFor(lookupPreset(t, "googlenet-p4"), 0.3)
	o := Options{W1: 1, W2: 0.5, Epsilon: DefaultEpsilon, SMax: 120, IterMax: DefaultIterMax}
	e, err := NewEvaluator(m, o)
	if err != nil {
		t.Fatal(err)
	}
	a, b := ControlLimit(m, o.SMax, 2), ControlLimit(m, o.SMax, 3)
	for _, tc := range []struct {
		share float64
		want  []int
	}{{0, a}, {1, b}} {
		share := make([]float64, len(a))
		for s := range share {
			share[s] = tc.share
		}
		got, err := e.k.evaluateRandomized(a, b, share)
		if err != nil {
			t.Fatal(err)
		}
		want, err := e.Evaluate(tc.want)
		if err != nil {
			t.Fatal(err)
		}
		if math.Abs(got.G-want.G) > 1e-12*want.G || math.Abs(got.LatencyMs-want.LatencyMs) > 1e-12*want.LatencyMs {
			t.Errorf("share %v: %+v, want %+v", tc.share, got, want)
		}
	}
}

func TestSolveBudgetEdges(t *testing.T) {
	m := modelFor(lookupPreset(t, "googlenet-p4"), 0.3)
	if _, err := SolveBudget(context.Background(), m, Budget{AbsoluteMs: 0.5}, 0); !errors.Is(err, ErrBudgetInfeasible) {
		t.Errorf("budget below tau(1): err %v, want ErrBudgetInfeasible", err)
	}
	// A budget no policy reaches: the least-power policy alone.
	c, err := SolveBudget(context.Background(), m, Budget{AbsoluteMs: 1e4}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if c.Binding || c.Mix != 0 || c.First != c.Second || !(c.LatencyMs < c.BudgetMs) {
		t.Errorf("loose budget: %+v", c)
	}
	// Exactly ad-hoc's latency: ad-hoc (or a faster policy) is the answer.
	c, err = SolveBudget(context.Background(), m, Budget{Factor: 1}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if c.LatencyMs > c.AdhocLatencyMs*(1+1e-9) {
		t.Errorf("1x: latency %v above ad-hoc %v", c.LatencyMs, c.AdhocLatencyMs)
	}
	noEnergy := m
	noEnergy.BetaMJ, noEnergy.Zeta0MJ = 0, 0
	if _, err := SolveBudget(context.Background(), noEnergy, Budget{Factor: 1.1}, 0); err == nil {
		t.Error("no energy line: want an error")
	}
	if _, err := SolveBudget(context.Background(), m, Budget{Factor: 0.5}, 0); err == nil {
		t.Error("factor 0.5: want an error")
	}
}

// The constrained optimum lies on the frontier of control limits, and the
// frontier is convex and decreasing.
func TestSolveBudgetLiesOnTheFrontier(t *testing.T) {
	m := modelFor(lookupPreset(t, "googlenet-p4"), 0.5)
	hull, err := Frontier(m, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(hull) < 3 {
		t.Fatalf("frontier has %d vertices", len(hull))
	}
	for i := 1; i < len(hull); i++ {
		if !(hull[i].LatencyMs > hull[i-1].LatencyMs && hull[i].PowerW < hull[i-1].PowerW) {
			t.Fatalf("vertex %d not slower and cheaper: %+v after %+v", i, hull[i], hull[i-1])
		}
		if i >= 2 {
			s1 := (hull[i-1].PowerW - hull[i-2].PowerW) / (hull[i-1].LatencyMs - hull[i-2].LatencyMs)
			s2 := (hull[i].PowerW - hull[i-1].PowerW) / (hull[i].LatencyMs - hull[i-1].LatencyMs)
			if !(s2 > s1) {
				t.Fatalf("not convex at vertex %d: slopes %v then %v", i-1, s1, s2)
			}
		}
	}
	for _, f := range []float64{1.05, 1.1, 1.25, 1.5, 2} {
		c, err := SolveBudget(context.Background(), m, Budget{Factor: f}, 0)
		if err != nil {
			t.Fatal(err)
		}
		want, ok := OnFrontier(hull, c.BudgetMs)
		if !ok || math.Abs(c.PowerW-want) > 1e-6*want {
			t.Errorf("%vx: power %.9g W, frontier %.9g W (ok %v)", f, c.PowerW, want, ok)
		}
	}
	// The weighted optimum at w2 = 0 is the fastest vertex.
	if w := WeightedOptimum(hull, 0); w.Limit != hull[0].Limit {
		t.Errorf("w2 = 0 picks limit %d, want the fastest %d", w.Limit, hull[0].Limit)
	}
}
