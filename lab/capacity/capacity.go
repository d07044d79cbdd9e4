// Package capacity holds the closed-form bounds of ad-hoc batching
// (ALGORITHMS.md section 4) and the capacity planning built on them: the
// mean latency at a given arrival rate, the highest rate that keeps the
// mean latency under a target, and a lower bound on energy efficiency.
//
// The model is work-conserving (ad-hoc) batching with unbounded batch size:
// whenever the server is free it takes every waiting request as one batch,
// whose processing time is tau(b) = alpha*b + tau0. It is stable while
// rho = lambda*alpha < 1 (the throughput of ever larger batches tends to
// 1/alpha). Units: ms, mJ, requests per ms.
package capacity

import (
	"fmt"
	"math"

	"github.com/ratebatch/ratebatch/policy/batchcost"
)

// Model is the batch latency line of one model on one GPU. It is the line
// itself, as its own type only to carry the bounds below as methods (its
// Latency method would clash with an embedded batchcost.Latency):
// capacity.Model(p.Latency) converts a profile's line.
type Model batchcost.Latency

// Validate reports the first unusable parameter.
func (m Model) Validate() error { return batchcost.Latency(m).Validate() }

// MaxRatePerMs is the stability limit 1/alpha: no rate at or above it is
// served with finite latency.
func (m Model) MaxRatePerMs() float64 { return 1 / m.AlphaMs }

// Latency is the closed-form bound on the mean latency E[W] (queueing plus
// batch time) at one arrival rate.
type Latency struct {
	LambdaPerMs float64
	Rho         float64 // lambda*alpha
	Phi0Ms      float64
	Phi1Ms      float64
	// PhiMs = min(Phi0Ms, Phi1Ms) >= E[W]; Phi0 is the smaller one exactly
	// when lambda <= 1/(alpha+tau0).
	PhiMs float64
}

// Latency returns the bounds phi0, phi1 and phi = min(phi0, phi1) at
// arrival rate lambda (requests per ms). lambda must be >= 0 and below the
// stability limit 1/alpha.
func (m Model) Latency(lambdaPerMs float64) (Latency, error) {
	if err := m.Validate(); err != nil {
		return Latency{}, err
	}
	if !(lambdaPerMs >= 0) || math.IsInf(lambdaPerMs, 0) {
		return Latency{}, fmt.Errorf("arrival rate must be a finite number >= 0 requests/ms, got %v", lambdaPerMs)
	}
	rho := lambdaPerMs * m.AlphaMs
	if !(rho < 1) {
		return Latency{}, fmt.Errorf("load rho = lambda*alpha = %.4g >= 1 is unstable: the rate %.4g req/ms reaches the limit 1/alpha = %.4g req/ms of unbounded batches",
			rho, lambdaPerMs, m.MaxRatePerMs())
	}
	a, t0, l := m.AlphaMs, m.Tau0Ms, lambdaPerMs
	phi0 := (a + t0) / (2 * (1 - rho)) * (1 + 2*l*t0 + (1-l*t0)/(1+rho))
	phi1 := 1.5*t0/(1-rho) + (a/2)*(rho+2)/(1-rho*rho)
	return Latency{LambdaPerMs: l, Rho: rho, Phi0Ms: phi0, Phi1Ms: phi1, PhiMs: math.Min(phi0, phi1)}, nil
}

// MaxRate returns the highest arrival rate (requests per ms) whose latency
// bound phi stays at or below targetMs.
//
// Method: with x = lambda*alpha and r = tau0/alpha,
// phi0 = (alpha+tau0)/2 * (2 + (1+r)x + 2r x^2) / (1 - x^2) and
// phi1 = 1.5 tau0/(1-x) + (alpha/2)(x+2)/(1-x^2); both numerators grow and
// both denominators shrink in x on [0, 1), so phi = min(phi0, phi1) is
// continuous and strictly increasing from phi(0) = alpha+tau0 (a lone
// request) to infinity at the stability limit. Bisection on [0, 1/alpha)
// therefore finds the unique crossing; the lower end is returned so the
// bound at the answer never exceeds the target. Because phi bounds E[W]
// from above, the answer is a conservative plan: the mean latency at that
// rate is at most targetMs (the bound is tight except at small rho).
func (m Model) MaxRate(targetMs float64) (float64, error) {
	if err := m.Validate(); err != nil {
		return 0, err
	}
	if !(targetMs > 0) || math.IsInf(targetMs, 0) {
		return 0, fmt.Errorf("target latency must be a finite number > 0 ms, got %v", targetMs)
	}
	if floor := m.AlphaMs + m.Tau0Ms; targetMs <= floor {
		return 0, fmt.Errorf("target latency %.4g ms is not above the latency of a lone request, tau(1) = alpha+tau0 = %.4g ms: no arrival rate meets it", targetMs, floor)
	}
	phi := func(l float64) float64 {
		b, err := m.Latency(l)
		if err != nil {
			return math.Inf(1)
		}
		return b.PhiMs
	}
	lo, hi := 0.0, m.MaxRatePerMs() // phi(lo) <= target < phi(hi) = +inf
	for i := 0; i < 200 && hi-lo > 1e-15*hi; i++ {
		mid := lo + (hi-lo)/2
		if phi(mid) <= targetMs {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo, nil
}

// MinMeanBatch is the lower bound max(1, lambda*tau0/(1-lambda*alpha)) on
// the mean batch size of ad-hoc batching: a batch can only be as large as
// the arrivals during the previous one, and in steady state
// E[B] = lambda*E[tau(B)] = lambda*(alpha*E[B] + tau0) when the server is
// always busy.
func (m Model) MinMeanBatch(lambdaPerMs float64) (float64, error) {
	l, err := m.Latency(lambdaPerMs) // validates
	if err != nil {
		return 0, err
	}
	return math.Max(1, lambdaPerMs*m.Tau0Ms/(1-l.Rho)), nil
}

// MinRequestsPerJoule is the lower bound on ad-hoc batching's energy
// efficiency, 1/(beta + zeta0/E[B]) with E[B] replaced by MinMeanBatch,
// converted from requests per mJ to requests per J.
func (m Model) MinRequestsPerJoule(lambdaPerMs float64, e batchcost.Energy) (float64, error) {
	if err := e.Validate(); err != nil {
		return 0, err
	}
	if e.BetaMJ == 0 && e.Zeta0MJ == 0 {
		return 0, fmt.Errorf("beta and zeta0 are both 0: batches would cost no energy")
	}
	b, err := m.MinMeanBatch(lambdaPerMs)
	if err != nil {
		return 0, err
	}
	return 1000 / (e.BetaMJ + e.Zeta0MJ/b), nil
}
