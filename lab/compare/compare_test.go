package compare

import (
	"bytes"
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/ratebatch/ratebatch/lab/preset"
	"github.com/ratebatch/ratebatch/lab/sim"
	"github.com/ratebatch/ratebatch/lab/trace"
	"github.com/ratebatch/ratebatch/policy"
	"github.com/ratebatch/ratebatch/policy/batchcost"
	"github.com/ratebatch/ratebatch/policy/smdp"
)

func lookupPreset(t *testing.T, name string) preset.Profile {
	t.Helper()
	p, err := preset.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func options(t *testing.T) *Options {
	t.Helper()
	o := &Options{Presets: []preset.Profile{lookupPreset(t, "googlenet-p4")}, Rhos: []float64{0.5}, Requests: 20_000, Seed: 1,
		W1: 1, W2: 0.1, SLAFactor: DefaultSLAFactor}
	if err := o.normalize(); err != nil {
		t.Fatal(err)
	}
	return o
}

func rateAt(p preset.Profile, rho float64) float64 { return rho * 1000 * p.MuPerMs(p.MaxBatch) }

// The recorder's rebuilt latencies agree with the simulator's own figures
// for every kind of rule, on one instance and on two, at a constant rate and
// on a trace; and it counts violations against the SLA it is given.
func TestRecorderMatchesSimulator(t *testing.T) {
	o := options(t)
	p := lookupPreset(t, "googlenet-p4")
	tr, err := trace.Lookup(trace.Paper300)
	if err != nil {
		t.Fatal(err)
	}
	if tr, err = tr.Compress(30); err != nil {
		t.Fatal(err)
	}
	constant := sim.Config{Profile: p, RatePerSec: rateAt(p, 0.6), Requests: 5000, Seed: 3}
	two := constant
	two.Instances = 2
	onTrace := sim.Config{Profile: p, Trace: tr, Seed: 3}
	sla := 5 * time.Millisecond
	tests := []struct {
		name string
		pol  string
		c    sim.Config
	}{
		{"adhoc", policy.NameAdhoc, constant},
		{"batchmonitor", policy.NameBatchMonitor, constant},
		{"batchmonitor+ on a trace", policy.NameBatchMonitorPlus, onTrace},
		{"slack", policy.NameSlack, constant},
		{"maxbatch", policy.NameMaxBatch, constant},
		{"static", policy.NameStatic, constant},
		{"smdp", policy.NameSMDP, constant},
		{"elastic on two instances", policy.NameElastic, two},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pol, err := o.build(tt.pol, p, sla)
			if err != nil {
				t.Fatal(err)
			}
			row, err := o.simulate(context.Background(), pol, tt.c, sla)
			if err != nil {
				t.Fatal(err) // includes the recorder's own check
			}
			if row.ViolationPct < 0 || row.ViolationPct > 100 || row.RPJ <= 0 || row.Cost <= 0 {
				t.Fatalf("row %+v", row)
			}
			none, err := o.simulate(context.Background(), pol, tt.c, time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			if none.ViolationPct != 0 {
				t.Fatalf("%.2f%% violations of a one-hour SLA", none.ViolationPct)
			}
		})
	}
	// Every request of a batch takes at least tau(1): an SLA below it is
	// missed by all.
	pol, _ := o.build(policy.NameAdhoc, p, 0)
	row, err := o.simulate(context.Background(), pol, constant, time.Millisecond)
	if err != nil || row.ViolationPct != 100 {
		t.Fatalf("SLA below tau(1): %.2f%% violations, %v", row.ViolationPct, err)
	}
}

// If the simulator's batches did not take tau(n) of the profile the
// recorder believes in, its rebuilt latencies differ and it says so.
func TestRecorderDetectsDisagreement(t *testing.T) {
	p := lookupPreset(t, "googlenet-p4")
	wrong := p
	wrong.Tau0Ms *= 1.1
	rec := newRecorder(policy.Adhoc{}, wrong, 0)
	res, err := sim.Run(context.Background(), sim.Config{Profile: p, Policy: rec, RatePerSec: 500, Requests: 1000, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := rec.check(res); err == nil || !strings.Contains(err.Error(), "rebuilding") {
		t.Fatalf("check = %v, want a disagreement", err)
	}
}

// At the same SLA and on the same arrivals, slack never misses more
// deadlines than the faithful batchmonitor, and misses fewer where
// batchmonitor misses any.
func TestSlackFewerViolationsThanBatchMonitor(t *testing.T) {
	o := options(t)
	fewer := 0
	for _, name := range []string{"googlenet-p4", "resnet50-p4"} {
		p := lookupPreset(t, name)
		sla := o.sla(p)
		c := sim.Config{Profile: p, RatePerSec: rateAt(p, 0.5), Requests: o.Requests, Seed: 2}
		viol := map[string]float64{}
		for _, pn := range []string{policy.NameSlack, policy.NameBatchMonitor} {
			pol, err := o.build(pn, p, sla)
			if err != nil {
				t.Fatal(err)
			}
			row, err := o.simulate(context.Background(), pol, c, sla)
			if err != nil {
				t.Fatal(err)
			}
			viol[pn] = row.ViolationPct
		}
		t.Logf("%s rho 0.5, SLA %v: slack %.3f%%, batchmonitor %.3f%% violations", name, sla, viol[policy.NameSlack], viol[policy.NameBatchMonitor])
		if viol[policy.NameSlack] > viol[policy.NameBatchMonitor] {
			t.Fatalf("%s: slack %.3f%% vs batchmonitor %.3f%% violations", name, viol[policy.NameSlack], viol[policy.NameBatchMonitor])
		}
		if viol[policy.NameSlack] < viol[policy.NameBatchMonitor] {
			fewer++
		}
	}
	if fewer == 0 {
		t.Fatal("slack missed no fewer deadlines than batchmonitor on any preset")
	}
}

// elastic launches a batch beside a running one when there are two
// instances, and cannot with one.
func TestElasticUsesSecondInstance(t *testing.T) {
	o := options(t)
	p := lookupPreset(t, "resnet50-v100")
	for _, inst := range []int{1, 2} {
		c := sim.Config{Profile: p, RatePerSec: rateAt(p, 0.9), Requests: 10_000, Seed: 4, Instances: inst}
		row, err := o.simulate(context.Background(), policy.Elastic{}, c, 0)
		if err != nil {
			t.Fatal(err)
		}
		if (inst > 1) != (row.ConcurrentPct > 0) {
			t.Fatalf("%d instances: %.1f%% of batches launched beside another", inst, row.ConcurrentPct)
		}
	}
}

// batchmonitor+ removes the backlog that a fixed batch size builds under
// load while keeping the energy gain over ad-hoc.
func TestBatchMonitorPlusFixesBacklog(t *testing.T) {
	o := options(t)
	p := lookupPreset(t, "googlenet-p4")
	c := sim.Config{Profile: p, RatePerSec: rateAt(p, 0.6), Requests: o.Requests, Seed: 5}
	rows := map[string]Row{}
	for _, name := range []string{policy.NameAdhoc, policy.NameBatchMonitor, policy.NameBatchMonitorPlus} {
		pol, err := o.build(name, p, 0)
		if err != nil {
			t.Fatal(err)
		}
		if rows[name], err = o.simulate(context.Background(), pol, c, 0); err != nil {
			t.Fatal(err)
		}
	}
	ad, bm, bp := rows[policy.NameAdhoc], rows[policy.NameBatchMonitor], rows[policy.NameBatchMonitorPlus]
	t.Logf("mean ms: adhoc %.3f, batchmonitor %.3f, batchmonitor+ %.3f; req/J %.2f, %.2f, %.2f", ad.MeanMs, bm.MeanMs, bp.MeanMs, ad.RPJ, bm.RPJ, bp.RPJ)
	if !(bp.MeanMs < 1.5*ad.MeanMs && bm.MeanMs > 2*bp.MeanMs && bp.RPJ > ad.RPJ) {
		t.Fatal("batchmonitor+ should keep latency near ad-hoc's, far below batchmonitor's, with more requests per joule than ad-hoc")
	}
}

// fixed always plans the same rule: a stationary policy, as the SMDP
// analysis prices it.
type fixed struct{ rule policy.Rule }

func (f fixed) Name() string                     { return f.rule.Status().Policy }
func (f fixed) Plan(policy.Estimate) policy.Rule { return f.rule }

// The exact long-run cost g that smdp.Evaluate gives a deterministic policy
// agrees with the simulator's long-run cost of the same policy, within
// the sampling error of independent replications.
func TestExactCostMatchesSimulation(t *testing.T) {
	p := lookupPreset(t, "googlenet-p4")
	const rho, w1, w2 = 0.5, 1.0, 0.1
	m := smdp.ModelFor(p.Latency, p.KnownEnergy(), p.MaxBatch, rho)
	o := &Options{W1: w1, W2: w2}
	so, err := o.smdpOptions(m)
	if err != nil {
		t.Fatal(err)
	}
	// The smdp policy's own table (solved for w2 = 1, control limit > 1),
	// with its wait bound pushed out of reach of the run (7 arrivals take
	// about 5 ms here) so that it is the pure table; only the last requests
	// of a run wait for it, which moves the mean by a few microseconds.
	live, err := policy.NewSMDP(w1, 1)
	if err != nil {
		t.Fatal(err)
	}
	live.MaxWait = 20 * time.Millisecond
	e := policy.Estimate{Window: time.Second, RatePerSec: 1000 * m.LambdaPerMs, Latency: batchcost.Latency{AlphaMs: p.AlphaMs, Tau0Ms: p.Tau0Ms}, Energy: batchcost.Energy{BetaMJ: p.BetaMJ, Zeta0MJ: p.Zeta0MJ}, HasEnergy: true, MaxBatch: p.MaxBatch, Instances: 1}
	table, ok := live.Plan(e).(policy.SMDPRule)
	if !ok || table.ControlLimit() < 2 {
		t.Fatalf("no table with a waiting region: %+v", live.Plan(e).Status())
	}
	tests := []struct {
		name  string
		pol   policy.Policy
		exact []int
	}{
		{"adhoc", policy.Adhoc{}, smdp.AdHoc(m, so.SMax)},
		{"static 4", policy.Static{Batch: 4, MaxWait: time.Hour}, smdp.Static(m, so.SMax, 4)},
		{"smdp table", fixed{table}, table.Table()},
	}
	reps, n := 8, 40_000
	if testing.Short() {
		reps, n = 4, 15_000
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ev, err := smdp.Evaluate(m, so, tt.exact)
			if err != nil {
				t.Fatal(err)
			}
			var costs []float64
			for seed := range reps {
				res, err := sim.Run(context.Background(), sim.Config{Profile: p, Policy: tt.pol, RatePerSec: 1000 * m.LambdaPerMs,
					Requests: n, Seed: uint64(100 + seed)})
				if err != nil {
					t.Fatal(err)
				}
				costs = append(costs, w1*res.MeanLatencyMs+w2**res.EnergyJ/res.DurationS)
			}
			mean, se := meanSE(costs)
			t.Logf("exact g %.4f (latency %.4f ms, power %.3f W); simulated %.4f ± %.4f over %d runs", ev.G, ev.LatencyMs, ev.PowerW, mean, se, reps)
			if math.Abs(mean-ev.G) > 4*se+1e-3*ev.G {
				t.Fatalf("simulated cost %.4f ± %.4f is not the exact %.4f", mean, se, ev.G)
			}
		})
	}
}

func meanSE(xs []float64) (float64, float64) {
	var s, ss float64
	for _, x := range xs {
		s += x
	}
	mean := s / float64(len(xs))
	for _, x := range xs {
		ss += (x - mean) * (x - mean)
	}
	return mean, math.Sqrt(ss / float64(len(xs)-1) / float64(len(xs)))
}

// A tiny comparison end to end: every section, every policy, and figures
// that render.
func TestRunTinyGrid(t *testing.T) {
	tr, err := trace.Lookup(trace.Paper300)
	if err != nil {
		t.Fatal(err)
	}
	if tr, err = tr.Compress(20); err != nil {
		t.Fatal(err)
	}
	var progress int
	o := Options{Presets: []preset.Profile{lookupPreset(t, "googlenet-p4")}, Rhos: []float64{0.3, 0.7}, Requests: 3000, Seed: 1,
		W1: 1, W2: 0.1, SLAFactor: 2, Trace: tr, TracePeakRho: 0.5, Progress: func(int, int, string) { progress++ }}
	rep, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Grid) != 2 || len(rep.Traces) != 2 || len(rep.Ablation) != 2 || len(rep.Instances) != 3 || progress != 11 {
		t.Fatalf("report has %d points, %d traces, %d ablation points, %d two-instance runs; %d progress calls",
			len(rep.Grid), len(rep.Traces), len(rep.Ablation), len(rep.Instances), progress)
	}
	for _, pt := range rep.Grid {
		if len(pt.Rows) != len(rep.Policies) || pt.Optimum.G <= 0 {
			t.Fatalf("point %v: %d rows for %d policies, g* %v", pt.Rho, len(pt.Rows), len(rep.Policies), pt.Optimum.G)
		}
		for _, row := range pt.Rows {
			// Nothing beats the optimum by more than sampling noise.
			if *row.GapPct < -5 {
				t.Fatalf("rho %v %s: cost %.3f is %.1f%% below the optimum %.3f", pt.Rho, row.Policy, row.Cost, *row.GapPct, pt.Optimum.G)
			}
		}
		if ad := pt.row(policy.NameAdhoc); ad.Exact == nil || ad.Exact.Spec != "adhoc" {
			t.Fatalf("adhoc has no exact equivalent: %+v", ad.Exact)
		}
		if pt.row(policy.NameSlack).Exact != nil {
			t.Fatal("slack depends on request age and cannot have a stationary equivalent")
		}
	}
	for _, tr := range rep.Traces {
		if tr.Reference == nil || len(tr.Rows) != len(rep.Policies)+len(variants) {
			t.Fatalf("trace %s: reference %v, %d rows", tr.Load, tr.Reference, len(tr.Rows))
		}
	}
	var md bytes.Buffer
	if err := rep.WriteMarkdown(&md, "ratebatch compare --test", "img"); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"# Results", "ratebatch compare --test", "## Headline", "## Where the paper's BatchMonitor wins and where it loses",
		"## The improvement: batchmonitor+", "## Constant load", "## paper300", "## Two instances", "## Simulator against the exact analysis",
		"(img/latency-googlenet-p4.svg)", "| 0.7 |"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("report lacks %q", want)
		}
	}
	if strings.Contains(md.String(), "%!") || strings.Contains(md.String(), "NaN") {
		t.Error("report has a formatting error or NaN")
	}
	figs := rep.Figures()
	if len(figs) != 3+2*3 {
		t.Fatalf("%d figures, want 9", len(figs))
	}
	for _, f := range figs {
		var svg bytes.Buffer
		if err := f.Figure.WriteSVG(&svg); err != nil {
			t.Fatalf("%s: %v", f.File, err)
		}
	}
}

func TestOptionsValidate(t *testing.T) {
	noEnergy := lookupPreset(t, "resnet152-titanrtx")
	good := func() Options {
		return Options{Presets: []preset.Profile{lookupPreset(t, "googlenet-p4")}, Rhos: []float64{0.5}, W1: 1, W2: 0.1}
	}
	tests := []struct {
		name   string
		change func(*Options)
		want   string
	}{
		{"no preset", func(o *Options) { o.Presets = nil }, "no preset"},
		{"no energy", func(o *Options) { o.Presets = append(o.Presets, noEnergy) }, "no energy figures"},
		{"no load", func(o *Options) { o.Rhos = nil }, "no load"},
		{"rho 1", func(o *Options) { o.Rhos = []float64{0.5, 1} }, "rho"},
		{"w1 zero", func(o *Options) { o.W1 = 0 }, "w1"},
		{"w2 negative", func(o *Options) { o.W2 = -1 }, "w2"},
		{"negative requests", func(o *Options) { o.Requests = -1 }, "requests"},
		{"peak rho 1", func(o *Options) { o.TracePeakRho = 1 }, "peak rho"},
		{"unknown policy", func(o *Options) { o.Policies = []string{"adhoc", "nope"} }, "nope"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := good()
			tt.change(&o)
			if err := o.Validate(); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Validate = %v, want it to mention %q", err, tt.want)
			}
		})
	}
	if err := good().Validate(); err != nil {
		t.Fatalf("good options rejected: %v", err)
	}
}
