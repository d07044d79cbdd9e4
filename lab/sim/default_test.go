package sim

import (
	"context"
	"fmt"
	"testing"

	"github.com/ratebatch/ratebatch/config"
	"github.com/ratebatch/ratebatch/lab/preset"
	"github.com/ratebatch/ratebatch/policy"
)

// TestDefaultPolicyNeverHurts holds the configured default policy to the
// promise of docs/LEARNING.md: on every preset, across the load range
// (rho of B_max's capacity, Poisson arrivals), its mean latency is within
// the default latency budget of ad-hoc's on the same arrivals (plus 2%,
// the sampling error of two means over the run's requests near
// saturation); its requests per joule are never below ad-hoc's (less
// 0.5%); and batching pays under load (more requests per joule than ad-hoc
// somewhere on the grid of each preset with energy figures).
//
// The policy is built as `ratebatch sim` builds it: solves unmetered (a
// simulated run must not depend on the machine's speed) and the plan
// alone, without the live trim, which corrects a live model the simulator
// does not have. One policy per preset keeps its cache of optima across
// the grid, as a proxy does across the loads it visits.
//
// It is a numerical check of a single-goroutine simulation, which the race
// detector slows tenfold (several minutes of CPU for the constrained
// optima near saturation): it skips under -race, and `make test-go` runs
// it without.
func TestDefaultPolicyNeverHurts(t *testing.T) {
	if raceEnabled {
		t.Skip("runs without -race: make test-go")
	}
	def := config.Default().Policy
	opts := def.Options
	policy.Each(&opts, func(s *policy.SolveOptions) { s.SolveFree = true })
	bound := 1.10 // the promise for a policy without a budget
	if pol, err := policy.New(def.Name, opts); err != nil {
		t.Fatal(err)
	} else if b, ok := pol.(*policy.Budget); ok {
		if !b.Budget.Relative() {
			t.Fatalf("default budget %s is absolute: no bound relative to ad-hoc", b.Budget)
		}
		bound = b.Budget.Factor
	}
	requests := 20_000
	if testing.Short() {
		requests = 10_000
	}
	for _, pname := range preset.Names() {
		t.Run(pname, func(t *testing.T) {
			t.Parallel()
			p, _ := preset.Lookup(pname)
			pol, err := policy.New(def.Name, opts)
			if err != nil {
				t.Fatal(err)
			}
			bestGain := 0.0
			for _, rho := range []float64{0.1, 0.3, 0.5, 0.7, 0.9} {
				rate := rho * 1000 * float64(p.MaxBatch) / p.TauMs(p.MaxBatch)
				run := func(pol policy.Policy) Result {
					r, err := Run(context.Background(), Config{Profile: p, Policy: pol, RatePerSec: rate, Requests: requests, Seed: 1})
					if err != nil {
						t.Fatal(err)
					}
					return r
				}
				a, d := run(policy.Adhoc{}), run(pol)
				if d.MeanLatencyMs > bound*1.02*a.MeanLatencyMs {
					t.Errorf("rho %.1f: %s mean latency %.3f ms, %.3fx ad-hoc's %.3f (bound %.2fx +2%%)", rho, def.Name, d.MeanLatencyMs, d.MeanLatencyMs/a.MeanLatencyMs, a.MeanLatencyMs, bound)
				}
				if p.HasEnergy {
					gain := *d.RequestsPerJoule / *a.RequestsPerJoule - 1
					if gain < -0.005 {
						t.Errorf("rho %.1f: %s %+.2f%% requests per joule against ad-hoc", rho, def.Name, 100*gain)
					}
					bestGain = max(bestGain, gain)
				}
				t.Logf("rho %.1f: %.3fx ad-hoc's latency, %s%s", rho, d.MeanLatencyMs/a.MeanLatencyMs, gainNote(a, d), solvesNote(pol))
			}
			if p.HasEnergy && bestGain < 0.02 {
				t.Errorf("%s gains at most %+.1f%% requests per joule over ad-hoc on the grid: batching no longer pays", def.Name, 100*bestGain)
			}
		})
	}
}

// solvesNote is how many optima a policy that solves them has solved so
// far: with its cache of plans kept across the grid, the count shows
// whether the cache holds (docs/ALGORITHMS.md, "Solves within a share of a
// core").
func solvesNote(pol policy.Policy) string {
	if s, ok := pol.(interface{ Solves() int }); ok {
		return fmt.Sprintf(", %d solves so far", s.Solves())
	}
	return ""
}

// gainNote is a run's requests per joule against ad-hoc's, where known.
func gainNote(adhoc, r Result) string {
	if adhoc.RequestsPerJoule == nil || r.RequestsPerJoule == nil {
		return "no energy figures"
	}
	return fmt.Sprintf("%+.1f%% requests per joule", 100*(*r.RequestsPerJoule / *adhoc.RequestsPerJoule - 1))
}
