package main

import (
	"context"
	"encoding/json"
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
	if err := pop.Validate(); err != nil {
		return nil, fmt.Errorf("--clients/--think: %w", err)
	}
	j := &finiteJob{prof: prof, pop: pop, m: smdp.Model{Latency: prof.Latency, Energy: prof.KnownEnergy(), MaxBatch: prof.MaxBatch}}
	if set["latency-budget"] {
		for _, name := range []string{"w1", "w2"} {
			if set[name] {
				return nil, fmt.Errorf("--latency-budget chooses the weights itself; drop --%s", name)
			}
		}
		b, err := smdp.ParseBudget(f.latencyBudget)
		if err != nil {
			return nil, fmt.Errorf("--latency-budget: %w", err)
		}
		if !prof.HasEnergy {
			return nil, fmt.Errorf("--latency-budget trades latency for energy per request, but %s has no published energy figures: give --beta and --zeta0", prof.Name)
		}
		j.budget = &b
		return j, nil
	}
	w1, w2 := f.o.Solve.W1, f.o.Solve.W2
	switch {
	case !(w1 > 0):
		return nil, fmt.Errorf("--w1 (latency weight) must be > 0, got %v", w1)
	case !(w2 >= 0):
		return nil, fmt.Errorf("--w2 (energy weight) must be >= 0, got %v", w2)
	case w2 > 0 && !prof.HasEnergy:
		return nil, fmt.Errorf("--w2 %v weighs energy, but %s has no published energy figures: give --beta and --zeta0, or --w2 0", w2, prof.Name)
	}
	j.w1, j.w2 = w1, w2
	return j, nil
}

// finiteJob solves the closed loop: w1*latency + w2*energy per request, or
// the least energy per request within a latency budget.
type finiteJob struct {
	prof   preset.Profile
	m      smdp.Model
	pop    smdp.Population
	w1, w2 float64
	budget *smdp.Budget
}

// finiteFigures are one policy's long-run figures in the --json output;
// the energy figures are null without an energy line.
type finiteFigures struct {
	LatencyMs          float64  `json:"latency_ms"`
	EnergyPerRequestMJ *float64 `json:"energy_per_request_mj"`
	RequestsPerJoule   *float64 `json:"requests_per_joule"`
	ThroughputRPS      float64  `json:"throughput_rps"`
	PowerW             *float64 `json:"power_w"`
	MeanBatch          float64  `json:"mean_batch"`
}

type finitePolicyReport struct {
	Policy       []int  `json:"policy"`
	ControlLimit *int   `json:"control_limit"` // null when the table is not a control limit
	Summary      string `json:"summary"`
	finiteFigures
}

// finiteReport is the --clients --json output. The top-level figures are
// the optimum's (with a budget: the mixed policy's); policies holds the
// optimal table, or with a budget the two tables the optimum mixes,
// mix_state the state where they differ and mix the probability of
// following the second there.
type finiteReport struct {
	Preset   string  `json:"preset"`
	Clients  int     `json:"clients"`
	ThinkMs  float64 `json:"think_ms"`
	MaxBatch int     `json:"bmax"`
	W1       float64 `json:"w1"`
	W2       float64 `json:"w2"`
	finiteFigures
	Objective  *float64             `json:"objective,omitempty"`
	Iterations int                  `json:"iterations,omitempty"`
	Budget     string               `json:"budget,omitempty"`
	BudgetMs   *float64             `json:"budget_ms,omitempty"`
	Binding    *bool                `json:"binding,omitempty"`
	Mix        *float64             `json:"mix,omitempty"`
	MixState   *int                 `json:"mix_state,omitempty"`
	Share      []float64            `json:"share,omitempty"`
	Solves     int                  `json:"solves,omitempty"`
	Policies   []finitePolicyReport `json:"policies"`
	Adhoc      finiteFigures        `json:"adhoc"`
}

func (j *finiteJob) figures(ev smdp.FiniteEvaluation) finiteFigures {
	f := finiteFigures{LatencyMs: ev.LatencyMs, ThroughputRPS: 1000 * ev.ThroughputPerMs, MeanBatch: ev.MeanBatch}
	if j.prof.HasEnergy {
		f.EnergyPerRequestMJ, f.PowerW = floatRef(ev.EnergyPerRequestMJ), floatRef(ev.PowerW)
		f.RequestsPerJoule = floatRef(ev.RequestsPerJoule())
	}
	return f
}

func (j *finiteJob) policy(p []int, ev smdp.FiniteEvaluation) finitePolicyReport {
	r := finitePolicyReport{Policy: p, Summary: smdp.FinitePolicySummary(p), finiteFigures: j.figures(ev)}
	if l, ok := smdp.FiniteControlLimitOf(j.m, p); ok {
		r.ControlLimit = &l
	}
	return r
}

func floatRef(v float64) *float64 { return &v }

func (j *finiteJob) Run(ctx context.Context, stdout, _ io.Writer, asJSON bool) error {
	rep := finiteReport{Preset: j.prof.Name, Clients: j.pop.Clients, ThinkMs: j.pop.ThinkMs, MaxBatch: j.m.MaxBatch, W1: j.w1, W2: j.w2}
	adhoc, err := smdp.EvaluateFinite(j.m, j.pop, smdp.FiniteAdHoc(j.m, j.pop))
	if err != nil {
		return fmt.Errorf("evaluating ad-hoc: %w", err)
	}
	rep.Adhoc = j.figures(adhoc)
	var c smdp.FiniteConstrained
	var sol smdp.FiniteSolution
	if j.budget != nil {
		if c, err = smdp.SolveFiniteBudget(ctx, j.m, j.pop, *j.budget); err != nil {
			return err
		}
		rep.W1, rep.W2 = 1, c.W2
		rep.finiteFigures = j.figures(c.FiniteEvaluation)
		rep.Budget, rep.BudgetMs, rep.Binding = j.budget.String(), floatRef(c.BudgetMs), &c.Binding
		rep.Mix, rep.MixState, rep.Share, rep.Solves = floatRef(c.Mix), &c.MixState, c.Share, c.Solves
		rep.Policies = []finitePolicyReport{j.policy(c.First.Policy, c.First.FiniteEvaluation), j.policy(c.Second.Policy, c.Second.FiniteEvaluation)}
	} else {
		// min w1*L + w2*E is w1 * min (L + (w2/w1)*E).
		if sol, err = smdp.SolveFinite(ctx, j.m, j.pop, j.w2/j.w1); err != nil {
			return err
		}
		rep.finiteFigures = j.figures(sol.FiniteEvaluation)
		rep.Objective, rep.Iterations = floatRef(j.w1*sol.Objective), sol.Iterations
		rep.Policies = []finitePolicyReport{j.policy(sol.Policy, sol.FiniteEvaluation)}
	}
	if asJSON {
		return json.NewEncoder(stdout).Encode(rep)
	}
	m := j.m
	energy := "no energy figures"
	if j.prof.HasEnergy {
		energy = fmt.Sprintf("zeta(b) = %g*b + %g mJ", m.BetaMJ, m.Zeta0MJ)
	}
	fmt.Fprintf(stdout, "model %s: tau(b) = %g*b + %g ms, %s, B_max %d\n", j.prof.Name, m.AlphaMs, m.Tau0Ms, energy, m.MaxBatch)
	fmt.Fprintf(stdout, "closed loop: %d clients, exponential think time %.4g ms\n", j.pop.Clients, j.pop.ThinkMs)
	fmt.Fprintf(stdout, "ad-hoc:  %s\n", j.line(adhoc))
	describe := func(p finitePolicyReport) string {
		if p.ControlLimit != nil {
			return fmt.Sprintf("control limit %d (%s)", *p.ControlLimit, p.Summary)
		}
		return "table " + p.Summary
	}
	if j.budget == nil {
		fmt.Fprintf(stdout, "objective %g*latency_ms + %g*energy_mJ_per_request\n", j.w1, j.w2)
		fmt.Fprintf(stdout, "optimal: %s%s; objective %.6g (%d policy-iteration steps)\n", j.line(sol.FiniteEvaluation), j.vs(sol.FiniteEvaluation, adhoc), *rep.Objective, sol.Iterations)
		fmt.Fprintf(stdout, "policy: %s\n", describe(rep.Policies[0]))
		return nil
	}
	fmt.Fprintf(stdout, "budget %s = %.4g ms mean latency\n", j.budget, c.BudgetMs)
	if !c.Binding {
		fmt.Fprintf(stdout, "the budget does not bind: the least-energy policy meets it\n")
		fmt.Fprintf(stdout, "optimum: %s%s\n", j.line(c.FiniteEvaluation), j.vs(c.FiniteEvaluation, adhoc))
		fmt.Fprintf(stdout, "policy: %s\n", describe(rep.Policies[0]))
		return nil
	}
	fmt.Fprintf(stdout, "optimum: %s%s\n", j.line(c.FiniteEvaluation), j.vs(c.FiniteEvaluation, adhoc))
	first, second := rep.Policies[0], rep.Policies[1]
	fmt.Fprintf(stdout, "policy: %s (%.4g ms, %s)\n  mixed with %s (%.4g ms, %s)\n  in state %d with probability %.4f; w2 %.4g ms per mJ/request, %d solves\n",
		describe(first), c.First.LatencyMs, j.energyText(c.First.FiniteEvaluation),
		describe(second), c.Second.LatencyMs, j.energyText(c.Second.FiniteEvaluation), c.MixState, c.Mix, c.W2, c.Solves)
	return nil
}

// line is a policy's figures on one line, with its energy gain on ad-hoc.
func (j *finiteJob) line(ev smdp.FiniteEvaluation) string {
	s := fmt.Sprintf("latency %.4g ms", ev.LatencyMs)
	if j.prof.HasEnergy {
		s += fmt.Sprintf(", %s, %.4g req/J, power %.4g W", j.energyText(ev), ev.RequestsPerJoule(), ev.PowerW)
	}
	return s + fmt.Sprintf(", %.5g req/s, mean batch %.3g", 1000*ev.ThroughputPerMs, ev.MeanBatch)
}

// vs is a policy's gain on ad-hoc in requests per joule and latency.
func (j *finiteJob) vs(ev, adhoc smdp.FiniteEvaluation) string {
	if !j.prof.HasEnergy {
		return fmt.Sprintf(" (latency %+.1f%% vs ad-hoc)", 100*(ev.LatencyMs/adhoc.LatencyMs-1))
	}
	return fmt.Sprintf(" (req/J %+.1f%%, latency %+.1f%% vs ad-hoc)", 100*(ev.RequestsPerJoule()/adhoc.RequestsPerJoule()-1), 100*(ev.LatencyMs/adhoc.LatencyMs-1))
}

func (j *finiteJob) energyText(ev smdp.FiniteEvaluation) string {
	if !j.prof.HasEnergy {
		return "energy unknown"
	}
	return fmt.Sprintf("%.4g mJ/req", ev.EnergyPerRequestMJ)
}
