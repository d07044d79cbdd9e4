package smdp

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/ratebatch/ratebatch/policy/batchcost"
)

// The arrivals during a Gamma batch time of scale theta are negative
// binomial: a distribution with mean lambda*tau and variance
// lambda*tau*(1 + lambda*theta), whose tails keep poisson's contract.
func TestArrivalsMixOverTheBatchTime(t *testing.T) {
	for _, mean := range []float64{1e-3, 0.5, 3, 29, 300} {
		for _, disp := range []float64{0.01, 0.3, 1, 4, 30} {
			scv := disp
			pmf, tail := arrivals(mean, disp, 400)
			var sum, m1, m2 float64
			for k, p := range pmf {
				if math.IsNaN(p) || p < 0 {
					t.Fatalf("mean %v scv %v: bad probability %v at %d", mean, scv, p, k)
				}
				sum, m1, m2 = sum+p, m1+float64(k)*p, m2+float64(k*k)*p
			}
			v := m2 - m1*m1
			if math.Abs(sum-1) > 1e-12 || math.Abs(tail[0]-1) > 1e-12 {
				t.Errorf("mean %v scv %v: pmf sums to %v, P(K >= 0) = %v", mean, scv, sum, tail[0])
			}
			if math.Abs(m1-mean) > 1e-9*max(mean, 1) {
				t.Errorf("mean %v scv %v: mean %v", mean, scv, m1)
			}
			if want := mean * (1 + disp); math.Abs(v-want) > 1e-7*max(want, 1) {
				t.Errorf("mean %v scv %v: variance %v, want %v", mean, scv, v, want)
			}
			for k := 0; k < len(tail)-1; k++ {
				pk := 0.0
				if k < len(pmf) {
					pk = pmf[k]
				}
				if d := tail[k] - tail[k+1]; math.Abs(d-pk) > 1e-15+1e-12*pk {
					t.Fatalf("mean %v scv %v: tail[%d]-tail[%d] = %v, pmf = %v", mean, scv, k, k+1, d, pk)
				}
			}
		}
	}
}

// With B_max = 1 ad-hoc batching is the M/G/1 queue, whose mean response
// time is E[S] + lambda*E[S^2]/(2(1-rho)) with E[S^2] = tau^2 (1 + scv)
// (Pollaczek-Khinchine), whatever the distribution's shape.
func TestEvaluateMatchesMG1(t *testing.T) {
	for _, scv := range []float64{0.05, 0.3, 1, 2} {
		for _, rho := range []float64{0.1, 0.5, 0.8, 0.9} {
			m := Model{Latency: batchcost.Latency{AlphaMs: 0.5, Tau0Ms: 1.5}, MaxBatch: 1, ServiceSCV: scv}
			d := m.TauMs(1)
			m.LambdaPerMs = rho / d
			o := Options{W1: 1, Epsilon: DefaultEpsilon, SMax: 1500, IterMax: DefaultIterMax}
			ev, err := Evaluate(m, o, AdHoc(m, o.SMax))
			if err != nil {
				t.Fatalf("scv %v rho %v: %v", scv, rho, err)
			}
			want := d + m.LambdaPerMs*d*d*(1+scv)/(2*(1-rho))
			if math.Abs(ev.LatencyMs-want) > 1e-6*want {
				t.Errorf("scv %v rho %v: latency %.9g, want M/G/1 %.9g", scv, rho, ev.LatencyMs, want)
			}
		}
	}
}

// gammaMs draws a Gamma time of mean mean and scale theta.
func gammaMs(rng *rand.Rand, mean, theta float64) float64 {
	return gamma(rng, mean/theta) * theta
}

// Ad-hoc with B_max 8 on Gamma batch times: the model's mean latency and
// batch are a simulation's, within its noise, and the spread costs what a
// deterministic model leaves out. The simulation draws the model's own
// spread (variance theta*T) and, as a check of the approximation, a
// constant SCV (the rough emulator's multiplicative spread) matched at
// ad-hoc's batch.
func TestEvaluateMatchesSimulatedSpread(t *testing.T) {
	for _, tc := range []struct{ rho, scv float64 }{{0.5, 0.3}, {0.8, 0.5}} {
		m := Model{Latency: batchcost.Latency{AlphaMs: 0.32, Tau0Ms: 1.15}, MaxBatch: 8, ServiceSCV: tc.scv}
		m.LambdaPerMs = tc.rho * m.ServiceMuPerMs(8)
		o := Options{W1: 1, Epsilon: DefaultEpsilon, SMax: 300, IterMax: DefaultIterMax}
		ev, err := Evaluate(m, o, AdHoc(m, o.SMax))
		if err != nil {
			t.Fatal(err)
		}
		exact := m
		exact.ServiceSCV = 0
		ev0, err := Evaluate(exact, o, AdHoc(exact, o.SMax))
		if err != nil {
			t.Fatal(err)
		}
		// Ad-hoc: at each completion (or an arrival to an idle server)
		// serve min(queue, B_max).
		theta := m.SpreadScaleMs()
		sim, batch := adhocGamma(m, func(rng *rand.Rand, b int) float64 { return gammaMs(rng, m.ServiceMs(b), theta) })
		simC, _ := adhocGamma(m, func(rng *rand.Rand, b int) float64 {
			return gammaMs(rng, m.ServiceMs(b), tc.scv*m.ServiceMs(b))
		})
		name := fmt.Sprintf("rho %v scv %v", tc.rho, tc.scv)
		// 1.5 million requests: seeds spread the simulated mean by about
		// 1% at rho 0.8.
		if math.Abs(ev.LatencyMs/sim-1) > 0.03 || math.Abs(ev.MeanBatch/batch-1) > 0.02 {
			t.Errorf("%s: model %.4g ms, batch %.3g; simulated %.4g ms, batch %.3g", name, ev.LatencyMs, ev.MeanBatch, sim, batch)
		}
		// The approximation's cost: 2% at rho 0.5, 6% at rho 0.8 (a
		// constant SCV spreads the long batches of a queue more).
		if math.Abs(ev.LatencyMs/simC-1) > 0.08 {
			t.Errorf("%s: model %.4g ms; simulated with a constant scv %.4g ms", name, ev.LatencyMs, simC)
		}
		if !(ev.LatencyMs > 1.04*ev0.LatencyMs) {
			t.Errorf("%s: the spread priced at %.4g ms against %.4g without it", name, ev.LatencyMs, ev0.LatencyMs)
		}
		t.Logf("%s: model %.4g ms (deterministic %.4g), simulated %.4g (constant scv %.4g); batch %.3g, %.3g", name, ev.LatencyMs, ev0.LatencyMs, sim, simC, ev.MeanBatch, batch)
	}
}

// adhocGamma simulates 1.5 million requests of ad-hoc batching (at each
// completion, or an arrival to an idle server, serve min(queue, B_max))
// with batch times drawn by draw, and returns their mean latency and batch.
func adhocGamma(m Model, draw func(rng *rand.Rand, b int) float64) (latencyMs, batch float64) {
	rng := rand.New(rand.NewPCG(7, 11))
	var queue []float64
	now, free, sum, n, batches := 0.0, 0.0, 0.0, 0, 0
	next := rng.ExpFloat64() / m.LambdaPerMs
	for n < 1500000 {
		if next <= free || len(queue) == 0 {
			queue = append(queue, next)
			now = max(now, next)
			next += rng.ExpFloat64() / m.LambdaPerMs
			if free > now {
				continue // busy: the arrival waits
			}
		} else {
			now = free
		}
		b := min(len(queue), m.MaxBatch)
		free = now + draw(rng, b)
		for _, at := range queue[:b] {
			sum += free - at
		}
		n, batches, queue = n+b, batches+1, queue[b:]
	}
	return sum / float64(n), float64(n) / float64(batches)
}

// The optimum with a spread is no worse than the baselines on the same
// model, and the value iteration's convolution of negative binomial counts
// gives the transition rows' expectations.
func TestSolveWithSpread(t *testing.T) {
	for _, tc := range []struct{ rho, scv, w2 float64 }{{0.3, 0.3, 1}, {0.7, 0.5, 0.2}, {0.9, 0.3, 0.5}} {
		name := fmt.Sprintf("rho %v scv %v w2 %v", tc.rho, tc.scv, tc.w2)
		m := modelFor(capped(t, "googlenet-p4", 16), tc.rho)
		m.ServiceSCV = tc.scv
		o := options(t, m, 1, tc.w2, 150, DefaultEpsilon)
		sol, err := Solve(context.Background(), m, o)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		span := sol.GUpper - sol.GLower
		for pname, pol := range map[string][]int{"adhoc": AdHoc(m, o.SMax), "batchmonitor": BatchMonitor(m, o.SMax)} {
			ev, err := Evaluate(m, o, pol)
			if err != nil {
				t.Fatalf("%s %s: %v", name, pname, err)
			}
			if sol.G > ev.G+span {
				t.Errorf("%s: optimum g %v above %s's %v (span %v)", name, sol.G, pname, ev.G, span)
			}
		}
		k := newKernel(m, o)
		J := make([]float64, k.n)
		for s := range J {
			J[s] = float64(s*s) + math.Sin(float64(s))
		}
		newExpecter(k).each(J, func(a int, e []float64) {
			for base := 0; base <= o.SMax-a; base++ {
				direct := 0.0
				k.row(base+a, a, func(j int, p float64) { direct += p * J[j] })
				if math.Abs(e[base]-direct) > 1e-12*J[k.so] {
					t.Fatalf("%s a %d base %d: expectation %v, direct %v", name, a, base, e[base], direct)
				}
			}
		})
	}
}
