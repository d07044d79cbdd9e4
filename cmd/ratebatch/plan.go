package main

import (
	"context"
	"encoding/json"
	"flag"
	"io"

	"github.com/ratebatch/ratebatch/lab/capacity"
	"github.com/ratebatch/ratebatch/lab/preset"
	"github.com/ratebatch/ratebatch/policy/batchcost"
)

func init() {
	register("plan", "closed-form latency bounds of ad-hoc batching and the highest rate under a latency target", runPlan)
}

func runPlan(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("plan", stderr)
	model := preset.BindFlags(fs)
	rate := fs.Float64("rate", 0, "arrival rate in requests/s")
	rho := fs.Float64("rho", 0, "load rho = lambda*alpha (unbounded batches: mu = 1/alpha); 0 <= rho < 1")
	latency := fs.Float64("latency-ms", 0, "mean latency target in ms: report the highest rate whose bound meets it")
	asJSON := fs.Bool("json", false, "print one JSON object")
	fleet := fs.Bool("fleet", false, "with --rate (the total) and --latency-ms: how many GPUs of this profile, and at what requests per joule")
	idle := fs.Float64("idle-watts", 0, "--fleet: each GPU's idle power in W")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *fleet {
		return planFleet(fs, model, *rate, *latency, *idle, *asJSON, stdout, stderr)
	}
	in, err := planInput(fs, model, *rate, *rho, *latency)
	if err != nil {
		return usagef(stderr, "plan", "%v", err)
	}
	rep, err := capacity.NewPlan(in)
	if err != nil {
		return usagef(stderr, "plan", "%v", err)
	}
	if *asJSON {
		return json.NewEncoder(stdout).Encode(rep)
	}
	rep.WriteText(stdout)
	return nil
}

// planInput is the question the flags ask; an error is a usage error.
func planInput(fs *flag.FlagSet, model *preset.Flags, rate, rho, latency float64) (capacity.PlanInput, error) {
	set := flagsSet(fs)
	if set["bmax"] {
		return capacity.PlanInput{}, errorf("--bmax does not apply: the closed-form bounds assume unbounded batches")
	}
	prof, err := model.Profile()
	if err != nil {
		return capacity.PlanInput{}, err
	}
	in := capacity.PlanInput{Name: prof.Name, Latency: prof.Latency}
	if prof.HasEnergy {
		in.Energy = &prof.Energy
	}
	switch {
	case countSet(set, "rate", "rho", "latency-ms") == 0:
		return in, errorf("give --rate RPS, --rho R or --latency-ms X")
	case set["rate"] && set["rho"]:
		return in, errorf("give only one of --rate and --rho")
	case set["rate"] && !(rate >= 0):
		return in, errorf("--rate must be >= 0 requests/s, got %v", rate)
	case set["rate"]:
		in.LambdaPerMs = rate / 1000
	case set["rho"] && !(rho >= 0 && rho < 1):
		return in, errorf("--rho must be in [0, 1), got %v (rho >= 1 is unstable)", rho)
	case set["rho"]:
		in.LambdaPerMs = rho / prof.AlphaMs
	}
	if set["latency-ms"] {
		in.TargetMs, in.AtTarget = &latency, !set["rate"] && !set["rho"]
	}
	return in, nil
}

// planFleet answers --fleet.
func planFleet(fs *flag.FlagSet, model *preset.Flags, rate, latency, idle float64, asJSON bool, stdout, stderr io.Writer) error {
	if set := flagsSet(fs); !set["rate"] || !set["latency-ms"] || set["rho"] || set["bmax"] {
		return usagef(stderr, "plan", "--fleet takes --rate (the total) and --latency-ms, not --rho or --bmax")
	}
	prof, err := model.Profile()
	if err != nil {
		return usagef(stderr, "plan", "%v", err)
	}
	var e *batchcost.Energy
	if prof.HasEnergy {
		e = &prof.Energy
	}
	plans, err := capacity.Model(prof.Latency).PlanFleet(rate, latency, e, idle)
	if err != nil {
		return usagef(stderr, "plan", "%v", err)
	}
	if asJSON {
		return json.NewEncoder(stdout).Encode(plans)
	}
	capacity.WriteFleetText(stdout, prof.Name, rate, latency, idle, plans)
	return nil
}
