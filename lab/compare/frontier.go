package compare

import (
	"context"
	"fmt"
	"slices"
	"strconv"

	"github.com/ratebatch/ratebatch/lab/plot"
	"github.com/ratebatch/ratebatch/lab/preset"
	"github.com/ratebatch/ratebatch/lab/sim"
	"github.com/ratebatch/ratebatch/policy"
	"github.com/ratebatch/ratebatch/policy/smdp"
)

// FrontierBudgets are the budgets the budget policy is simulated at on
// every grid point, as factors of ad-hoc's mean latency.
var FrontierBudgets = []float64{1.05, 1.10, 1.25, 1.5, 2}

// FrontierWeights are the power weights w2 whose weighted optimum the
// frontier table lists (ms of mean latency per W).
var FrontierWeights = []float64{0, 0.1, 1}

// frontierPlotRhos are the loads drawn as frontier plots (all are tabled).
var frontierPlotRhos = []float64{0.1, 0.5, 0.9}

// Frontier is the latency-energy trade-off at one preset and load: the
// constrained optimum's curve, the weighted optima on it, and the budget
// policy simulated at several budgets.
type Frontier struct {
	Preset string  `json:"preset"`
	Rho    float64 `json:"rho"`
	// AdhocMs and AdhocRPJ are ad-hoc's exact figures, the budgets' base.
	AdhocMs  float64 `json:"adhoc_exact_ms"`
	AdhocRPJ float64 `json:"adhoc_exact_rpj"`
	// Curve holds the vertices of the constrained optimum (smdp.Frontier),
	// fastest first.
	Curve    []Vertex      `json:"curve"`
	Weighted []Vertex      `json:"weighted"` // per FrontierWeights
	Budgets  []BudgetPoint `json:"budgets"`  // per FrontierBudgets
	// SimAdhocMs is ad-hoc's simulated mean latency on the same arrivals as
	// the budget runs: the base their latency is judged against.
	SimAdhocMs float64 `json:"sim_adhoc_ms"`
}

// Vertex is one control-limit policy on the frontier.
type Vertex struct {
	W2        float64 `json:"w2,omitempty"`
	Limit     int     `json:"control_limit"`
	LatencyMs float64 `json:"mean_latency_ms"`
	RPJ       float64 `json:"requests_per_joule"`
}

// BudgetPoint is the budget policy at one budget: the exact constrained
// optimum and the simulated policy.
type BudgetPoint struct {
	Factor     float64 `json:"factor"`
	BudgetMs   float64 `json:"budget_ms"`
	OptMs      float64 `json:"optimum_ms"`
	OptRPJ     float64 `json:"optimum_rpj"`
	Limits     [2]int  `json:"control_limits"`
	Mix        float64 `json:"mix"`
	W2         float64 `json:"w2"`
	SimMs      float64 `json:"sim_ms"`
	SimP99Ms   float64 `json:"sim_p99_ms"`
	SimRPJ     float64 `json:"sim_rpj"`
	RPJGapPct  float64 `json:"rpj_gap_pct"`  // simulated vs the optimum's
	OverPct    float64 `json:"over_pct"`     // simulated latency vs factor x simulated ad-hoc
	OverOptPct float64 `json:"over_opt_pct"` // simulated latency vs the exact budget
}

// rpj is requests per joule at rate lambda (req/ms) and power (W = mJ/ms).
func rpj(lambdaPerMs, powerW float64) float64 { return 1000 * lambdaPerMs / powerW }

// frontierJobs adds one job per grid point computing its Frontier.
func (o *Options) frontierJobs(rep *Report) []job {
	rep.Frontier = make([]Frontier, len(o.Presets)*len(o.Rhos))
	var jobs []job
	for i, p := range o.Presets {
		for j, rho := range o.Rhos {
			k := i*len(o.Rhos) + j
			jobs = append(jobs, job{cost: rho * float64(p.MaxBatch), what: fmt.Sprintf("%s rho %.2g frontier", p.Name, rho),
				run: func(ctx context.Context) error {
					f, err := o.frontier(ctx, p, rho)
					rep.Frontier[k] = f
					return err
				}})
		}
	}
	return jobs
}

func (o *Options) frontier(ctx context.Context, p preset.Profile, rho float64) (Frontier, error) {
	m := smdp.ModelFor(p.Latency, p.KnownEnergy(), p.MaxBatch, rho)
	sMax := policy.SMDPStates(m.MaxBatch)
	f := Frontier{Preset: p.Name, Rho: rho}
	hull, err := smdp.Frontier(m, sMax)
	if err != nil {
		return f, fmt.Errorf("the frontier: %w", err)
	}
	for _, v := range hull {
		f.Curve = append(f.Curve, Vertex{Limit: v.Limit, LatencyMs: v.LatencyMs, RPJ: rpj(m.LambdaPerMs, v.PowerW)})
		if v.Limit == 1 {
			f.AdhocMs, f.AdhocRPJ = v.LatencyMs, rpj(m.LambdaPerMs, v.PowerW)
		}
	}
	if f.AdhocMs == 0 {
		ev, err := smdp.Evaluate(m, smdp.Options{W1: 1, Epsilon: smdp.DefaultEpsilon, SMax: sMax, IterMax: smdp.DefaultIterMax}, smdp.AdHoc(m, sMax))
		if err != nil {
			return f, err
		}
		f.AdhocMs, f.AdhocRPJ = ev.LatencyMs, rpj(m.LambdaPerMs, ev.PowerW)
	}
	for _, w := range FrontierWeights {
		v := smdp.WeightedOptimum(hull, w)
		f.Weighted = append(f.Weighted, Vertex{W2: w, Limit: v.Limit, LatencyMs: v.LatencyMs, RPJ: rpj(m.LambdaPerMs, v.PowerW)})
	}
	sla := o.sla(p)
	base := sim.Config{Profile: p, RatePerSec: 1000 * m.LambdaPerMs, Requests: o.requestsAt(rho), Seed: o.Seed}
	adhoc, err := o.simulate(ctx, policy.Adhoc{}, base, sla)
	if err != nil {
		return f, err
	}
	f.SimAdhocMs = adhoc.MeanMs
	for _, factor := range FrontierBudgets {
		b := smdp.Budget{Factor: factor}
		c, err := smdp.SolveBudget(ctx, m, b, sMax)
		if err != nil {
			return f, fmt.Errorf("budget %s: %w", b, err)
		}
		pol, err := policy.NewBudget(b)
		if err != nil {
			return f, err
		}
		pol.NoTrim, pol.NoLearn = true, true // the plan against the optimum: the model is exact here
		row, err := o.simulate(ctx, pol, base, sla)
		if err != nil {
			return f, err
		}
		bp := BudgetPoint{Factor: factor, BudgetMs: c.BudgetMs, OptMs: c.LatencyMs, OptRPJ: rpj(m.LambdaPerMs, c.PowerW),
			Limits: [2]int{c.First.Limit, c.Second.Limit}, Mix: c.Mix, W2: c.W2,
			SimMs: row.MeanMs, SimP99Ms: row.P99Ms, SimRPJ: row.RPJ}
		bp.RPJGapPct = 100 * (bp.SimRPJ/bp.OptRPJ - 1)
		bp.OverPct = 100 * (bp.SimMs/(factor*f.SimAdhocMs) - 1)
		bp.OverOptPct = 100 * (bp.SimMs/c.BudgetMs - 1)
		f.Budgets = append(f.Budgets, bp)
	}
	return f, ctx.Err()
}

// traceBudgetJobs adds, per trace case, the budget policy at the latency
// batchmonitor reaches there, so the two are compared at the same latency.
func (o *Options) traceBudgetJobs(rep *Report, scales []float64) []job {
	rep.TraceBudgets = make([]Case, len(o.Presets)*len(scales))
	var jobs []job
	for i, p := range o.Presets {
		for j, sc := range scales {
			k := i*len(scales) + j
			if sc == 0 {
				sc = rep.Presets[i].LoadScale
			}
			jobs = append(jobs, job{cost: 1000 * sc, what: fmt.Sprintf("%s %s x%.3g budgets", p.Name, o.Trace.Name(), sc),
				run: func(ctx context.Context) error {
					c, err := o.traceBudgets(ctx, p, sc)
					rep.TraceBudgets[k] = c
					return err
				}})
		}
	}
	return jobs
}

// traceBudgets runs ad-hoc, batchmonitor and the budget policy at
// batchmonitor's latency relative to ad-hoc on the scaled trace.
func (o *Options) traceBudgets(ctx context.Context, p preset.Profile, scale float64) (Case, error) {
	tr := o.Trace
	if scale != 1 {
		var err error
		if tr, err = tr.Scale(scale); err != nil {
			return Case{}, err
		}
	}
	c := Case{Preset: p.Name, Load: fmt.Sprintf("%s x%.3g", o.Trace.Name(), scale), Rho: tr.MaxRate() / (1000 * p.MuPerMs(p.MaxBatch))}
	sla := o.sla(p)
	base := sim.Config{Profile: p, Trace: tr, Seed: o.Seed}
	run := func(name string, pol policy.Policy) (Row, error) {
		row, err := o.simulate(ctx, pol, base, sla)
		row.Policy = name
		return row, err
	}
	adhoc, err := run(policy.NameAdhoc, policy.Adhoc{})
	if err != nil {
		return c, err
	}
	bm, err := run(policy.NameBatchMonitor, policy.BatchMonitor{})
	if err != nil {
		return c, err
	}
	c.Rows = append(c.Rows, adhoc, bm)
	// The budget at 1.10x is in the trace's own table (same arrivals).
	if f := bm.MeanMs / adhoc.MeanMs; f > 1.10 {
		pol, err := policy.NewBudget(smdp.Budget{Factor: f})
		if err != nil {
			return c, err
		}
		pol.NoTrim, pol.NoLearn = true, true
		row, err := run("budget "+strconv.FormatFloat(f, 'f', 2, 64)+"x", pol)
		if err != nil {
			return c, err
		}
		c.Rows = append(c.Rows, row)
	}
	return c, ctx.Err()
}

// frontierFigures draws, per preset and plotted load, the constrained
// optimum's curve with every policy's simulated point and the budget
// policy's points. Points beyond 4x ad-hoc's latency are left out of the
// plot (the table lists them), so the curve stays readable.
func (r *Report) frontierFigures() []Figure {
	var out []Figure
	for i := range r.Frontier {
		f := &r.Frontier[i]
		if !slices.Contains(frontierPlotRhos, f.Rho) {
			continue
		}
		xmax := 4 * f.AdhocMs
		fig := plot.Figure{Title: fmt.Sprintf("%s at rho %.1f: requests per joule against mean latency", f.Preset, f.Rho),
			XLabel: "mean latency (ms)", YLabel: "requests per joule"}
		var cx, cy []float64
		for _, v := range f.Curve {
			if v.LatencyMs <= xmax {
				cx, cy = append(cx, v.LatencyMs), append(cy, v.RPJ)
			}
		}
		fig.Series = append(fig.Series, plot.Series{Name: "constrained optimum", X: cx, Y: cy, Color: "#000000"})
		var bx, by []float64
		for _, b := range f.Budgets {
			bx, by = append(bx, b.SimMs), append(by, b.SimRPJ)
		}
		fig.Series = append(fig.Series, plot.Series{Name: "budget 1.05x-2x (sim)", X: bx, Y: by, Color: "#7F3C8D", Dashed: true})
		if pt := r.point(f.Preset, f.Rho); pt != nil {
			for _, row := range pt.Rows {
				if row.MeanMs > xmax {
					continue
				}
				s := r.line(row.Policy, []float64{row.MeanMs}, []float64{row.RPJ})
				fig.Series = append(fig.Series, s)
			}
		}
		out = append(out, Figure{File: fmt.Sprintf("frontier-%s-rho%.1f.svg", f.Preset, f.Rho), Figure: fig})
	}
	return out
}

// point returns the grid point of a preset at a load.
func (r *Report) point(preset string, rho float64) *Point {
	for i := range r.Grid {
		if r.Grid[i].Preset == preset && r.Grid[i].Rho == rho {
			return &r.Grid[i]
		}
	}
	return nil
}
