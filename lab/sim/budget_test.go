package sim

import (
	"context"
	"testing"

	"github.com/ratebatch/ratebatch/policy"
	"github.com/ratebatch/ratebatch/policy/smdp"
)

// The budget policy, run by the simulator on the same arrivals as ad-hoc,
// stays within its budget of ad-hoc's simulated mean latency (+1% for
// sampling) and draws the constrained optimum's requests per joule (within
// 1%).
func TestBudgetPolicyMeetsItsBudget(t *testing.T) {
	prof := lookupPreset(t, "googlenet-p4")
	for _, tc := range []struct {
		rho    float64
		budget string
	}{{0.1, "1.10x"}, {0.3, "1.10x"}, {0.6, "1.5x"}} {
		rate := tc.rho * 1000 * prof.MuPerMs(prof.MaxBatch)
		run := func(p policy.Policy) Result {
			r, err := Run(context.Background(), Config{Profile: prof, Policy: p, RatePerSec: rate, Requests: 100_000, Seed: 3})
			if err != nil {
				t.Fatal(err)
			}
			return r
		}
		b, err := smdp.ParseBudget(tc.budget)
		if err != nil {
			t.Fatal(err)
		}
		adhoc := run(newPolicy(t, policy.NameAdhoc, policy.Options{}))
		// The plan alone: the trim corrects a live model the simulator
		// does not have (the sim command's default too). The mean's
		// budget alone, its optimum the SMDP's constrained one: the p99
		// bound (tail_budget) is the tail model's test
		// (TestTailModelMatchesTheSimulator) and policy's.
		got := run(newPolicy(t, policy.NameBudget, policy.NewOptions(policy.BudgetOptions{LatencyBudget: tc.budget, TailBudget: "off", NoTrim: true})))
		opt, err := smdp.SolveBudget(context.Background(), smdp.ModelFor(prof.Latency, prof.KnownEnergy(), prof.MaxBatch, tc.rho), b, 0)
		if err != nil {
			t.Fatal(err)
		}
		optRPJ := 1000 * rate / 1000 / opt.PowerW
		if limit := b.Factor * adhoc.MeanLatencyMs * 1.01; got.MeanLatencyMs > limit {
			t.Errorf("rho %v: mean latency %.4g ms above %s of ad-hoc's %.4g ms (+1%%)", tc.rho, got.MeanLatencyMs, tc.budget, adhoc.MeanLatencyMs)
		}
		if rpj := *got.RequestsPerJoule; rpj < 0.99*optRPJ {
			t.Errorf("rho %v: %.4g req/J, more than 1%% below the constrained optimum's %.4g", tc.rho, rpj, optRPJ)
		}
		if !(*got.RequestsPerJoule > *adhoc.RequestsPerJoule) {
			t.Errorf("rho %v: %.4g req/J not above ad-hoc's %.4g", tc.rho, *got.RequestsPerJoule, *adhoc.RequestsPerJoule)
		}
	}
}
