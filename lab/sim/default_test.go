package sim

import (
	"context"
	"testing"

	"github.com/ratebatch/ratebatch/config"
	"github.com/ratebatch/ratebatch/lab/preset"
	"github.com/ratebatch/ratebatch/policy"
)

// TestDefaultPolicyNeverHurts holds the configured default policy to the
// promise of docs/LEARNING.md: on every preset, at every load of the
// compare grid (rho of B_max's capacity), its mean latency is within 10% of
// ad-hoc's; and batching still pays under load (more requests per joule
// than ad-hoc somewhere on the grid of each preset with energy figures).
func TestDefaultPolicyNeverHurts(t *testing.T) {
	name := config.Default().Policy.Name
	def, err := policy.New(name, config.Default().Policy.Options)
	if err != nil {
		t.Fatal(err)
	}
	requests, jitters := 20_000, []float64{0, 0.3}
	if testing.Short() || raceEnabled {
		requests, jitters = 10_000, []float64{0}
	}
	for _, pname := range preset.Names() {
		p, _ := preset.Lookup(pname)
		bestGain := 0.0
		for _, rho := range []float64{0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9} {
			for _, jitter := range jitters {
				rate := rho * 1000 * float64(p.MaxBatch) / p.TauMs(p.MaxBatch)
				run := func(pol policy.Policy) Result {
					r, err := Run(context.Background(), Config{Profile: p, Policy: pol, RatePerSec: rate, Requests: requests, Seed: 1, Jitter: jitter})
					if err != nil {
						t.Fatal(err)
					}
					return r
				}
				a, d := run(policy.Adhoc{}), run(def)
				if d.MeanLatencyMs > 1.1*a.MeanLatencyMs {
					t.Errorf("%s rho %.1f jitter %.1f: %s mean latency %.3f ms, %.2fx ad-hoc's %.3f", pname, rho, jitter, name, d.MeanLatencyMs, d.MeanLatencyMs/a.MeanLatencyMs, a.MeanLatencyMs)
				}
				if p.HasEnergy {
					bestGain = max(bestGain, *d.RequestsPerJoule / *a.RequestsPerJoule - 1)
				}
			}
		}
		if p.HasEnergy && bestGain < 0.02 {
			t.Errorf("%s: %s gains at most %+.1f%% requests per joule over ad-hoc on the grid: batching no longer pays", pname, name, 100*bestGain)
		}
	}
}
