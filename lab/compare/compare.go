// Package compare runs every batching policy through the simulator over a
// grid of loads and over a day-shaped trace, prices each against the SMDP
// optimum, and writes the result as a Markdown report with SVG plots
// (`ratebatch compare` writes out/compare/RESULTS.md).
//
// One number ranks policies: the weighted cost of ALGORITHMS.md section 3,
// W1 * (mean latency, ms) + W2 * (mean power, W), measured in the simulator
// and set against the exact average cost g* of the SMDP-optimal policy at
// the same load. Where a policy has a stationary equivalent that smdp.Evaluate
// can price (ad-hoc, a static batch, a control limit, a solved table), its
// exact g is reported too, so the simulator and the analysis check each
// other.
package compare

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/ratebatch/ratebatch/lab/preset"
	"github.com/ratebatch/ratebatch/lab/sim"
	"github.com/ratebatch/ratebatch/lab/trace"
	"github.com/ratebatch/ratebatch/policy"
	"github.com/ratebatch/ratebatch/policy/batchcost"
	"github.com/ratebatch/ratebatch/policy/smdp"
)

// Defaults of Options.
const (
	DefaultRequests     = 40_000
	DefaultW1           = 1
	DefaultW2           = 0.1
	DefaultSLAFactor    = 2
	DefaultTracePeakRho = 0.8
	// DefaultStaticBatch is static's b, as in ratebatch sim.
	DefaultStaticBatch = 8
)

// DefaultPresets are the published profiles with energy figures.
var DefaultPresets = []string{"googlenet-p4", "resnet50-v100", "resnet50-p4"}

// DefaultRhos is the load grid.
var DefaultRhos = []float64{0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9}

// Options describe one comparison.
type Options struct {
	Presets  []preset.Profile
	Rhos     []float64
	Requests int // arrivals per constant-rate run
	Seed     uint64
	W1, W2   float64
	// SLAFactor sets every request's SLA to SLAFactor * tau(B_max) of its
	// preset: the slack policy works to it and every policy's violations
	// are counted against it.
	SLAFactor float64
	// Trace is the day-shaped series (paper300); nil skips the trace part.
	// It runs as published and, when TracePeakRho > 0, scaled so that its
	// peak loads each preset to that rho.
	Trace        *trace.Series
	TracePeakRho float64
	// Policies to run, in order; nil runs every registered policy.
	Policies []string
	// Workers run jobs in parallel; 0 uses GOMAXPROCS.
	Workers int
	// Progress, when set, is called after each finished job.
	Progress func(done, total int, what string)
}

// Validate reports the first option Run would reject.
func (o Options) Validate() error { return o.normalize() }

func (o *Options) normalize() error {
	if len(o.Presets) == 0 {
		return errors.New("no preset to compare")
	}
	for _, p := range o.Presets {
		if err := p.Validate(); err != nil {
			return fmt.Errorf("preset %s: %w", p.Name, err)
		}
		if !p.HasEnergy {
			return fmt.Errorf("preset %s has no energy figures: the weighted cost and requests per joule need them", p.Name)
		}
	}
	if len(o.Rhos) == 0 {
		return errors.New("no load in the grid")
	}
	for _, r := range o.Rhos {
		if !(r > 0 && r < 1) {
			return fmt.Errorf("load rho must be in (0, 1), got %v", r)
		}
	}
	switch {
	case o.Requests < 0:
		return fmt.Errorf("requests must be >= 0, got %d", o.Requests)
	case !(o.W1 > 0) || math.IsInf(o.W1, 0):
		return fmt.Errorf("w1 must be a finite number > 0, got %v", o.W1)
	case !(o.W2 >= 0) || math.IsInf(o.W2, 0):
		return fmt.Errorf("w2 must be a finite number >= 0, got %v", o.W2)
	case !(o.SLAFactor >= 0) || math.IsInf(o.SLAFactor, 0):
		return fmt.Errorf("SLA factor must be a finite number >= 0, got %v", o.SLAFactor)
	case !(o.TracePeakRho >= 0 && o.TracePeakRho < 1):
		return fmt.Errorf("trace peak rho must be in [0, 1), got %v", o.TracePeakRho)
	case o.Workers < 0:
		return fmt.Errorf("workers must be >= 0, got %d", o.Workers)
	}
	if o.Requests == 0 {
		o.Requests = DefaultRequests
	}
	if o.Workers == 0 {
		o.Workers = runtime.GOMAXPROCS(0)
	}
	if o.Policies == nil {
		o.Policies = orderedPolicies()
	}
	for _, name := range o.Policies {
		if _, err := o.build(name, o.Presets[0], time.Millisecond); err != nil {
			return err
		}
	}
	return nil
}

// orderedPolicies lists the registered policies, the paper's and the
// baselines first.
func orderedPolicies() []string {
	first := []string{policy.NameAdhoc, policy.NameBatchMonitor, policy.NameBatchMonitorPlus, policy.NameSMDP, policy.NameBudget,
		policy.NameSlack, policy.NameElastic, policy.NameMaxBatch, policy.NameStatic}
	var out []string
	names := policy.Names()
	for _, n := range first {
		if slices.Contains(names, n) {
			out = append(out, n)
		}
	}
	for _, n := range names {
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out
}

// build makes the named policy with the comparison's settings.
func (o *Options) build(name string, prof preset.Profile, sla time.Duration) (policy.Policy, error) {
	var opts policy.Options
	switch name {
	case policy.NameStatic:
		opts = policy.NewOptions(policy.StaticOptions{Batch: min(DefaultStaticBatch, prof.MaxBatch)})
	case policy.NameSMDP:
		opts = policy.NewOptions(policy.SMDPOptions{W1: o.W1, W2: o.W2})
	case policy.NameSlack:
		opts = policy.NewOptions(policy.SlackOptions{DeadlineOptions: policy.DeadlineOptions{SLA: sla}})
	case policy.NameBudget:
		// The plan as solved: the live trim corrects a model that is
		// exact in simulation, at the price of its ad-hoc slices.
		opts = policy.NewOptions(policy.BudgetOptions{NoTrim: true})
	}
	// A simulation's results must not depend on the machine's speed.
	policy.Each(&opts, func(s *policy.SolveOptions) { s.SolveFree = true })
	return policy.New(name, opts)
}

// Report is a comparison's outcome.
type Report struct {
	W1        float64  `json:"w1"`
	W2        float64  `json:"w2"`
	Requests  int      `json:"requests"`
	Seed      uint64   `json:"seed"`
	SLAFactor float64  `json:"sla_factor"`
	Policies  []string `json:"policies"`
	Presets   []Preset `json:"presets"`
	Grid      []Point  `json:"grid"`
	Traces    []Case   `json:"traces"`
	Ablation  []Case   `json:"ablation"`
	Instances []Case   `json:"two_instances"`
	Variants  []string `json:"ablation_variants"`
	// Frontier is the latency budget's trade-off per grid point, and
	// TraceBudgets the budget policy on the traces next to batchmonitor.
	Frontier     []Frontier `json:"frontier"`
	TraceBudgets []Case     `json:"trace_budgets"`
	Rhos         []float64  `json:"rhos"`
}

// Preset is one model's profile as the report states it.
type Preset struct {
	Name string `json:"name"`
	batchcost.Latency
	batchcost.Energy
	MaxBatch  int     `json:"max_batch"`
	MaxRPS    float64 `json:"max_rps"` // mu(B_max) per second
	SLAMs     float64 `json:"sla_ms"`
	StaticB   int     `json:"static_batch"`
	TraceRho  float64 `json:"paper300_peak_rho"`
	LoadScale float64 `json:"loaded_trace_scale"`
}

// Point is one preset at one constant load.
type Point struct {
	Preset     string  `json:"preset"`
	Rho        float64 `json:"rho"`
	RatePerSec float64 `json:"rate_rps"`
	Optimum    Optimum `json:"optimum"`
	Rows       []Row   `json:"policies"`
}

// Optimum is the SMDP-optimal policy at a point.
type Optimum struct {
	G            float64 `json:"g"`
	ControlLimit int     `json:"control_limit"`
	LatencyMs    float64 `json:"mean_latency_ms"`
	PowerW       float64 `json:"power_w"`
	MeanBatch    float64 `json:"mean_batch_size"`
	Delta        float64 `json:"delta"`
	Iterations   int     `json:"iterations"`
}

// Row is one policy's measured performance.
type Row struct {
	Policy       string   `json:"policy"`
	MeanMs       float64  `json:"mean_latency_ms"`
	P99Ms        float64  `json:"p99_latency_ms"`
	MeanBatch    float64  `json:"mean_batch_size"`
	RPJ          float64  `json:"requests_per_joule"`
	PowerW       float64  `json:"power_w"`
	Cost         float64  `json:"cost"`
	GapPct       *float64 `json:"gap_pct,omitempty"` // to the SMDP optimum (or trace reference)
	ViolationPct float64  `json:"sla_violation_pct"`
	// ConcurrentPct is the share of batches launched while another ran.
	ConcurrentPct float64 `json:"concurrent_launch_pct"`
	// Exact is the analysis of the policy's stationary equivalent.
	Exact *Exact `json:"exact,omitempty"`
	// Windows is the per-window series of trace runs, for plots.
	Windows []sim.Window `json:"-"`
}

// Exact is smdp.Evaluate's verdict on a policy's stationary equivalent.
type Exact struct {
	Spec   string  `json:"spec"`
	G      float64 `json:"g"`
	Delta  float64 `json:"delta"`
	Stable bool    `json:"stable"` // Delta below smdp.DeltaAccept
}

// Case is one preset under one load other than the constant grid: a trace,
// an ablation point or the two-instance check.
type Case struct {
	Preset string  `json:"preset"`
	Load   string  `json:"load"`
	Rho    float64 `json:"rho,omitempty"`
	// Reference is the cost the comparison measures gaps against: the SMDP
	// optimum g* at a constant load, or for a trace the quasi-static
	// reference (the optimum at each second's rate, averaged as the cost
	// is); nil where there is none (several instances).
	Reference *float64 `json:"reference,omitempty"`
	Rows      []Row    `json:"policies"`
}

// Run compares the policies.
func Run(ctx context.Context, o Options) (*Report, error) {
	if err := o.normalize(); err != nil {
		return nil, fmt.Errorf("compare: %w", err)
	}
	rep := &Report{W1: o.W1, W2: o.W2, Requests: o.Requests, Seed: o.Seed, SLAFactor: o.SLAFactor,
		Policies: o.Policies, Rhos: o.Rhos}
	for _, v := range variants {
		rep.Variants = append(rep.Variants, v.name)
	}
	var jobs []job
	for _, p := range o.Presets {
		pr := Preset{Name: p.Name, Latency: p.Latency, Energy: p.Energy,
			MaxBatch: p.MaxBatch, MaxRPS: 1000 * p.MuPerMs(p.MaxBatch), SLAMs: o.SLAFactor * p.TauMs(p.MaxBatch),
			StaticB: min(DefaultStaticBatch, p.MaxBatch)}
		if o.Trace != nil {
			pr.TraceRho = o.Trace.MaxRate() / pr.MaxRPS
			if o.TracePeakRho > 0 {
				pr.LoadScale = o.TracePeakRho * pr.MaxRPS / o.Trace.MaxRate()
			}
		}
		rep.Presets = append(rep.Presets, pr)
	}
	rep.Grid = make([]Point, len(o.Presets)*len(o.Rhos))
	rep.Ablation = make([]Case, len(rep.Grid))
	for i, p := range o.Presets {
		for j, rho := range o.Rhos {
			k := i*len(o.Rhos) + j
			jobs = append(jobs, job{cost: rho * float64(p.MaxBatch), what: fmt.Sprintf("%s rho %.2g", p.Name, rho),
				run: func(ctx context.Context) error {
					pt, abl, err := o.point(ctx, p, rho)
					rep.Grid[k], rep.Ablation[k] = pt, abl
					return err
				}})
		}
	}
	jobs = append(jobs, o.frontierJobs(rep)...)
	if o.Trace != nil {
		scales := []float64{1}
		if o.TracePeakRho > 0 {
			scales = append(scales, 0)
		}
		jobs = append(jobs, o.traceBudgetJobs(rep, scales)...)
		rep.Traces = make([]Case, len(o.Presets)*len(scales))
		for i, p := range o.Presets {
			for j, sc := range scales {
				k := i*len(scales) + j
				if sc == 0 {
					sc = rep.Presets[i].LoadScale
				}
				jobs = append(jobs, job{cost: 1000 * sc, what: fmt.Sprintf("%s %s x%.3g", p.Name, o.Trace.Name(), sc),
					run: func(ctx context.Context) error {
						r, err := o.traceRun(ctx, p, sc)
						rep.Traces[k] = r
						return err
					}})
			}
		}
	}
	multiRhos := []float64{0.5, 0.9, 1.3}
	rep.Instances = make([]Case, len(o.Presets)*len(multiRhos))
	for i, p := range o.Presets {
		for j, rho := range multiRhos {
			k := i*len(multiRhos) + j
			jobs = append(jobs, job{cost: rho, what: fmt.Sprintf("%s two instances rho %.2g", p.Name, rho),
				run: func(ctx context.Context) error {
					r, err := o.twoInstances(ctx, p, rho)
					rep.Instances[k] = r
					return err
				}})
		}
	}
	if err := runJobs(ctx, jobs, o.Workers, o.Progress); err != nil {
		return nil, fmt.Errorf("compare: %w", err)
	}
	return rep, nil
}

type job struct {
	cost float64 // larger first, so the slow ones do not end the run alone
	what string
	run  func(context.Context) error
}

func runJobs(ctx context.Context, jobs []job, workers int, progress func(int, int, string)) error {
	slices.SortStableFunc(jobs, func(a, b job) int {
		switch {
		case a.cost > b.cost:
			return -1
		case a.cost < b.cost:
			return 1
		}
		return 0
	})
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu       sync.Mutex
		firstErr error
		done     int
		wg       sync.WaitGroup
	)
	next := make(chan job)
	for range max(workers, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range next {
				err := j.run(ctx)
				mu.Lock()
				done++
				if err != nil && firstErr == nil {
					firstErr = fmt.Errorf("%s: %w", j.what, err)
					cancel()
				}
				if progress != nil {
					progress(done, len(jobs), j.what)
				}
				mu.Unlock()
			}
		}()
	}
feed:
	for _, j := range jobs {
		select {
		case next <- j:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if firstErr == nil {
		firstErr = ctx.Err()
	}
	return firstErr
}

// sla is the preset's SLA.
func (o *Options) sla(p preset.Profile) time.Duration {
	return time.Duration(o.SLAFactor * p.TauMs(p.MaxBatch) * float64(time.Millisecond))
}

// smdpOptions are the solver settings every exact figure of a preset uses,
// the same the smdp policy uses.
func (o *Options) smdpOptions(m smdp.Model) (smdp.Options, error) {
	sMax := policy.SMDPStates(m.MaxBatch)
	co, err := smdp.DefaultCo(m, o.W1, o.W2, sMax)
	if err != nil {
		return smdp.Options{}, err
	}
	return smdp.Options{W1: o.W1, W2: o.W2, Co: co, Epsilon: smdp.DefaultEpsilon, SMax: sMax, IterMax: smdp.DefaultIterMax}, nil
}

// point runs every policy and every ablation variant at one constant load.
func (o *Options) point(ctx context.Context, p preset.Profile, rho float64) (Point, Case, error) {
	m := smdp.ModelFor(p.Latency, p.KnownEnergy(), p.MaxBatch, rho)
	rate := 1000 * m.LambdaPerMs
	pt := Point{Preset: p.Name, Rho: rho, RatePerSec: rate}
	abl := Case{Preset: p.Name, Load: fmt.Sprintf("rho %.2g", rho), Rho: rho}
	so, err := o.smdpOptions(m)
	if err != nil {
		return pt, abl, err
	}
	sol, err := smdp.Solve(ctx, m, so)
	if err != nil {
		return pt, abl, fmt.Errorf("the SMDP optimum: %w", err)
	}
	pt.Optimum = Optimum{G: sol.G, ControlLimit: sol.ControlLimit, LatencyMs: sol.LatencyMs, PowerW: sol.PowerW,
		MeanBatch: sol.MeanBatch, Delta: sol.Delta, Iterations: sol.Iterations}
	abl.Reference = &pt.Optimum.G
	sla := o.sla(p)
	base := sim.Config{Profile: p, RatePerSec: rate, Requests: o.requestsAt(rho), Seed: o.Seed}
	for _, name := range o.Policies {
		pol, err := o.build(name, p, sla)
		if err != nil {
			return pt, abl, err
		}
		row, err := o.simulate(ctx, pol, base, sla)
		if err != nil {
			return pt, abl, err
		}
		row.GapPct = gap(row.Cost, sol.G)
		if spec, table, ok := stationary(pol, m, so.SMax); ok {
			ev, err := smdp.Evaluate(m, so, table)
			if err != nil {
				return pt, abl, fmt.Errorf("pricing %s as %s: %w", name, spec, err)
			}
			row.Exact = &Exact{Spec: spec, G: ev.G, Delta: ev.Delta, Stable: ev.Delta < smdp.DeltaAccept}
		}
		pt.Rows = append(pt.Rows, row)
	}
	for _, v := range variants {
		c := base
		c.Window = v.window
		row, err := o.simulate(ctx, v.policy, c, sla)
		if err != nil {
			return pt, abl, err
		}
		row.Policy = v.name
		row.GapPct = gap(row.Cost, sol.G)
		abl.Rows = append(abl.Rows, row)
	}
	return pt, abl, ctx.Err()
}

// requestsAt is the run length at load rho: Requests, and more near
// saturation, where queue lengths are strongly correlated in time and a
// run of a given length carries less information (N * 0.5/(1-rho) from
// rho 0.5 on: 5N at 0.9).
func (o *Options) requestsAt(rho float64) int {
	return int(float64(o.Requests) * max(1, 0.5/(1-rho)))
}

func gap(cost, ref float64) *float64 {
	g := 100 * (cost - ref) / ref
	return &g
}

// simulate runs one policy and measures it.
func (o *Options) simulate(ctx context.Context, pol policy.Policy, c sim.Config, sla time.Duration) (Row, error) {
	rec := newRecorder(pol, c.Profile, sla)
	c.Policy = rec
	c.SLA = sla
	res, err := sim.Run(ctx, c)
	if err != nil {
		return Row{}, err
	}
	if err := rec.check(res); err != nil {
		return Row{}, err
	}
	row := Row{Policy: res.Policy, MeanMs: res.MeanLatencyMs, P99Ms: res.P99LatencyMs, MeanBatch: res.MeanBatchSize,
		Windows: res.Windows}
	if res.RequestsPerJoule != nil && res.DurationS > 0 {
		row.RPJ = *res.RequestsPerJoule
		row.PowerW = *res.EnergyJ / res.DurationS
	}
	row.Cost = o.W1*row.MeanMs + o.W2*row.PowerW
	if rec.requests > 0 {
		row.ViolationPct = 100 * float64(rec.violations) / float64(rec.requests)
	}
	if rec.launches > 0 {
		row.ConcurrentPct = 100 * float64(rec.concurrent) / float64(rec.launches)
	}
	return row, nil
}

// stationary expresses a policy as a deterministic SMDP policy where that
// is possible: the rule must depend only on the number of waiting requests
// at a steady rate. Rules that look at a request's age (maxbatch's
// deadline, slack's) have none.
func stationary(pol policy.Policy, m smdp.Model, sMax int) (string, []int, bool) {
	switch p := pol.(type) {
	case policy.Adhoc:
		return "adhoc", smdp.AdHoc(m, sMax), true
	case policy.Elastic:
		if p.RowCap == 0 || p.RowCap >= m.MaxBatch {
			return "adhoc (one instance)", smdp.AdHoc(m, sMax), true
		}
	case policy.BatchMonitor:
		b := smdp.BatchMonitorSize(m)
		return fmt.Sprintf("static:%d", b), smdp.Static(m, sMax, b), true
	case policy.BatchMonitorPlus:
		util := p.Util
		if !(util > 0 && util <= 1) {
			util = 1
		}
		b := policy.ChooseBatchFor(1000*m.LambdaPerMs, m.Latency, p.From, m.MaxBatch, util)
		if p.Drain {
			return fmt.Sprintf("limit:%d", b), smdp.ControlLimit(m, sMax, b), true
		}
		return fmt.Sprintf("static:%d", b), smdp.Static(m, sMax, b), true
	case policy.Static:
		b := min(p.Batch, m.MaxBatch)
		return fmt.Sprintf("static:%d", b), smdp.Static(m, sMax, b), true
	case *policy.SMDP:
		e := policy.Estimate{Window: time.Second, RatePerSec: 1000 * m.LambdaPerMs, Latency: m.Latency,
			Energy: m.Energy, HasEnergy: m.BetaMJ > 0 || m.Zeta0MJ > 0, MaxBatch: m.MaxBatch, Instances: 1}
		if r, ok := p.Plan(e).(policy.SMDPRule); ok {
			if t := r.Table(); len(t) == sMax+2 {
				_, solved := r.Solution()
				return fmt.Sprintf("table solved at %.4g req/s", 1000*solved.LambdaPerMs), t, true
			}
		}
	}
	return "", nil, false
}

// variant is one step of the ablation from BatchMonitor to batchmonitor+.
type variant struct {
	name   string
	policy policy.Policy
	window time.Duration // 0: the default 1 s
}

var variants = []variant{
	{"Algorithm 1 (batchmonitor)", policy.BatchMonitor{}, 0},
	{"250 ms window", policy.BatchMonitor{}, 250 * time.Millisecond},
	{"from=1", policy.BatchMonitorPlus{Util: 1, From: 1}, 0},
	{"util=0.8", policy.BatchMonitorPlus{Util: 0.8, From: 2}, 0},
	{"drain", policy.BatchMonitorPlus{Util: 1, From: 2, Drain: true}, 0},
	{"drain, from=1", policy.BatchMonitorPlus{Util: 1, From: 1, Drain: true}, 0},
	{"drain, util=0.8", policy.BatchMonitorPlus{Util: 0.8, From: 2, Drain: true}, 0},
	{"drain, from=1, util=0.8", policy.BatchMonitorPlus{Util: 0.8, From: 1, Drain: true}, 0},
}

// traceRun runs every policy on the trace scaled by scale, then the
// ablation variants, and prices them against the quasi-static reference.
func (o *Options) traceRun(ctx context.Context, p preset.Profile, scale float64) (Case, error) {
	tr := o.Trace
	if scale != 1 {
		var err error
		if tr, err = tr.Scale(scale); err != nil {
			return Case{}, err
		}
	}
	run := Case{Preset: p.Name, Load: fmt.Sprintf("%s x%.3g", o.Trace.Name(), scale), Rho: tr.MaxRate() / (1000 * p.MuPerMs(p.MaxBatch))}
	sla := o.sla(p)
	base := sim.Config{Profile: p, Trace: tr, Seed: o.Seed, Series: true}
	var live *policy.SMDP
	for _, name := range o.Policies {
		pol, err := o.build(name, p, sla)
		if err != nil {
			return run, err
		}
		if s, ok := pol.(*policy.SMDP); ok {
			live = s
		}
		row, err := o.simulate(ctx, pol, base, sla)
		if err != nil {
			return run, err
		}
		run.Rows = append(run.Rows, row)
	}
	for _, v := range variants {
		c := base
		c.Window = v.window
		row, err := o.simulate(ctx, v.policy, c, sla)
		if err != nil {
			return run, err
		}
		row.Policy = "ablation: " + v.name
		run.Rows = append(run.Rows, row)
	}
	if live == nil {
		var err error
		if live, err = policy.NewSMDP(o.W1, o.W2); err != nil {
			return run, err
		}
	}
	if ref, ok := quasiStatic(live, p, tr, o.W1, o.W2); ok {
		run.Reference = &ref
		for i := range run.Rows {
			run.Rows[i].GapPct = gap(run.Rows[i].Cost, ref)
		}
	}
	return run, ctx.Err()
}

// quasiStatic is the reference cost of a trace: each second is priced at
// the SMDP optimum for that second's rate (as the smdp policy solves it,
// on its rate grid), latency averaged over requests and power over time as
// the measured cost is. It ignores the transients between seconds, so it is
// a reference, not a bound.
func quasiStatic(live *policy.SMDP, p preset.Profile, tr *trace.Series, w1, w2 float64) (float64, bool) {
	var latSum, weight, powSum float64
	n := int(tr.Duration() / time.Second)
	for i := range n {
		rate := tr.RateAt(time.Duration(i)*time.Second + time.Second/2)
		if rate <= 0 {
			continue
		}
		e := policy.Estimate{Window: time.Second, RatePerSec: rate, Latency: p.Latency,
			Energy: p.Energy, HasEnergy: true, MaxBatch: p.MaxBatch, Instances: 1}
		r, ok := live.Plan(e).(policy.SMDPRule)
		if !ok {
			return 0, false
		}
		sol, _ := r.Solution()
		latSum += rate * sol.LatencyMs
		weight += rate
		powSum += sol.PowerW
	}
	if weight == 0 {
		return 0, false
	}
	return w1*latSum/weight + w2*powSum/float64(n), true
}

// twoInstances runs the policies that differ on a server with two
// instances, at a load relative to one instance's capacity.
func (o *Options) twoInstances(ctx context.Context, p preset.Profile, rho float64) (Case, error) {
	run := Case{Preset: p.Name, Load: fmt.Sprintf("two instances, rho %.2g of one", rho), Rho: rho}
	sla := o.sla(p)
	c := sim.Config{Profile: p, RatePerSec: rho * 1000 * p.MuPerMs(p.MaxBatch), Requests: o.Requests, Seed: o.Seed, Instances: 2}
	for _, name := range []string{policy.NameAdhoc, policy.NameBatchMonitor, policy.NameBatchMonitorPlus, policy.NameElastic} {
		if !slices.Contains(o.Policies, name) {
			continue
		}
		pol, err := o.build(name, p, sla)
		if err != nil {
			return run, err
		}
		row, err := o.simulate(ctx, pol, c, sla)
		if err != nil {
			return run, err
		}
		run.Rows = append(run.Rows, row)
	}
	if slices.Contains(o.Policies, policy.NameElastic) {
		// A cap that binds: a quarter of B_max in flight over both instances.
		capped := policy.Elastic{RowCap: max(1, p.MaxBatch/4)}
		row, err := o.simulate(ctx, capped, c, sla)
		if err != nil {
			return run, err
		}
		row.Policy = fmt.Sprintf("elastic, row_cap %d", capped.RowCap)
		run.Rows = append(run.Rows, row)
	}
	return run, ctx.Err()
}
