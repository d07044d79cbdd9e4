package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/ratebatch/ratebatch/lab/capacity"
	"github.com/ratebatch/ratebatch/policy/batchcost"
)

func init() {
	register("plan", "closed-form latency bounds of ad-hoc batching and the highest rate under a latency target", runPlan)
}

// planReport is the --json output; phi_ms, phi0_ms, phi1_ms, rho and
// max_rate_rps are the CLI contract.
type planReport struct {
	PhiMs             float64  `json:"phi_ms"`
	Phi0Ms            float64  `json:"phi0_ms"`
	Phi1Ms            float64  `json:"phi1_ms"`
	Rho               float64  `json:"rho"`
	MaxRateRPS        *float64 `json:"max_rate_rps,omitempty"`      // with --latency-ms
	TargetLatencyMs   *float64 `json:"target_latency_ms,omitempty"` // with --latency-ms
	RateRPS           float64  `json:"rate_rps"`
	MinMeanBatch      float64  `json:"min_mean_batch"`
	MinRequestsPerJ   *float64 `json:"min_requests_per_joule"` // null without energy figures
	StabilityLimitRPS float64  `json:"stability_limit_rps"`
	Preset            string   `json:"preset"`
	batchcost.Latency
}

func runPlan(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("plan", stderr)
	model := addProfileFlags(fs)
	rate := fs.Float64("rate", 0, "arrival rate in requests/s")
	rho := fs.Float64("rho", 0, "load rho = lambda*alpha (unbounded batches: mu = 1/alpha); 0 <= rho < 1")
	latency := fs.Float64("latency-ms", 0, "mean latency target in ms: report the highest rate whose bound meets it")
	asJSON := fs.Bool("json", false, "print one JSON object")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	usageErr := func(format string, a ...any) error {
		fmt.Fprintf(stderr, "ratebatch plan: "+format+"\n", a...)
		return errUsage
	}
	set := flagsSet(fs)
	if set["bmax"] {
		return usageErr("--bmax does not apply: the closed-form bounds assume unbounded batches")
	}
	prof, err := model.profile(fs)
	if err != nil {
		return usageErr("%v", err)
	}
	m := capacity.Model(prof.Latency)
	if countSet(set, "rate", "rho", "latency-ms") == 0 {
		return usageErr("give --rate RPS, --rho R or --latency-ms X")
	}
	if set["rate"] && set["rho"] {
		return usageErr("give only one of --rate and --rho")
	}

	rep := planReport{Preset: prof.Name, Latency: prof.Latency, StabilityLimitRPS: 1000 * m.MaxRatePerMs()}
	var lambda float64 // requests per ms
	switch {
	case set["rate"]:
		if !(*rate >= 0) {
			return usageErr("--rate must be >= 0 requests/s, got %v", *rate)
		}
		lambda = *rate / 1000
	case set["rho"]:
		if !(*rho >= 0 && *rho < 1) {
			return usageErr("--rho must be in [0, 1), got %v (rho >= 1 is unstable)", *rho)
		}
		lambda = *rho / m.AlphaMs
	}
	if set["latency-ms"] {
		maxRate, err := m.MaxRate(*latency)
		if err != nil {
			return usageErr("--latency-ms: %v", err)
		}
		rep.MaxRateRPS, rep.TargetLatencyMs = floatRef(1000*maxRate), floatRef(*latency)
		if !set["rate"] && !set["rho"] {
			lambda = maxRate // report the bounds at the answer
		}
	}
	lat, err := m.Latency(lambda)
	if err != nil {
		return usageErr("%v", err)
	}
	rep.PhiMs, rep.Phi0Ms, rep.Phi1Ms, rep.Rho, rep.RateRPS = lat.PhiMs, lat.Phi0Ms, lat.Phi1Ms, lat.Rho, 1000*lambda
	if rep.MinMeanBatch, err = m.MinMeanBatch(lambda); err != nil {
		return err
	}
	if prof.HasEnergy {
		rpj, err := m.MinRequestsPerJoule(lambda, prof.Energy)
		if err != nil {
			return usageErr("%v", err)
		}
		rep.MinRequestsPerJ = floatRef(rpj)
	}

	if *asJSON {
		return json.NewEncoder(stdout).Encode(rep)
	}
	fmt.Fprintf(stdout, "model %s: tau(b) = %g*b + %g ms; ad-hoc batching, unbounded batches: stable below %.6g req/s\n",
		prof.Name, m.AlphaMs, m.Tau0Ms, rep.StabilityLimitRPS)
	if rep.MaxRateRPS != nil {
		fmt.Fprintf(stdout, "highest rate with mean latency <= %g ms: %.6g req/s\n", *latency, *rep.MaxRateRPS)
	}
	fmt.Fprintf(stdout, "at %.6g req/s (rho = lambda*alpha = %.4g):\n", rep.RateRPS, rep.Rho)
	fmt.Fprintf(stdout, "  mean latency <= phi = %.6g ms  (phi0 %.6g, phi1 %.6g)\n", rep.PhiMs, rep.Phi0Ms, rep.Phi1Ms)
	fmt.Fprintf(stdout, "  mean batch >= %.4g\n", rep.MinMeanBatch)
	if rep.MinRequestsPerJ != nil {
		fmt.Fprintf(stdout, "  energy efficiency >= %.4g requests/J\n", *rep.MinRequestsPerJ)
	} else {
		fmt.Fprintf(stdout, "  energy efficiency: no energy figures for %s (give --beta and --zeta0)\n", prof.Name)
	}
	return nil
}
