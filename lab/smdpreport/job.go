package smdpreport

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/ratebatch/ratebatch/lab/preset"
	"github.com/ratebatch/ratebatch/policy/smdp"
)

// Options is one solve: the model at its load, the solver's options, and
// the policies to price against the optimum.
type Options struct {
	Profile preset.Profile
	// Model is Profile's lines with the arrival rate set.
	Model smdp.Model
	// Solve are the weights and solver bounds; Co is used as given unless
	// AutoCo, which sets it to the ad-hoc policy's average cost.
	Solve  smdp.Options
	AutoCo bool
	// Compare prices adhoc, batchmonitor, static:B_max and the pure
	// control-limit policy; Evaluate is a comma list of further policies
	// (adhoc, batchmonitor, static:B, limit:L).
	Compare  bool
	Evaluate string
}

// Job is a checked Options, ready to solve.
type Job struct {
	o      Options
	ev     *smdp.Evaluator
	others []named
}

type named struct {
	name   string
	policy []int
}

// New checks everything before the solve, which may take a while; its
// errors are the caller's input errors.
func New(o Options) (*Job, error) {
	if err := o.Model.Validate(); err != nil {
		return nil, err
	}
	if o.Solve.W2 != 0 && !o.Profile.HasEnergy {
		return nil, fmt.Errorf("--w2 %v weighs power, but %s has no published energy figures: give --beta and --zeta0, or --w2 0", o.Solve.W2, o.Profile.Name)
	}
	if o.AutoCo {
		var err error
		if o.Solve.Co, err = smdp.DefaultCo(o.Model, o.Solve.W1, o.Solve.W2, o.Solve.SMax); err != nil {
			return nil, err
		}
	}
	ev, err := smdp.NewEvaluator(o.Model, o.Solve)
	if err != nil {
		return nil, err
	}
	j := &Job{o: o, ev: ev}
	for _, spec := range strings.Split(o.Evaluate, ",") {
		if spec = strings.TrimSpace(spec); spec == "" {
			continue
		}
		pol, err := smdp.NamedPolicy(o.Model, o.Solve.SMax, spec)
		if err != nil {
			return nil, fmt.Errorf("--evaluate: %w", err)
		}
		j.others = append(j.others, named{spec, pol})
	}
	return j, nil
}

// Solve solves the optimum and prices the other policies against it.
func (j *Job) Solve(ctx context.Context) (smdp.Solution, []PolicyRow, error) {
	m, o := j.o.Model, j.o.Solve
	sol, err := smdp.Solve(ctx, m, o)
	if err != nil {
		return sol, nil, err
	}
	others := j.others
	if j.o.Compare {
		limit := min(sol.ControlLimit, o.SMax+1)
		others = append([]named{
			{"adhoc", smdp.AdHoc(m, o.SMax)},
			{"batchmonitor", smdp.BatchMonitor(m, o.SMax)},
			{fmt.Sprintf("static:%d", m.MaxBatch), smdp.Static(m, o.SMax, m.MaxBatch)},
			{fmt.Sprintf("limit:%d", limit), smdp.ControlLimit(m, o.SMax, limit)},
		}, others...)
	}
	if len(others) == 0 {
		return sol, nil, nil
	}
	energy := j.o.Profile.HasEnergy
	rows := []PolicyRow{newPolicyRow("optimal", sol.Evaluation, sol.ControlLimit, sol.G, m, energy)}
	for _, p := range others {
		res, err := j.ev.Evaluate(p.policy)
		if err != nil {
			return sol, nil, fmt.Errorf("evaluating %s: %w", p.name, err)
		}
		rows = append(rows, newPolicyRow(p.name, res, smdp.ControlLimitOf(p.policy), sol.G, m, energy))
	}
	return sol, rows, nil
}

// Run solves and prints the result: JSON (Report) or text on stdout,
// warnings about convergence and the state bound on stderr.
func (j *Job) Run(ctx context.Context, stdout, stderr io.Writer, asJSON bool) error {
	sol, rows, err := j.Solve(ctx)
	if err != nil {
		return err
	}
	j.warn(stderr, sol)
	if asJSON {
		return json.NewEncoder(stdout).Encode(j.report(sol, rows))
	}
	writeText(stdout, j.o.Profile, j.o.Model, j.o.Solve, j.o.AutoCo, sol, rows)
	return nil
}

func (j *Job) warn(stderr io.Writer, sol smdp.Solution) {
	if !sol.Converged {
		fmt.Fprintf(stderr, "ratebatch smdp: warning: not converged after %d sweeps (span %.3g >= epsilon %g); raise --iter-max\n",
			sol.Iterations, sol.GUpper-sol.GLower, j.o.Solve.Epsilon)
	}
	if !(sol.Delta < smdp.DeltaAccept) {
		fmt.Fprintf(stderr, "ratebatch smdp: warning: delta %.3g >= %g: the overflow state carries a real share of the cost; raise --smax\n",
			sol.Delta, smdp.DeltaAccept)
	}
}

// report is the solve as its JSON document.
func (j *Job) report(sol smdp.Solution, rows []PolicyRow) Report {
	m, o, prof := j.o.Model, j.o.Solve, j.o.Profile
	rep := Report{
		G: sol.G, Delta: sol.Delta, Iterations: sol.Iterations, ControlLimit: sol.ControlLimit, Policy: sol.Policy,
		Converged: sol.Converged, GLower: sol.GLower, GUpper: sol.GUpper,
		LatencyMs: sol.LatencyMs, OverflowCost: sol.OverflowCost, MeanBatch: sol.MeanBatch,
		Preset: prof.Name, Latency: m.Latency, MaxBatch: m.MaxBatch,
		Rho: m.Rho(), RateRPS: m.LambdaPerMs * 1000,
		W1: o.W1, W2: o.W2, SMax: o.SMax, Co: o.Co, Epsilon: o.Epsilon, Eta: sol.Eta,
		BatchMonitorBatch: smdp.BatchMonitorSize(m),
		Policies:          rows,
	}
	if prof.HasEnergy {
		rep.PowerW = floatRef(sol.PowerW)
		rep.RequestsPerJoule = requestsPerJoule(m, sol.PowerW)
		rep.BetaMJ, rep.Zeta0MJ = floatRef(m.BetaMJ), floatRef(m.Zeta0MJ)
	}
	return rep
}
