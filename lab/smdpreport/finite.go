package smdpreport

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/ratebatch/ratebatch/lab/preset"
	"github.com/ratebatch/ratebatch/policy/smdp"
)

// Finite solves the closed loop of smdp.SolveFinite (`ratebatch smdp
// --clients N --think T`): the policy least in w1*latency + w2*energy per
// request, or the least energy per request within a latency budget.
type Finite struct {
	prof   preset.Profile
	m      smdp.Model
	pop    smdp.Population
	w1, w2 float64
	budget *smdp.Budget
}

// NewFinite checks the closed loop and its objective: the weights w1 and w2
// when budget is nil, else the budget (which needs energy figures). Its
// errors are the caller's input errors.
func NewFinite(prof preset.Profile, pop smdp.Population, w1, w2 float64, budget *smdp.Budget) (*Finite, error) {
	if err := pop.Validate(); err != nil {
		return nil, fmt.Errorf("--clients/--think: %w", err)
	}
	j := &Finite{prof: prof, pop: pop, m: smdp.Model{Latency: prof.Latency, Energy: prof.KnownEnergy(), MaxBatch: prof.MaxBatch}}
	if budget != nil {
		if !prof.HasEnergy {
			return nil, fmt.Errorf("--latency-budget trades latency for energy per request, but %s has no published energy figures: give --beta and --zeta0", prof.Name)
		}
		j.budget = budget
		return j, nil
	}
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

// FiniteReport is the --clients --json output. The top-level figures are
// the optimum's (with a budget: the mixed policy's); policies holds the
// optimal table, or with a budget the two tables the optimum mixes,
// mix_state the state where they differ and mix the probability of
// following the second there.
type FiniteReport struct {
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

func (j *Finite) figures(ev smdp.FiniteEvaluation) finiteFigures {
	f := finiteFigures{LatencyMs: ev.LatencyMs, ThroughputRPS: 1000 * ev.ThroughputPerMs, MeanBatch: ev.MeanBatch}
	if j.prof.HasEnergy {
		f.EnergyPerRequestMJ, f.PowerW = floatRef(ev.EnergyPerRequestMJ), floatRef(ev.PowerW)
		f.RequestsPerJoule = floatRef(ev.RequestsPerJoule())
	}
	return f
}

func (j *Finite) policy(p []int, ev smdp.FiniteEvaluation) finitePolicyReport {
	r := finitePolicyReport{Policy: p, Summary: smdp.FinitePolicySummary(p), finiteFigures: j.figures(ev)}
	if l, ok := smdp.FiniteControlLimitOf(j.m, p); ok {
		r.ControlLimit = &l
	}
	return r
}

// finiteResult is what a solve found: the ad-hoc baseline, and either the
// weighted optimum (sol) or the budget's (c).
type finiteResult struct {
	rep   FiniteReport
	adhoc smdp.FiniteEvaluation
	sol   smdp.FiniteSolution
	c     smdp.FiniteConstrained
}

// Solve solves the closed loop and prices ad-hoc on it.
func (j *Finite) Solve(ctx context.Context) (FiniteReport, error) {
	r, err := j.solve(ctx)
	return r.rep, err
}

func (j *Finite) solve(ctx context.Context) (finiteResult, error) {
	var r finiteResult
	r.rep = FiniteReport{Preset: j.prof.Name, Clients: j.pop.Clients, ThinkMs: j.pop.ThinkMs, MaxBatch: j.m.MaxBatch, W1: j.w1, W2: j.w2}
	var err error
	if r.adhoc, err = smdp.EvaluateFinite(j.m, j.pop, smdp.FiniteAdHoc(j.m, j.pop)); err != nil {
		return r, fmt.Errorf("evaluating ad-hoc: %w", err)
	}
	r.rep.Adhoc = j.figures(r.adhoc)
	if j.budget != nil {
		if r.c, err = smdp.SolveFiniteBudget(ctx, j.m, j.pop, *j.budget); err != nil {
			return r, err
		}
		c := r.c
		r.rep.W1, r.rep.W2 = 1, c.W2
		r.rep.finiteFigures = j.figures(c.FiniteEvaluation)
		r.rep.Budget, r.rep.BudgetMs, r.rep.Binding = j.budget.String(), floatRef(c.BudgetMs), &c.Binding
		r.rep.Mix, r.rep.MixState, r.rep.Share, r.rep.Solves = floatRef(c.Mix), &c.MixState, c.Share, c.Solves
		r.rep.Policies = []finitePolicyReport{j.policy(c.First.Policy, c.First.FiniteEvaluation), j.policy(c.Second.Policy, c.Second.FiniteEvaluation)}
		return r, nil
	}
	// min w1*L + w2*E is w1 * min (L + (w2/w1)*E).
	if r.sol, err = smdp.SolveFinite(ctx, j.m, j.pop, j.w2/j.w1); err != nil {
		return r, err
	}
	r.rep.finiteFigures = j.figures(r.sol.FiniteEvaluation)
	r.rep.Objective, r.rep.Iterations = floatRef(j.w1*r.sol.Objective), r.sol.Iterations
	r.rep.Policies = []finitePolicyReport{j.policy(r.sol.Policy, r.sol.FiniteEvaluation)}
	return r, nil
}

// Run solves and prints the report, as text or as one JSON object.
func (j *Finite) Run(ctx context.Context, stdout, _ io.Writer, asJSON bool) error {
	r, err := j.solve(ctx)
	if err != nil {
		return err
	}
	if asJSON {
		return json.NewEncoder(stdout).Encode(r.rep)
	}
	j.writeText(stdout, r)
	return nil
}

func (j *Finite) writeText(w io.Writer, r finiteResult) {
	m := j.m
	energy := "no energy figures"
	if j.prof.HasEnergy {
		energy = fmt.Sprintf("zeta(b) = %g*b + %g mJ", m.BetaMJ, m.Zeta0MJ)
	}
	fmt.Fprintf(w, "model %s: tau(b) = %g*b + %g ms, %s, B_max %d\n", j.prof.Name, m.AlphaMs, m.Tau0Ms, energy, m.MaxBatch)
	fmt.Fprintf(w, "closed loop: %d clients, exponential think time %.4g ms\n", j.pop.Clients, j.pop.ThinkMs)
	fmt.Fprintf(w, "ad-hoc:  %s\n", j.line(r.adhoc))
	if j.budget == nil {
		fmt.Fprintf(w, "objective %g*latency_ms + %g*energy_mJ_per_request\n", j.w1, j.w2)
		fmt.Fprintf(w, "optimal: %s%s; objective %.6g (%d policy-iteration steps)\n", j.line(r.sol.FiniteEvaluation), j.vs(r.sol.FiniteEvaluation, r.adhoc), *r.rep.Objective, r.sol.Iterations)
		fmt.Fprintf(w, "policy: %s\n", describeFinite(r.rep.Policies[0]))
		return
	}
	c := r.c
	fmt.Fprintf(w, "budget %s = %.4g ms mean latency\n", j.budget, c.BudgetMs)
	if !c.Binding {
		fmt.Fprintf(w, "the budget does not bind: the least-energy policy meets it\n")
		fmt.Fprintf(w, "optimum: %s%s\n", j.line(c.FiniteEvaluation), j.vs(c.FiniteEvaluation, r.adhoc))
		fmt.Fprintf(w, "policy: %s\n", describeFinite(r.rep.Policies[0]))
		return
	}
	fmt.Fprintf(w, "optimum: %s%s\n", j.line(c.FiniteEvaluation), j.vs(c.FiniteEvaluation, r.adhoc))
	first, second := r.rep.Policies[0], r.rep.Policies[1]
	fmt.Fprintf(w, "policy: %s (%.4g ms, %s)\n  mixed with %s (%.4g ms, %s)\n  in state %d with probability %.4f; w2 %.4g ms per mJ/request, %d solves\n",
		describeFinite(first), c.First.LatencyMs, j.energyText(c.First.FiniteEvaluation),
		describeFinite(second), c.Second.LatencyMs, j.energyText(c.Second.FiniteEvaluation), c.MixState, c.Mix, c.W2, c.Solves)
}

func describeFinite(p finitePolicyReport) string {
	if p.ControlLimit != nil {
		return fmt.Sprintf("control limit %d (%s)", *p.ControlLimit, p.Summary)
	}
	return "table " + p.Summary
}

// line is a policy's figures on one line, with its energy gain on ad-hoc.
func (j *Finite) line(ev smdp.FiniteEvaluation) string {
	s := fmt.Sprintf("latency %.4g ms", ev.LatencyMs)
	if j.prof.HasEnergy {
		s += fmt.Sprintf(", %s, %.4g req/J, power %.4g W", j.energyText(ev), ev.RequestsPerJoule(), ev.PowerW)
	}
	return s + fmt.Sprintf(", %.5g req/s, mean batch %.3g", 1000*ev.ThroughputPerMs, ev.MeanBatch)
}

// vs is a policy's gain on ad-hoc in requests per joule and latency.
func (j *Finite) vs(ev, adhoc smdp.FiniteEvaluation) string {
	if !j.prof.HasEnergy {
		return fmt.Sprintf(" (latency %+.1f%% vs ad-hoc)", 100*(ev.LatencyMs/adhoc.LatencyMs-1))
	}
	return fmt.Sprintf(" (req/J %+.1f%%, latency %+.1f%% vs ad-hoc)", 100*(ev.RequestsPerJoule()/adhoc.RequestsPerJoule()-1), 100*(ev.LatencyMs/adhoc.LatencyMs-1))
}

func (j *Finite) energyText(ev smdp.FiniteEvaluation) string {
	if !j.prof.HasEnergy {
		return "energy unknown"
	}
	return fmt.Sprintf("%.4g mJ/req", ev.EnergyPerRequestMJ)
}
