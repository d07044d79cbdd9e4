package sim

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/ratebatch/ratebatch/lab/preset"
	"github.com/ratebatch/ratebatch/policy"
	"github.com/ratebatch/ratebatch/policy/smdp"
)

// fixed is a policy that plans one rule whatever it measures.
type fixed struct{ rule policy.Rule }

func (fixed) Name() string                       { return "fixed" }
func (f fixed) Plan(policy.Estimate) policy.Rule { return f.rule }

// The budget's tail model (smdp.TailLatency) predicts the simulator's
// latency distribution for the rules it plans: control limits with a hold
// bound, from a trickle to half the capacity.
func TestTailModelMatchesTheSimulator(t *testing.T) {
	p, err := preset.Lookup("googlenet-p4")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		rho    float64
		limit  int
		holdMs float64
	}{
		{0.05, 1, 0}, {0.05, p.MaxBatch, 4}, {0.05, 4, 8}, {0.3, 2, 1}, {0.3, 4, 2}, {0.6, 1, 0}, {0.6, 8, 3},
	} {
		t.Run(fmt.Sprintf("rho %.2f limit %d hold %v ms", c.rho, c.limit, c.holdMs), func(t *testing.T) {
			rate := c.rho * 1000 * p.MuPerMs(p.MaxBatch)
			hold := time.Duration(c.holdMs * float64(time.Millisecond))
			res, err := Run(context.Background(), Config{Profile: p, RatePerSec: rate, Requests: 100000, Seed: 11,
				Policy: fixed{policy.Limit{Policy: "fixed", Limit: c.limit, MaxWait: hold}}})
			if err != nil {
				t.Fatal(err)
			}
			m := smdp.Model{Latency: p.Latency, Energy: p.Energy, MaxBatch: p.MaxBatch, LambdaPerMs: rate / 1000}
			got := smdp.TailLatency(m, smdp.TailRule{First: c.limit, Second: c.limit, HoldMs: c.holdMs}, smdp.TailOptions{Requests: 100000, Seed: 5})
			for _, x := range []struct {
				what        string
				model, simd float64
			}{{"mean", got.MeanMs, res.MeanLatencyMs}, {"p99", got.P99Ms, res.P99LatencyMs}, {"batch", got.MeanBatch, res.MeanBatchSize}} {
				if math.Abs(x.model/x.simd-1) > 0.04 {
					t.Errorf("%s: the tail model %.4g, the simulator %.4g", x.what, x.model, x.simd)
				}
			}
		})
	}
}
