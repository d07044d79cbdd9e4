package capacity

import (
	"fmt"
	"io"
	"math"

	"github.com/ratebatch/ratebatch/policy/batchcost"
)

// FleetPlan is a fleet of identical GPUs for a total rate, the load spread
// evenly over them.
type FleetPlan struct {
	GPUs int `json:"gpus"`
	// RatePerGPU is each GPU's share of the rate, requests per second.
	RatePerGPU float64 `json:"rate_per_gpu_rps"`
	// Rho is each GPU's load, lambda*alpha.
	Rho float64 `json:"rho"`
	// LatencyBoundMs is the closed-form bound phi on the mean latency at
	// RatePerGPU.
	LatencyBoundMs float64 `json:"latency_bound_ms"`
	MinMeanBatch   float64 `json:"min_mean_batch"`
	// MinRequestsPerJoule is a lower bound on the fleet's requests per
	// joule: the batches' energy at MinMeanBatch plus every GPU's idle
	// power all the time (it is drawn only while a GPU has no batch). Nil
	// without energy figures.
	MinRequestsPerJoule *float64 `json:"min_requests_per_joule"`
}

// PlanFleet returns the fewest GPUs of this line whose latency bound meets
// targetMs at rateRPS requests per second in total, then the plans with
// one and two GPUs more, to show what spreading the same load costs. e may
// be nil (no energy figures); idleWatts is each GPU's idle power.
//
// The fewest GPUs is also the packing answer: batches are fuller on fewer
// GPUs (the mean batch grows with the rate per GPU), so each joule serves
// more requests, and every GPU not needed draws no idle power; the latency
// bound is what limits how far load can be packed.
func (m Model) PlanFleet(rateRPS, targetMs float64, e *batchcost.Energy, idleWatts float64) ([]FleetPlan, error) {
	if !(rateRPS > 0) || math.IsInf(rateRPS, 0) {
		return nil, fmt.Errorf("rate must be a finite number > 0 requests/s, got %v", rateRPS)
	}
	if !(idleWatts >= 0) || math.IsInf(idleWatts, 0) {
		return nil, fmt.Errorf("idle power must be a finite number >= 0 W, got %v", idleWatts)
	}
	perGPU, err := m.MaxRate(targetMs) // requests per ms; validates m and the target
	if err != nil {
		return nil, err
	}
	if !(perGPU > 0) {
		return nil, fmt.Errorf("no rate meets %.4g ms on one GPU", targetMs)
	}
	n := int(math.Ceil(rateRPS / 1000 / perGPU))
	if n > 1<<20 {
		return nil, fmt.Errorf("%.4g requests/s within %.4g ms needs more than %d GPUs", rateRPS, targetMs, 1<<20)
	}
	var plans []FleetPlan
	for g := n; g < n+3; g++ {
		lambda := rateRPS / 1000 / float64(g)
		lat, err := m.Latency(lambda)
		if err != nil {
			return nil, err
		}
		b, err := m.MinMeanBatch(lambda)
		if err != nil {
			return nil, err
		}
		p := FleetPlan{GPUs: g, RatePerGPU: 1000 * lambda, Rho: lat.Rho, LatencyBoundMs: lat.PhiMs, MinMeanBatch: b}
		if e != nil {
			rpj, err := m.MinRequestsPerJoule(lambda, *e)
			if err != nil {
				return nil, err
			}
			// J per request: the batches' share plus g GPUs idling at most
			// the whole time, spread over the fleet's requests.
			f := 1 / (1/rpj + float64(g)*idleWatts/rateRPS)
			p.MinRequestsPerJoule = &f
		}
		plans = append(plans, p)
	}
	return plans, nil
}

// WriteFleetText prints plans as the plan command's text.
func WriteFleetText(w io.Writer, name string, rateRPS, targetMs, idleWatts float64, plans []FleetPlan) {
	fmt.Fprintf(w, "model %s: %.6g req/s in total, mean latency <= %g ms, ad-hoc batching, load spread evenly, idle %g W per GPU\n",
		name, rateRPS, targetMs, idleWatts)
	fmt.Fprintln(w, "gpus  req/s per gpu  rho     latency bound ms  mean batch >=  requests/J >=")
	for i, p := range plans {
		rpj := "-"
		if p.MinRequestsPerJoule != nil {
			rpj = fmt.Sprintf("%.4g", *p.MinRequestsPerJoule)
		}
		note := ""
		if i == 0 {
			note = "  <- fewest that meet the target"
		}
		fmt.Fprintf(w, "%-4d  %-13.6g  %-6.4f  %-16.4g  %-13.4g  %s%s\n", p.GPUs, p.RatePerGPU, p.Rho, p.LatencyBoundMs, p.MinMeanBatch, rpj, note)
	}
}
