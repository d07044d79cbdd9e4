package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/ratebatch/ratebatch/lab/preset"
	"github.com/ratebatch/ratebatch/lab/smdpreport"
	"github.com/ratebatch/ratebatch/policy/smdp"
)

func init() {
	register("smdp", "solve the SMDP-optimal batching policy and price other policies on the same model", runSMDP)
}

// smdpFlags are smdp's flags; the solver's are bound to smdp.Options.
type smdpFlags struct {
	o                           smdpreport.Options
	model                       *preset.Flags
	rho, rate                   float64
	co, latencyBudget, gridRhos string
	asJSON                      bool
	clients                     int
	think                       time.Duration
}

func bindSMDPFlags(fs *flag.FlagSet) *smdpFlags {
	f := &smdpFlags{}
	f.model = preset.BindFlags(fs)
	fs.Float64Var(&f.rho, "rho", 0, "load rho = lambda/mu(B_max), where mu(b) = b/tau(b); 0 < rho < 1")
	fs.Float64Var(&f.rate, "rate", 0, "arrival rate in requests/s (instead of --rho)")
	fs.Float64Var(&f.o.Solve.W1, "w1", 1, "weight of mean latency (per ms) in the objective")
	fs.Float64Var(&f.o.Solve.W2, "w2", 0, "weight of mean power (per W) in the objective; needs energy figures")
	fs.IntVar(&f.o.Solve.SMax, "smax", smdp.DefaultSMax, "largest exact state (requests); an overflow state stands for more")
	fs.StringVar(&f.co, "co", "auto", "abstract cost per ms in the overflow state; auto = the ad-hoc policy's average cost")
	fs.Float64Var(&f.o.Solve.Epsilon, "epsilon", smdp.DefaultEpsilon, "relative value iteration stops when span(J_new - J) < epsilon")
	fs.IntVar(&f.o.Solve.IterMax, "iter-max", smdp.DefaultIterMax, "relative value iteration sweep cap")
	fs.BoolVar(&f.o.Compare, "compare", false, "also price adhoc, batchmonitor, static:B_max and the pure control-limit policy against the optimum; "+
		"without --rho or --rate, at each load of --grid")
	fs.StringVar(&f.gridRhos, "grid", joinFloats(smdpreport.DefaultGrid), "with --compare and no --rho or --rate: the loads rho to compare at, a comma list")
	fs.StringVar(&f.o.Evaluate, "evaluate", "", "comma list of policies to price against the optimum: adhoc, batchmonitor, static:B, limit:L")
	fs.BoolVar(&f.asJSON, "json", false, "print one JSON object (with --grid: an array, one per load)")
	fs.StringVar(&f.latencyBudget, "latency-budget", "", "instead of weights: the least-power policy whose mean latency is within this budget, "+
		"a factor of ad-hoc's mean latency (1.10x) or a duration (4ms); needs energy figures")
	fs.IntVar(&f.clients, "clients", 0, "instead of Poisson arrivals: a closed loop of N synchronous clients, each sending its next request "+
		"an exponential --think time after its answer; solved exactly, with weights on mean latency and energy per request or with --latency-budget "+
		"(least energy per request)")
	fs.DurationVar(&f.think, "think", 0, "with --clients: the clients' mean think time (0.3ms)")
	return f
}

// job is what smdp runs: one solve, a grid of them, or the budget optimum.
type smdpJob interface {
	Run(ctx context.Context, stdout, stderr io.Writer, asJSON bool) error
}

func runSMDP(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("smdp", stderr)
	f := bindSMDPFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	job, err := f.job(fs)
	if err != nil {
		return usagef(stderr, "smdp", "%v", err)
	}
	return job.Run(ctx, stdout, stderr, f.asJSON)
}

// job checks the flags and returns the job they ask for; an error is a
// usage error.
func (f *smdpFlags) job(fs *flag.FlagSet) (smdpJob, error) {
	prof, err := f.model.Profile()
	if err != nil {
		return nil, err
	}
	set := flagsSet(fs)
	if set["clients"] || set["think"] {
		return f.finite(set, prof)
	}
	f.o.Profile = prof
	f.o.Model = smdp.ModelFor(prof.Latency, prof.KnownEnergy(), prof.MaxBatch, 0)
	grid := f.o.Compare && countSet(set, "rho", "rate") == 0
	if set["grid"] && !grid {
		return nil, errors.New("--grid is the loads of --compare without --rho or --rate")
	}
	if !grid {
		if err := (smdpreport.Load{Rho: given(set, "rho", &f.rho), Rate: given(set, "rate", &f.rate)}).Apply(&f.o.Model); err != nil {
			return nil, err
		}
	}
	if set["latency-budget"] {
		return f.budget(set)
	}
	if f.co != "auto" {
		if f.o.Solve.Co, err = strconv.ParseFloat(f.co, 64); err != nil {
			return nil, fmt.Errorf("--co must be auto or a number >= 0, got %q", f.co)
		}
	}
	f.o.AutoCo = f.co == "auto"
	if grid {
		rhos, err := parseFloats(f.gridRhos)
		if err != nil {
			return nil, fmt.Errorf("--grid: %w", err)
		}
		return smdpreport.NewGrid(f.o, rhos)
	}
	return smdpreport.New(f.o)
}

// budget is the --latency-budget job.
func (f *smdpFlags) budget(set map[string]bool) (smdpJob, error) {
	for _, name := range []string{"w1", "w2", "co", "compare", "evaluate", "epsilon", "iter-max"} {
		if set[name] {
			return nil, fmt.Errorf("--latency-budget chooses the weights itself; drop --%s", name)
		}
	}
	return smdpreport.NewBudget(f.o.Profile, f.o.Model, f.latencyBudget, f.o.Solve.SMax)
}

// finite is the --clients job: the closed-loop model of smdp.SolveFinite.
func (f *smdpFlags) finite(set map[string]bool, prof preset.Profile) (smdpJob, error) {
	if !set["clients"] || !set["think"] {
		return nil, errors.New("--clients N and --think DURATION go together: the closed loop needs both the population and its think time")
	}
	for _, name := range []string{"rho", "rate", "co", "compare", "evaluate", "grid", "smax", "epsilon", "iter-max"} {
		if set[name] {
			return nil, fmt.Errorf("--clients solves the closed loop exactly, its load set by --clients and --think; drop --%s", name)
		}
	}
	pop := smdp.Population{Clients: f.clients, ThinkMs: float64(f.think) / float64(time.Millisecond)}
	if !set["latency-budget"] {
		return smdpreport.NewFinite(prof, pop, f.o.Solve.W1, f.o.Solve.W2, nil)
	}
	for _, name := range []string{"w1", "w2"} {
		if set[name] {
			return nil, fmt.Errorf("--latency-budget chooses the weights itself; drop --%s", name)
		}
	}
	b, err := smdp.ParseBudget(f.latencyBudget)
	if err != nil {
		return nil, fmt.Errorf("--latency-budget: %w", err)
	}
	return smdpreport.NewFinite(prof, pop, 0, 0, &b)
}
