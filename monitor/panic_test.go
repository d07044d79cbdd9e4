package monitor

import (
	"testing"
	"time"

	"github.com/ratebatch/ratebatch/internal/guard"
	"github.com/ratebatch/ratebatch/policy"
	"github.com/ratebatch/ratebatch/regression"
)

// panicPolicy panics in Plan while armed, else plans as its Policy.
type panicPolicy struct {
	policy.Policy
	armed *bool
}

func (p panicPolicy) Plan(e policy.Estimate) policy.Rule {
	if *p.armed {
		panic("injected plan panic")
	}
	return p.Policy.Plan(e)
}

// A policy whose Plan panics costs the model its new rule, not the
// process: the last rule stays published, and the next plan that works
// replaces it. A policy that panics at its first plan gets adhoc's rule.
func TestPlanPanicKeepsTheLastRule(t *testing.T) {
	armed := true
	fill, _ := policy.New("maxbatch", policy.Options{})
	clk := &fakeClock{t: time.Unix(1000, 0)}
	seed := regression.Line{AlphaMs: 1, Tau0Ms: 4}
	before := guard.Count("plan")
	m, err := New(Config{Model: "m", Policy: panicPolicy{fill, &armed}, Window: time.Second, MaxBatch: 8, Instances: 1, Seed: &seed, Now: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Rule().Status().Policy; got != policy.NameAdhoc {
		t.Fatalf("first plan panicked: rule of %q, want adhoc's", got)
	}
	armed = false
	m.Tick()
	good := m.Rule()
	if good.Status().Policy != "maxbatch" {
		t.Fatalf("rule of %q after a working plan, want maxbatch's", good.Status().Policy)
	}
	armed = true
	clk.add(time.Second)
	m.Tick()
	if m.Rule() != good {
		t.Fatal("a panicking plan replaced the last rule")
	}
	if got := guard.Count("plan") - before; got != 2 {
		t.Fatalf("counted %d plan panics, want 2", got)
	}
}
