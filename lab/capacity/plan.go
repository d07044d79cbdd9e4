package capacity

import (
	"fmt"
	"io"

	"github.com/ratebatch/ratebatch/policy/batchcost"
)

// Plan is the `ratebatch plan` report of a model: the closed-form bounds
// of ad-hoc batching at one rate, and with a latency target the highest
// rate that meets it. Its JSON keys phi_ms, phi0_ms, phi1_ms, rho and
// max_rate_rps are the CLI contract.
type Plan struct {
	PhiMs             float64  `json:"phi_ms"`
	Phi0Ms            float64  `json:"phi0_ms"`
	Phi1Ms            float64  `json:"phi1_ms"`
	Rho               float64  `json:"rho"`
	MaxRateRPS        *float64 `json:"max_rate_rps,omitempty"`      // with a target
	TargetLatencyMs   *float64 `json:"target_latency_ms,omitempty"` // with a target
	RateRPS           float64  `json:"rate_rps"`
	MinMeanBatch      float64  `json:"min_mean_batch"`
	MinRequestsPerJ   *float64 `json:"min_requests_per_joule"` // null without energy figures
	StabilityLimitRPS float64  `json:"stability_limit_rps"`
	Preset            string   `json:"preset"`
	batchcost.Latency
}

// PlanInput names the model and the question.
type PlanInput struct {
	Name string
	batchcost.Latency
	Energy *batchcost.Energy // nil without energy figures
	// LambdaPerMs is the arrival rate in requests per ms; with TargetMs
	// and AtTarget the bounds are reported at the answer instead.
	LambdaPerMs float64
	TargetMs    *float64 // mean latency target, nil: none
	AtTarget    bool
}

// NewPlan answers in. Its errors are about the input (a target below
// reach, a rate beyond the stability limit).
func NewPlan(in PlanInput) (Plan, error) {
	m := Model(in.Latency)
	rep := Plan{Preset: in.Name, Latency: in.Latency, StabilityLimitRPS: 1000 * m.MaxRatePerMs()}
	lambda := in.LambdaPerMs
	if in.TargetMs != nil {
		maxRate, err := m.MaxRate(*in.TargetMs)
		if err != nil {
			return rep, fmt.Errorf("--latency-ms: %w", err)
		}
		rep.MaxRateRPS, rep.TargetLatencyMs = ref(1000*maxRate), ref(*in.TargetMs)
		if in.AtTarget {
			lambda = maxRate // report the bounds at the answer
		}
	}
	lat, err := m.Latency(lambda)
	if err != nil {
		return rep, err
	}
	rep.PhiMs, rep.Phi0Ms, rep.Phi1Ms, rep.Rho, rep.RateRPS = lat.PhiMs, lat.Phi0Ms, lat.Phi1Ms, lat.Rho, 1000*lambda
	if rep.MinMeanBatch, err = m.MinMeanBatch(lambda); err != nil {
		return rep, err
	}
	if in.Energy != nil {
		rpj, err := m.MinRequestsPerJoule(lambda, *in.Energy)
		if err != nil {
			return rep, err
		}
		rep.MinRequestsPerJ = ref(rpj)
	}
	return rep, nil
}

// WriteText prints the plan as the plan command's text.
func (rep Plan) WriteText(w io.Writer) {
	fmt.Fprintf(w, "model %s: tau(b) = %g*b + %g ms; ad-hoc batching, unbounded batches: stable below %.6g req/s\n",
		rep.Preset, rep.AlphaMs, rep.Tau0Ms, rep.StabilityLimitRPS)
	if rep.MaxRateRPS != nil {
		fmt.Fprintf(w, "highest rate with mean latency <= %g ms: %.6g req/s\n", *rep.TargetLatencyMs, *rep.MaxRateRPS)
	}
	fmt.Fprintf(w, "at %.6g req/s (rho = lambda*alpha = %.4g):\n", rep.RateRPS, rep.Rho)
	fmt.Fprintf(w, "  mean latency <= phi = %.6g ms  (phi0 %.6g, phi1 %.6g)\n", rep.PhiMs, rep.Phi0Ms, rep.Phi1Ms)
	fmt.Fprintf(w, "  mean batch >= %.4g\n", rep.MinMeanBatch)
	if rep.MinRequestsPerJ != nil {
		fmt.Fprintf(w, "  energy efficiency >= %.4g requests/J\n", *rep.MinRequestsPerJ)
	} else {
		fmt.Fprintf(w, "  energy efficiency: no energy figures for %s (give --beta and --zeta0)\n", rep.Preset)
	}
}

func ref(v float64) *float64 { return &v }
