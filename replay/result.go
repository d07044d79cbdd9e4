package replay

import (
	"slices"

	"github.com/ratebatch/ratebatch/internal/stats"
)

// Result is what a run measured. Latency is from arrival to the completion
// of the request's batch.
type Result struct {
	Policy        string  `json:"policy"`
	Requests      int     `json:"requests"`
	Batches       int     `json:"batches"`
	MeanLatencyMs float64 `json:"mean_latency_ms"`
	P50LatencyMs  float64 `json:"p50_latency_ms"`
	P99LatencyMs  float64 `json:"p99_latency_ms"`
	MaxLatencyMs  float64 `json:"max_latency_ms"`
	MeanBatchSize float64 `json:"mean_batch_size"`
	// ThroughputRPS is Requests over the run's duration (time 0 to the last
	// completion).
	ThroughputRPS float64 `json:"throughput_rps"`
	// RequestsPerJoule is nil when the profile has no energy figures.
	RequestsPerJoule *float64 `json:"requests_per_joule"`
	EnergyJ          *float64 `json:"energy_j"`
	DurationS        float64  `json:"duration_s"`
	// MeanInSystem is the time average of requests waiting or in a batch;
	// by Little's law it equals ThroughputRPS * MeanLatencyMs / 1000.
	MeanInSystem float64 `json:"mean_in_system"`
	// Utilization is the share of time at least one batch was running.
	Utilization float64 `json:"utilization"`
	// Windows is the per-window time series, when Config.Series is set.
	Windows []Window `json:"windows,omitempty"`
	// PhaseS is the seconds the run spent in each phase of a policy that
	// earns its holds (policy.Phaser: the budget's learning, holding,
	// adhoc), and HoldFromS when it first held (-1: never); nil and 0
	// for the other policies.
	PhaseS    map[string]float64 `json:"phase_s,omitempty"`
	HoldFromS float64            `json:"hold_from_s,omitempty"`
}

// Window is one monitor window of a run.
type Window struct {
	StartS     float64 `json:"start_s"`
	Arrivals   int     `json:"arrivals"`
	RatePerSec float64 `json:"rate_rps"`
	// BatchSize is the batch size of the rule in force during the window
	// (planned at its start), Phase the policy's phase then (Phaser).
	BatchSize     int     `json:"batch_size"`
	Phase         string  `json:"phase,omitempty"`
	Batches       int     `json:"batches"`
	MeanBatchSize float64 `json:"mean_batch_size"`
	// Completed and MeanLatencyMs cover the requests whose batch completed
	// in the window.
	Completed     int     `json:"completed"`
	MeanLatencyMs float64 `json:"mean_latency_ms"`
}

// result is the run's measures once it has ended.
func (r *run) result() Result {
	r.closeWindow()
	res := Result{
		Policy:    r.c.Policy.Name(),
		Requests:  len(r.latencies),
		Batches:   r.batches,
		DurationS: r.lastDone.Seconds(),
		Windows:   r.windows,
	}
	if r.phaseS != nil {
		r.phaseS[r.inPhase] += max(r.lastDone-r.phaseAt, 0).Seconds()
		res.PhaseS, res.HoldFromS = r.phaseS, r.holdFrom.Seconds()
		if r.holdFrom < 0 {
			res.HoldFromS = -1
		}
	}
	if res.Requests == 0 {
		return res
	}
	var sum float64
	for _, l := range r.latencies {
		sum += l
	}
	res.MeanLatencyMs = sum / float64(res.Requests)
	slices.Sort(r.latencies)
	res.P50LatencyMs = stats.Percentile(r.latencies, 50)
	res.P99LatencyMs = stats.Percentile(r.latencies, 99)
	res.MaxLatencyMs = r.latencies[len(r.latencies)-1]
	res.MeanBatchSize = float64(r.rowsSent) / float64(r.batches)
	if res.DurationS > 0 {
		res.ThroughputRPS = float64(res.Requests) / res.DurationS
		res.MeanInSystem = r.area / res.DurationS
		res.Utilization = r.busyTotal.Seconds() / res.DurationS
	}
	if r.c.Profile.HasEnergy {
		joules := r.energyMJ/1000 + r.c.IdleWatts*r.lastDone.Seconds()
		rpj := float64(res.Requests) / joules
		res.EnergyJ, res.RequestsPerJoule = &joules, &rpj
	}
	return res
}
