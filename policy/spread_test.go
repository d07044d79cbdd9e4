package policy

import (
	"strings"
	"testing"

	"github.com/ratebatch/ratebatch/policy/smdp"
)

// The solving policies plan for the batch times' measured spread, rounded
// to steps of 0.05, and a plan cached for one spread is not the plan for another.
func TestGridModelPlansTheSpread(t *testing.T) {
	for _, tc := range []struct{ measured, planned float64 }{
		{0, 0}, {0.003, 0}, {0.024, 0}, {0.27, 0.25}, {0.33, 0.35}, {-1, 0}, {50, smdp.MaxServiceSCV},
	} {
		e := energyEstimate(900)
		e.ServiceSCV = tc.measured
		_, m, reason := gridModel(e, 0.1)
		if reason != "" || m.ServiceSCV != tc.planned {
			t.Errorf("measured SCV %v: planned %v (%q), want %v", tc.measured, m.ServiceSCV, reason, tc.planned)
		}
	}
	e := energyEstimate(900)
	grid, exact, _ := gridModel(e, 0.1)
	var c planCache
	c.add(grid, exact, Fill{Policy: "x"}, 4)
	e.ServiceSCV = 0.3
	_, spread, _ := gridModel(e, 0.1)
	if _, ok := c.lookup(grid, spread, 0.1); ok {
		t.Error("the plan for exact batch times was taken for a spread of 0.3")
	}
	if _, ok := c.lookup(grid, exact, 0.1); !ok {
		t.Error("the cached plan was not found for its own model")
	}
}

// The budget's plan prices the spread: its ad-hoc reference is the slower
// ad-hoc of a server whose batches vary, and its note says so.
func TestBudgetPlansTheSpread(t *testing.T) {
	e := energyEstimate(900)
	plain := newBudget(t, "1.10x")
	plain.NoTrim = true
	r0, ok := plain.Plan(e).(BudgetRule)
	if !ok {
		t.Fatalf("Plan = %T", plain.Plan(e))
	}
	e.ServiceSCV = 0.3
	p := newBudget(t, "1.10x")
	p.NoTrim = true
	r1, ok := p.Plan(e).(BudgetRule)
	if !ok {
		t.Fatalf("Plan = %T", p.Plan(e))
	}
	c0, _ := r0.Constrained()
	c1, m1 := r1.Constrained()
	if m1.ServiceSCV != 0.3 || !(c1.AdhocLatencyMs > 1.02*c0.AdhocLatencyMs) {
		t.Errorf("ad-hoc priced at %.4g ms with SCV %v, %.4g ms exact: want the spread to cost more than 2%%", c1.AdhocLatencyMs, m1.ServiceSCV, c0.AdhocLatencyMs)
	}
	if n := r1.Status().Note; !strings.Contains(n, "batch times varying (SCV 0.3") {
		t.Errorf("note %q does not say the plan priced the spread", n)
	}
	if n := r0.Status().Note; strings.Contains(n, "batch times varying") {
		t.Errorf("exact batch times' note %q names a spread", n)
	}
}
