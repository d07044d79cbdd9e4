package smdp

import (
	"context"
	"fmt"
	"math"
	"testing"

	"github.com/ratebatch/ratebatch/policy/batchcost"
)

// md1WaitCDF is P(W <= t) for the M/D/1 queue (Erlang's formula), service
// time d, arrival rate lambda: (1-rho) sum_{k<=t/d} (lambda(kd-t))^k/k!
// exp(-lambda(kd-t)).
func md1WaitCDF(t, d, lambda float64) float64 {
	rho := lambda * d
	sum := 0.0
	for k := 0; float64(k)*d <= t; k++ {
		x := lambda * (float64(k)*d - t)
		lg, _ := math.Lgamma(float64(k + 1))
		term := math.Exp(-x - lg)
		if k > 0 {
			term *= math.Pow(math.Abs(x), float64(k))
			if x < 0 && k%2 == 1 {
				term = -term
			}
		}
		sum += term
	}
	return (1 - rho) * sum
}

// quantile inverts a nondecreasing CDF on [0, hi] by bisection.
func quantile(cdf func(float64) float64, p, hi float64) float64 {
	lo := 0.0
	for range 100 {
		mid := (lo + hi) / 2
		if cdf(mid) < p {
			lo = mid
		} else {
			hi = mid
		}
	}
	return (lo + hi) / 2
}

// TestTailMatchesExactQueues checks the tail model against queues whose
// latency distribution is known in closed form: with B_max 1 and ad-hoc,
// exact batch times make M/D/1 (Erlang's waiting-time distribution) and a
// spread of SCV 1 makes M/M/1 (sojourn exponential of rate mu - lambda).
func TestTailMatchesExactQueues(t *testing.T) {
	const tol = 0.03
	d := 2.0 // ms: alpha 0.5 + tau0 1.5
	for _, rho := range []float64{0.2, 0.5, 0.7} {
		lambda := rho / d
		for _, scv := range []float64{0, 1} {
			t.Run(fmt.Sprintf("rho %.1f scv %.0f", rho, scv), func(t *testing.T) {
				m := Model{Latency: batchcost.Latency{AlphaMs: 0.5, Tau0Ms: 1.5}, MaxBatch: 1, LambdaPerMs: lambda, ServiceSCV: scv}
				var mean, p50, p99 float64
				if scv == 0 {
					mean = d + rho*d/(2*(1-rho)) // Pollaczek-Khinchine
					cdf := func(s float64) float64 { return md1WaitCDF(s-d, d, lambda) }
					// Erlang's sum cancels terms of exp(lambda t): bracket
					// where float64 still holds its digits.
					hi := d + 12/lambda
					p50 = quantile(cdf, 0.5, hi)
					p99 = quantile(cdf, 0.99, hi)
					if cdf(d-1e-9) > 0 || math.Abs(cdf(hi)-1) > 1e-3 {
						t.Fatalf("reference broken: P(T < d) = %v, P(T <= %v) = %v", cdf(d-1e-9), hi, cdf(hi))
					}
				} else {
					r := 1/d - lambda
					mean, p50, p99 = 1/r, math.Ln2/r, math.Log(100)/r
				}
				got := TailLatency(m, TailRule{First: 1, Second: 1}, TailOptions{Requests: 400000, Seed: 7})
				for _, c := range []struct {
					what      string
					got, want float64
				}{{"mean", got.MeanMs, mean}, {"p50", got.P50Ms, p50}, {"p99", got.P99Ms, p99}} {
					if math.Abs(c.got/c.want-1) > tol {
						t.Errorf("%s %.4g ms, the exact queue's %.4g ms (off by more than %.0f%%)", c.what, c.got, c.want, 100*tol)
					}
				}
			})
		}
	}
}

// TestTailMeanMatchesTheChain checks the simulation's rule against the
// SMDP's exact evaluation: with batches of up to 8, the proxy's time
// around a batch and a server's spread, ad-hoc and the constrained optimum
// held without bound (the chain's rule: a wait ends at an arrival) have
// the chain's mean latency and batch.
func TestTailMeanMatchesTheChain(t *testing.T) {
	for _, c := range []struct {
		rho, scv float64
	}{{0.2, 0}, {0.5, 0}, {0.5, 0.3}, {0.7, 0.3}} {
		t.Run(fmt.Sprintf("rho %.1f scv %.1f", c.rho, c.scv), func(t *testing.T) {
			m := ModelFor(batchcost.Latency{AlphaMs: 0.3, Tau0Ms: 1.05}, batchcost.Energy{BetaMJ: 0.3, Zeta0MJ: 1.05}, 8, c.rho)
			m.Extra = Extra{HoldLoneMs: 0.03, HoldMergedMs: 0.08, AfterLoneMs: 0.01, AfterMergedMs: 0.04}
			m.ServiceSCV = c.scv
			cons, err := SolveBudget(context.Background(), m, Budget{Factor: 1.2}, 0)
			if err != nil {
				t.Fatal(err)
			}
			for _, x := range []struct {
				what  string
				rule  TailRule
				exact Evaluation
			}{
				{"ad-hoc", TailRule{First: 1, Second: 1}, Evaluation{LatencyMs: cons.AdhocLatencyMs}},
				{fmt.Sprintf("limits %d/%d mixed %.2f", cons.First.Limit, cons.Second.Limit, cons.Mix),
					TailRule{First: cons.First.Limit, Second: cons.Second.Limit, Mix: cons.Mix, HoldMs: math.Inf(1)}, cons.Evaluation},
			} {
				got := TailLatency(m, x.rule, TailOptions{Requests: 300000, Seed: 3})
				if math.Abs(got.MeanMs/x.exact.LatencyMs-1) > 0.02 {
					t.Errorf("%s: mean %.4g ms, the chain's %.4g", x.what, got.MeanMs, x.exact.LatencyMs)
				}
				if x.exact.MeanBatch > 0 && math.Abs(got.MeanBatch/x.exact.MeanBatch-1) > 0.02 {
					t.Errorf("%s: mean batch %.4g, the chain's %.4g", x.what, got.MeanBatch, x.exact.MeanBatch)
				}
				if !(got.P99Ms > got.P90Ms && got.P90Ms > got.P50Ms) {
					t.Errorf("%s: percentiles out of order: %+v", x.what, got)
				}
			}
		})
	}
}

// The same seed gives the same tail (a plan computed twice is the same
// plan), and a longer hold never shortens the tail of a rule that waits.
func TestTailIsSeededAndHoldsRaiseIt(t *testing.T) {
	m := ModelFor(batchcost.Latency{AlphaMs: 0.3, Tau0Ms: 1.05}, batchcost.Energy{BetaMJ: 0.3, Zeta0MJ: 1.05}, 8, 0.1)
	r := TailRule{First: 1, Second: 8, Mix: 1, HoldMs: 2}
	a, b := TailLatency(m, r, TailOptions{Seed: 1}), TailLatency(m, r, TailOptions{Seed: 1})
	if a != b {
		t.Fatalf("one seed, two tails: %+v and %+v", a, b)
	}
	prev := TailLatency(m, TailRule{First: 1, Second: 1}, TailOptions{Seed: 1})
	for _, hold := range []float64{1, 2, 4, 8} {
		r.HoldMs = hold
		got := TailLatency(m, r, TailOptions{Seed: 1})
		if !(got.P99Ms > prev.P99Ms) || !(got.EnergyMJ < prev.EnergyMJ) {
			t.Errorf("hold %v ms: p99 %.4g, energy %.4g per request; a shorter hold's: %.4g, %.4g", hold, got.P99Ms, got.EnergyMJ, prev.P99Ms, prev.EnergyMJ)
		}
		prev = got
	}
}

// BenchmarkTailLatency is one simulation of a plan's tail: the cost a
// plan pays for each rule it prices.
func BenchmarkTailLatency(b *testing.B) {
	m := Model{LambdaPerMs: 0.6, MaxBatch: 8}
	m.AlphaMs, m.Tau0Ms = 0.3051, 1.052
	for b.Loop() {
		TailLatency(m, TailRule{First: 2, Second: 4, Mix: 0.5, HoldMs: 2}, TailOptions{Seed: 1})
	}
}
