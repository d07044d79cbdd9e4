package smdp

import (
	"math"
	"testing"

	"github.com/ratebatch/ratebatch/policy/batchcost"
)

// AdHocMeanBatch on tau(b) = 0.5*b + 2 ms, B_max 8 (mu(8) = 8/6 per ms),
// against what follows from ad-hoc's rule by hand: a lone request on an
// idle server at a vanishing rate (a batch of 1 takes 2.5 ms, in which
// another arrives with probability 1 - e^(-2.5*lambda) ~ 2.5*lambda);
// full batches at and past saturation; under heavy load about the fluid
// fixed point b = lambda*tau(b), never below it (the arrivals' spread
// only adds); and more waiting the more arrives.
func TestAdHocMeanBatch(t *testing.T) {
	lat := batchcost.Latency{AlphaMs: 0.5, Tau0Ms: 2}
	if b := AdHocMeanBatch(lat, 8, 1e-4); b < 1 || b > 1+2*2.5e-4 {
		t.Errorf("at 1e-4 requests/ms: mean batch %v, want 1 (within 2*2.5e-4)", b)
	}
	for _, lambda := range []float64{8.0 / 6, 2, 5} {
		if b := AdHocMeanBatch(lat, 8, lambda); math.Abs(b-8) > 1e-9 {
			t.Errorf("at %v requests/ms (saturated): mean batch %v, want 8", lambda, b)
		}
	}
	// rho 0.95: lambda = 0.95*8/6; fluid b = 2*lambda/(1 - 0.5*lambda).
	lambda := 0.95 * 8 / 6
	fluid := 2 * lambda / (1 - 0.5*lambda)
	if b := AdHocMeanBatch(lat, 8, lambda); b < fluid || b > 1.03*fluid {
		t.Errorf("at rho 0.95: mean batch %v, want within 3%% above the fluid %v", b, fluid)
	}
	prev := 0.0
	for _, rho := range []float64{0.05, 0.2, 0.4, 0.6, 0.8, 0.9} {
		b := AdHocMeanBatch(lat, 8, rho*8/6)
		if !(b > prev) || math.IsNaN(b) {
			t.Errorf("at rho %v: mean batch %v, not above %v at the lower load", rho, b, prev)
		}
		prev = b
	}
}
