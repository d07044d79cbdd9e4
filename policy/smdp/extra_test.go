package smdp

import (
	"context"
	"math"
	"testing"
)

// Time outside tau(b) prices exactly as its definition says: a delay
// after every batch adds itself to the mean latency and nothing to the
// queue, and instance time the same for a lone and a merged batch is the
// same model as a larger tau0.
func TestExtraPricesTheTimeOutsideTau(t *testing.T) {
	m := modelFor(lookupPreset(t, "googlenet-p4"), 0.3)
	const sMax = 200
	eval := func(m Model, limit int) Evaluation {
		t.Helper()
		e, err := NewEvaluator(m, Options{W1: 1, Epsilon: DefaultEpsilon, SMax: sMax, IterMax: DefaultIterMax})
		if err != nil {
			t.Fatal(err)
		}
		ev, err := e.Evaluate(ControlLimit(m, sMax, limit))
		if err != nil {
			t.Fatal(err)
		}
		return ev
	}
	for _, limit := range []int{1, 3} {
		base := eval(m, limit)
		after := m
		after.Extra = Extra{AfterLoneMs: 0.7, AfterMergedMs: 0.7}
		if got := eval(after, limit); math.Abs(got.LatencyMs-base.LatencyMs-0.7) > 1e-9 || math.Abs(got.PowerW-base.PowerW) > 1e-12 {
			t.Errorf("limit %d: after 0.7 ms moves latency %.6g -> %.6g, power %.6g -> %.6g; want +0.7 ms and the same power",
				limit, base.LatencyMs, got.LatencyMs, base.PowerW, got.PowerW)
		}
		hold := m
		hold.Extra = Extra{HoldLoneMs: 0.4, HoldMergedMs: 0.4}
		shifted := m
		shifted.Tau0Ms += 0.4
		if a, b := eval(hold, limit), eval(shifted, limit); math.Abs(a.LatencyMs-b.LatencyMs) > 1e-9 || math.Abs(a.MeanBatch-b.MeanBatch) > 1e-9 {
			t.Errorf("limit %d: hold 0.4 ms gives %.6g ms (batch %.4g), tau0 + 0.4 gives %.6g ms (batch %.4g)",
				limit, a.LatencyMs, a.MeanBatch, b.LatencyMs, b.MeanBatch)
		}
	}
	// A merged batch dearer than a lone one makes waiting for a partner
	// dearer: the budget's optimum waits less (a smaller mix or limits).
	budget := Budget{Factor: 1.1}
	plain, err := SolveBudget(context.Background(), m, budget, sMax)
	if err != nil {
		t.Fatal(err)
	}
	dear := m
	dear.Extra = Extra{AfterMergedMs: 0.3 * m.Tau0Ms, HoldMergedMs: 0.1 * m.Tau0Ms}
	c, err := SolveBudget(context.Background(), dear, budget, sMax)
	if err != nil {
		t.Fatal(err)
	}
	if !(c.MeanBatch < plain.MeanBatch) {
		t.Errorf("merged batches dearer: mean batch %.4g, want below %.4g", c.MeanBatch, plain.MeanBatch)
	}
	if math.Abs(c.LatencyMs/c.AdhocLatencyMs-1.1) > 0.002 {
		t.Errorf("latency %.4g ms against ad-hoc's %.4g: want 1.10x (the reference counts the extra too)", c.LatencyMs, c.AdhocLatencyMs)
	}
	bad := m
	bad.Extra = Extra{AfterMergedMs: math.Inf(1)}
	if bad.Validate() == nil {
		t.Error("an infinite extra validates")
	}
}

// Past the load where every batch is B_max, limits B_max and B_max+1 draw
// the same power: the optimum must not mix in the limit above B_max, which
// holds a full batch for a row it cannot take (the live collapse at rho
// 0.93 with "control limits 8/9"). The line is the live proxy's on the
// exact emulator's simple model, energy proportional to busy time.
func TestBudgetNeverWaitsWithAFullBatchForNothing(t *testing.T) {
	for _, rho := range []float64{0.93, 0.95} {
		m := Model{MaxBatch: 8}
		m.AlphaMs, m.Tau0Ms, m.BetaMJ, m.Zeta0MJ = 0.305, 2.1, 0.305, 2.1
		m.LambdaPerMs = rho * m.ServiceMuPerMs(8)
		c, err := SolveBudget(context.Background(), m, Budget{Factor: 1.1}, 200)
		if err != nil {
			t.Fatal(err)
		}
		if c.First.Limit > 8 || (c.Mix > 0 && c.Second.Limit > 8) {
			t.Errorf("rho %v: control limits %d/%d mixed %.3g with B_max 8", rho, c.First.Limit, c.Second.Limit, c.Mix)
		}
		if c.LatencyMs > c.BudgetMs*(1+1e-9) {
			t.Errorf("rho %v: latency %.4g over the budget %.4g", rho, c.LatencyMs, c.BudgetMs)
		}
	}
}
