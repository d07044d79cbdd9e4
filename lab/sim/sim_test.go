package sim

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ratebatch/ratebatch/lab/preset"
	"github.com/ratebatch/ratebatch/lab/trace"
	"github.com/ratebatch/ratebatch/policy"
	"github.com/ratebatch/ratebatch/policy/batchcost"
)

func lookupPreset(t testing.TB, name string) preset.Profile {
	t.Helper()
	p, err := preset.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func newPolicy(t testing.TB, name string, o policy.Options) policy.Policy {
	t.Helper()
	// As Policies builds them: runs that do not depend on the machine.
	policy.Each(&o, func(s *policy.SolveOptions) { s.SolveFree = true })
	p, err := policy.New(name, o)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// phi is the closed-form bound of ALGORITHMS.md section 4 in ms, for lambda
// in requests per ms.
func phi(alpha, tau0, lambda float64) float64 {
	la := lambda * alpha
	phi0 := (alpha + tau0) / (2 * (1 - la)) * (1 + 2*lambda*tau0 + (1-lambda*tau0)/(1+la))
	phi1 := 1.5*tau0/(1-la) + (alpha/2)*(la+2)/(1-la*la)
	return math.Min(phi0, phi1)
}

// With unbounded batches the ad-hoc policy's mean latency sits just under
// phi: never significantly above it, and close to it except at light load.
// Independent replications give the run-to-run error to judge "above" by.
func TestAdhocMatchesClosedFormBound(t *testing.T) {
	if testing.Short() {
		t.Skip("long simulation")
	}
	p := preset.Profile{Name: "googlenet-unbounded", Latency: batchcost.Latency{AlphaMs: 0.3051, Tau0Ms: 1.052}, MaxBatch: 1 << 20}
	const reps, requests = 4, 50_000
	tests := []struct {
		rho      float64 // lambda*alpha
		minRatio float64 // how tight the bound is at this load
	}{
		{0.1, 0.95}, {0.3, 0.93}, {0.5, 0.97}, {0.7, 0.97}, {0.9, 0.95},
	}
	for _, tt := range tests {
		lambda := tt.rho / p.AlphaMs
		bound := phi(p.AlphaMs, p.Tau0Ms, lambda)
		var sum, sumSq float64
		for seed := uint64(1); seed <= reps; seed++ {
			res, err := Run(context.Background(), Config{Profile: p, Policy: policy.Adhoc{}, RatePerSec: lambda * 1000, Requests: requests, Seed: seed})
			if err != nil {
				t.Fatal(err)
			}
			sum += res.MeanLatencyMs
			sumSq += res.MeanLatencyMs * res.MeanLatencyMs
		}
		mean := sum / reps
		se := math.Sqrt((sumSq/reps - mean*mean) / (reps - 1))
		t.Logf("rho %.1f: sim %.4f ms ± %.4f, phi %.4f ms, ratio %.3f", tt.rho, mean, se, bound, mean/bound)
		if mean-3*se > bound {
			t.Errorf("rho %.1f: simulated mean latency %.4f ms (± %.4f) is above the bound phi %.4f ms", tt.rho, mean, se, bound)
		}
		if mean < tt.minRatio*bound {
			t.Errorf("rho %.1f: simulated mean latency %.4f ms is far under phi %.4f ms (ratio %.3f < %.2f)", tt.rho, mean, bound, mean/bound, tt.minRatio)
		}
	}
}

// Little's law: the time-averaged number in system (integrated from event to
// event) equals throughput times mean latency (summed per request).
func TestLittlesLaw(t *testing.T) {
	tr, err := trace.Lookup(trace.Paper300)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		c    Config
	}{
		{"adhoc constant rate", Config{Profile: lookupPreset(t, "resnet152-titanrtx"), Policy: newPolicy(t, "adhoc", policy.Options{}), RatePerSec: 250, Requests: 20_000}},
		{"batchmonitor trace", Config{Profile: lookupPreset(t, "resnet152-titanrtx"), Policy: newPolicy(t, "batchmonitor", policy.Options{}), Trace: tr}},
		{"maxbatch two instances", Config{Profile: lookupPreset(t, "googlenet-p4"), Policy: newPolicy(t, "maxbatch", policy.Options{}), RatePerSec: 3000, Requests: 20_000, Instances: 2}},
		{"static with jitter", Config{Profile: lookupPreset(t, "resnet50-p4"), Policy: newPolicy(t, "static", policy.NewOptions(policy.StaticOptions{Batch: 8})), RatePerSec: 500, Requests: 20_000, Jitter: 0.3}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.c.Seed = 3
			res, err := Run(context.Background(), tt.c)
			if err != nil {
				t.Fatal(err)
			}
			lw := res.ThroughputRPS * res.MeanLatencyMs / 1000
			if res.MeanInSystem <= 0 || math.Abs(res.MeanInSystem-lw) > 1e-6*lw {
				t.Fatalf("mean in system %v, throughput*latency %v", res.MeanInSystem, lw)
			}
		})
	}
}

func TestDeterministic(t *testing.T) {
	tr, _ := trace.Lookup(trace.Paper300)
	c := Config{Profile: lookupPreset(t, "googlenet-p4"), Policy: newPolicy(t, "batchmonitor", policy.Options{}), Trace: tr, Seed: 42, Jitter: 0.2, Series: true}
	a, err := Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a, b) {
		t.Fatal("two runs with one seed differ")
	}
	c.Seed = 43
	d, err := Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	if d.MeanLatencyMs == a.MeanLatencyMs && d.Requests == a.Requests {
		t.Fatal("another seed gave the same run")
	}
}

// Every policy sees the same arrivals for one seed: common random numbers
// make comparisons fair.
func TestSameArrivalsAcrossPolicies(t *testing.T) {
	tr, _ := trace.Lookup(trace.Paper300)
	var first []int
	for _, name := range []string{"adhoc", "batchmonitor", "maxbatch"} {
		res, err := Run(context.Background(), Config{Profile: lookupPreset(t, "googlenet-p4"), Policy: newPolicy(t, name, policy.Options{}), Trace: tr, Seed: 9, Series: true})
		if err != nil {
			t.Fatal(err)
		}
		var arrivals []int
		for _, w := range res.Windows {
			arrivals = append(arrivals, w.Arrivals)
		}
		if first == nil {
			first = arrivals
			continue
		}
		if !reflect.DeepEqual(arrivals[:300], first[:300]) {
			t.Fatalf("%s saw other arrivals than adhoc", name)
		}
	}
}

// The monitor wiring: each window's batch size is Algorithm 1 applied to the
// previous window's counted rate and the profile's line.
func TestBatchMonitorFollowsRate(t *testing.T) {
	p := lookupPreset(t, "resnet152-titanrtx")
	tr, _ := trace.Lookup(trace.Paper300)
	res, err := Run(context.Background(), Config{Profile: p, Policy: newPolicy(t, "batchmonitor", policy.Options{}), Trace: tr, Seed: 5, Series: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Windows) < 300 {
		t.Fatalf("%d windows, want >= 300", len(res.Windows))
	}
	if res.Windows[0].BatchSize != 1 {
		t.Fatalf("first window batch %d, want the starting 1", res.Windows[0].BatchSize)
	}
	// The monitor re-plans every slice of a window on the last window's
	// count, or on the last slice's after a step: at a window's start the
	// rule is Algorithm 1 on the window before, unless a step was seen.
	seen := map[int]bool{}
	off := 0
	for i := 1; i < len(res.Windows); i++ {
		want := policy.ChooseBatch(res.Windows[i-1].RatePerSec, p.Latency, p.MaxBatch)
		if got := res.Windows[i].BatchSize; got != want {
			off++
			if got < want-1 || got > want+1 {
				t.Fatalf("window %d: batch %d, want ChooseBatch(%v) = %d give or take a step", i, got, res.Windows[i-1].RatePerSec, want)
			}
		}
		seen[want] = true
	}
	if off > len(res.Windows)/20 {
		t.Fatalf("%d of %d windows started off Algorithm 1 on the window before: too many steps seen", off, len(res.Windows))
	}
	t.Logf("%d of %d windows started after a step", off, len(res.Windows))
	if len(seen) < 4 {
		t.Fatalf("batch sizes %v: the trace should move the choice through several sizes", seen)
	}
}

func TestPolicyBounds(t *testing.T) {
	g := lookupPreset(t, "googlenet-p4")
	tests := []struct {
		name  string
		c     Config
		check func(t *testing.T, r Result)
	}{
		{"batchmonitor at low load: wait <= tau(2), busy <= tau(2), run tau(2)",
			Config{Profile: g, Policy: newPolicy(t, "batchmonitor", policy.Options{}), RatePerSec: 10, Requests: 2000},
			func(t *testing.T, r Result) {
				if lim := 3 * g.TauMs(2); r.MaxLatencyMs > lim+1e-6 {
					t.Fatalf("max latency %v ms above 3*tau(2) = %v", r.MaxLatencyMs, lim)
				}
				if r.MeanBatchSize < 1 || r.MeanBatchSize > 2 {
					t.Fatalf("mean batch %v outside [1, 2]", r.MeanBatchSize)
				}
			}},
		{"maxbatch at low load: every batch goes at the deadline",
			Config{Profile: g, Policy: newPolicy(t, "maxbatch", policy.NewOptions(policy.MaxBatchOptions{MaxQueueDelay: 5 * time.Millisecond})), RatePerSec: 100, Requests: 2000},
			func(t *testing.T, r Result) {
				if lim := 5 + g.TauMs(32); r.MaxLatencyMs > lim+1e-6 {
					t.Fatalf("max latency %v ms above deadline + tau(B_max) = %v", r.MaxLatencyMs, lim)
				}
				if r.P50LatencyMs < 5 {
					t.Fatalf("p50 %v ms: a request should wait for the deadline", r.P50LatencyMs)
				}
			}},
		{"maxbatch at overload sends B_max",
			Config{Profile: g, Policy: newPolicy(t, "maxbatch", policy.Options{}), RatePerSec: 1.2 * 1000 * g.MuPerMs(32), Requests: 20000},
			func(t *testing.T, r Result) {
				if r.MeanBatchSize < 31.9 {
					t.Fatalf("mean batch %v, want B_max", r.MeanBatchSize)
				}
			}},
		{"static sends b",
			Config{Profile: g, Policy: newPolicy(t, "static", policy.NewOptions(policy.StaticOptions{Batch: 8})), RatePerSec: 1000, Requests: 8000},
			func(t *testing.T, r Result) {
				if r.MeanBatchSize < 7.99 || r.MeanBatchSize > 8 {
					t.Fatalf("mean batch %v, want 8", r.MeanBatchSize)
				}
			}},
		{"adhoc at low load sends singles",
			Config{Profile: g, Policy: newPolicy(t, "adhoc", policy.Options{}), RatePerSec: 1, Requests: 200},
			func(t *testing.T, r Result) {
				if r.MeanBatchSize > 1.01 || r.MaxLatencyMs > g.TauMs(2)*2 {
					t.Fatalf("mean batch %v max latency %v", r.MeanBatchSize, r.MaxLatencyMs)
				}
			}},
		{"two instances cut latency at high load",
			Config{Profile: g, Policy: newPolicy(t, "adhoc", policy.Options{}), RatePerSec: 0.9 * 1000 * g.MuPerMs(32), Requests: 20000, Instances: 2},
			func(t *testing.T, r Result) {
				one, err := Run(context.Background(), Config{Profile: g, Policy: policy.Adhoc{}, RatePerSec: 0.9 * 1000 * g.MuPerMs(32), Requests: 20000})
				if err != nil {
					t.Fatal(err)
				}
				if !(r.MeanLatencyMs < one.MeanLatencyMs) {
					t.Fatalf("two instances %v ms, one %v ms", r.MeanLatencyMs, one.MeanLatencyMs)
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := Run(context.Background(), tt.c)
			if err != nil {
				t.Fatal(err)
			}
			if r.Requests != tt.c.Requests {
				t.Fatalf("completed %d of %d requests", r.Requests, tt.c.Requests)
			}
			tt.check(t, r)
		})
	}
}

func TestEnergy(t *testing.T) {
	g := lookupPreset(t, "googlenet-p4")
	base := Config{Profile: g, Policy: policy.Adhoc{}, RatePerSec: 2000, Requests: 10000, Seed: 1}
	r, err := Run(context.Background(), base)
	if err != nil {
		t.Fatal(err)
	}
	if r.RequestsPerJoule == nil || r.EnergyJ == nil {
		t.Fatal("profile with energy must report requests per joule")
	}
	// zeta is linear, so the total is beta*N + zeta0*batches.
	want := (g.BetaMJ*float64(r.Requests) + g.Zeta0MJ*float64(r.Batches)) / 1000
	if math.Abs(*r.EnergyJ-want) > 1e-9*want {
		t.Fatalf("energy %v J, want %v", *r.EnergyJ, want)
	}
	idle := base
	idle.IdleWatts = 50
	ri, err := Run(context.Background(), idle)
	if err != nil {
		t.Fatal(err)
	}
	wantIdle := want + 50*ri.DurationS // idle power all the time, zeta(b) on top
	if math.Abs(*ri.EnergyJ-wantIdle) > 1e-6*wantIdle || !(*ri.RequestsPerJoule < *r.RequestsPerJoule) {
		t.Fatalf("idle energy %v J, want %v; rpj %v vs %v", *ri.EnergyJ, wantIdle, *ri.RequestsPerJoule, *r.RequestsPerJoule)
	}
	none := base
	none.Profile = lookupPreset(t, "resnet50-titanrtx")
	rn, err := Run(context.Background(), none)
	if err != nil {
		t.Fatal(err)
	}
	if rn.RequestsPerJoule != nil || rn.EnergyJ != nil {
		t.Fatal("profile without energy must report no requests per joule")
	}
}

func TestTraceRun(t *testing.T) {
	tr, _ := trace.Lookup(trace.Paper300)
	r, err := Run(context.Background(), Config{Profile: lookupPreset(t, "googlenet-p4"), Policy: policy.Adhoc{}, Trace: tr, Seed: 2})
	if err != nil {
		t.Fatal(err)
	}
	if want := tr.Expected(); math.Abs(float64(r.Requests)-want) > 4*math.Sqrt(want) {
		t.Fatalf("%d requests, want %v ± 4 sd", r.Requests, want)
	}
	if r.DurationS < 290 || r.DurationS > 301 { // the last arrival comes at 1 req/s
		t.Fatalf("duration %v s, want 290..301", r.DurationS)
	}
	capped, err := Run(context.Background(), Config{Profile: lookupPreset(t, "googlenet-p4"), Policy: policy.Adhoc{}, Trace: tr, Seed: 2, Requests: 100})
	if err != nil || capped.Requests != 100 {
		t.Fatalf("capped run: %d requests, %v", capped.Requests, err)
	}
}

type stuckPolicy struct{}

func (stuckPolicy) Name() string                      { return "stuck" }
func (stuckPolicy) Plan(policy.Estimate) policy.Rule  { return stuckRule{} }
func (stuckRule) Decide(policy.Queue) policy.Decision { return policy.Wait() }
func (stuckRule) Status() policy.Status               { return policy.Status{Policy: "stuck"} }

// HoldAllowance lifts the monitor's hold bound (policy.HoldAllower), which
// would otherwise send what this rule never does.
func (stuckRule) HoldAllowance() time.Duration { return 365 * 24 * time.Hour }

type stuckRule struct{}

func TestStuckRuleIsAnError(t *testing.T) {
	_, err := Run(context.Background(), Config{Profile: lookupPreset(t, "googlenet-p4"), Policy: stuckPolicy{}, RatePerSec: 100, Requests: 10, DrainLimit: time.Minute})
	if err == nil || !strings.Contains(err.Error(), "still waiting") {
		t.Fatalf("error %v, want a stuck-queue error", err)
	}
}

func TestCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := Run(ctx, Config{Profile: lookupPreset(t, "googlenet-p4"), Policy: policy.Adhoc{}, RatePerSec: 1000, Requests: 1_000_000})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v, want context.Canceled", err)
	}
}

// cancellingPolicy is ad-hoc that cancels the run's context at its first
// decision and counts the decisions after it.
type cancellingPolicy struct {
	cancel    context.CancelFunc
	decisions *int
}

func (cancellingPolicy) Name() string                       { return "cancelling" }
func (p cancellingPolicy) Plan(policy.Estimate) policy.Rule { return p }
func (p cancellingPolicy) Decide(q policy.Queue) policy.Decision {
	*p.decisions++
	p.cancel()
	return policy.Adhoc{}.Plan(policy.Estimate{}).Decide(q)
}
func (cancellingPolicy) Status() policy.Status { return policy.Status{Policy: "cancelling"} }

// A run stops within an event or two of its context's end: one event can
// take seconds when a policy solves a large model, so a run must not go
// on for thousands of them after ^C.
func TestCancelStopsAtOnce(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	decisions := 0
	_, err := Run(ctx, Config{Profile: lookupPreset(t, "googlenet-p4"), Policy: cancellingPolicy{cancel, &decisions}, RatePerSec: 1000, Requests: 1_000_000})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v, want context.Canceled", err)
	}
	if decisions > 2 {
		t.Errorf("%d decisions after the context ended, want at most 2", decisions)
	}
}

func TestConfigErrors(t *testing.T) {
	g := lookupPreset(t, "googlenet-p4")
	tr, _ := trace.Lookup(trace.Paper300)
	tests := []struct {
		name string
		c    Config
		want string
	}{
		{"no policy", Config{Profile: g, RatePerSec: 1}, "no policy"},
		{"no rate", Config{Profile: g, Policy: policy.Adhoc{}}, "arrival rate"},
		{"rate and trace", Config{Profile: g, Policy: policy.Adhoc{}, RatePerSec: 1, Trace: tr}, "not both"},
		{"bad profile", Config{Profile: preset.Profile{Name: "p", Latency: batchcost.Latency{AlphaMs: 0}, MaxBatch: 1}, Policy: policy.Adhoc{}, RatePerSec: 1}, "alpha"},
		{"jitter", Config{Profile: g, Policy: policy.Adhoc{}, RatePerSec: 1, Jitter: 1}, "jitter"},
		{"idle", Config{Profile: g, Policy: policy.Adhoc{}, RatePerSec: 1, IdleWatts: -1}, "idle power"},
		{"instances", Config{Profile: g, Policy: policy.Adhoc{}, RatePerSec: 1, Instances: -1}, "instances"},
		{"requests", Config{Profile: g, Policy: policy.Adhoc{}, RatePerSec: 1, Requests: -1}, "requests"},
		{"window", Config{Profile: g, Policy: policy.Adhoc{}, RatePerSec: 1, Window: time.Microsecond}, "window must be at least 1ms"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := Run(context.Background(), tt.c); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want it to mention %q", err, tt.want)
			}
		})
	}
}

// BenchmarkRunMillion simulates one million requests per iteration.
func BenchmarkRunMillion(b *testing.B) {
	g := lookupPreset(b, "googlenet-p4")
	for _, name := range []string{"adhoc", "batchmonitor"} {
		b.Run(name, func(b *testing.B) {
			pol := newPolicy(b, name, policy.Options{})
			b.ReportAllocs()
			for b.Loop() {
				r, err := Run(context.Background(), Config{Profile: g, Policy: pol, RatePerSec: 0.5 * 1000 * g.MuPerMs(32), Requests: 1_000_000, Seed: 1})
				if err != nil || r.Requests != 1_000_000 {
					b.Fatal(r.Requests, err)
				}
			}
		})
	}
}

// Validate names the field at fault, so that a command can name its flag.
func TestValidateNamesTheField(t *testing.T) {
	good := Config{Profile: lookupPreset(t, "googlenet-p4"), Policy: policy.Adhoc{}, RatePerSec: 10}
	if err := good.Validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	for field, mod := range map[string]func(*Config){
		"Profile":    func(c *Config) { c.Profile.AlphaMs = 0 },
		"Policy":     func(c *Config) { c.Policy = nil },
		"RatePerSec": func(c *Config) { c.RatePerSec = -1 },
		"Window":     func(c *Config) { c.Window = time.Microsecond },
		"Jitter":     func(c *Config) { c.Jitter = 1 },
		"SLA":        func(c *Config) { c.SLA = -1 },
		"Arrivals":   func(c *Config) { c.Arrivals = []time.Duration{time.Millisecond} },
		"Overhead":   func(c *Config) { c.Overhead = -1 },
		"Turnaround": func(c *Config) { c.Turnaround = -1 },
		"OverheadSamples": func(c *Config) {
			c.OverheadSamples = []time.Duration{time.Millisecond, -1}
		},
	} {
		c := good
		mod(&c)
		var ie *InvalidError
		if err := c.Validate(); !errors.As(err, &ie) || ie.Field != field {
			t.Errorf("%s: Validate() = %v, want an InvalidError for %s", field, err, field)
		}
	}
}

// TestArrivalsReplayed runs explicit arrival times (a live load's schedule):
// adhoc on one instance, so each request's latency follows by hand.
func TestArrivalsReplayed(t *testing.T) {
	p := preset.Profile{Name: "line", Latency: batchcost.Latency{AlphaMs: 1, Tau0Ms: 4}, MaxBatch: 8}
	ms := time.Millisecond
	// 0: alone, done at 5. 1 and 2 wait for it, go together at 5, done at 11.
	// 20: alone again, done at 25.
	r, err := Run(context.Background(), Config{Profile: p, Policy: policy.Adhoc{}, Arrivals: []time.Duration{0, 1 * ms, 2 * ms, 20 * ms}})
	if err != nil {
		t.Fatal(err)
	}
	want := (5.0 + 10 + 9 + 5) / 4
	if r.Requests != 4 || r.Batches != 3 || math.Abs(r.MeanLatencyMs-want) > 1e-9 {
		t.Fatalf("requests %d batches %d mean %v ms, want 4, 3, %v", r.Requests, r.Batches, r.MeanLatencyMs, want)
	}
	for _, bad := range []Config{
		{Profile: p, Policy: policy.Adhoc{}, Arrivals: []time.Duration{2 * ms, 1 * ms}},
		{Profile: p, Policy: policy.Adhoc{}, Arrivals: []time.Duration{-ms}},
		{Profile: p, Policy: policy.Adhoc{}, Arrivals: []time.Duration{ms}, RatePerSec: 5},
	} {
		var ie *InvalidError
		if err := bad.Validate(); !errors.As(err, &ie) || ie.Field != "Arrivals" {
			t.Errorf("%v: Validate() = %v, want an InvalidError for Arrivals", bad.Arrivals, err)
		}
	}
}

// TestOverheadFeedsTheMonitorAsLive: a per-batch overhead beyond compute
// holds the instance like compute does, so adhoc (which plans nothing) runs
// exactly as with the overhead folded into tau0; the rules that plan from
// the estimate learn the line from the simulated server's statistics and
// the overhead from the round trips, as the live proxy's monitor does, and
// land where the folded line does.
func TestOverheadFeedsTheMonitorAsLive(t *testing.T) {
	p := lookupPreset(t, "googlenet-p4")
	p.MaxBatch = 8
	const ovh = 1100 * time.Microsecond
	folded := p
	folded.Tau0Ms += 1.1
	for _, name := range []string{policy.NameAdhoc, policy.NameBatchMonitor, policy.NameBatchMonitorPlus} {
		run := func(prof preset.Profile, o time.Duration) Result {
			pl, err := policy.New(name, policy.Options{})
			if err != nil {
				t.Fatal(err)
			}
			r, err := Run(context.Background(), Config{Profile: prof, Policy: pl, RatePerSec: 0.6 * 1000 * folded.MuPerMs(8), Requests: 20000, Seed: 3, Overhead: o})
			if err != nil {
				t.Fatal(err)
			}
			return r
		}
		a, b := run(folded, 0), run(p, ovh)
		t.Logf("%s: folded b %.3f lat %.3f; overhead b %.3f lat %.3f", name, a.MeanBatchSize, a.MeanLatencyMs, b.MeanBatchSize, b.MeanLatencyMs)
		tol := 0.03
		if name == policy.NameAdhoc {
			tol = 1e-6
		}
		if math.Abs(b.MeanBatchSize/a.MeanBatchSize-1) > tol || math.Abs(b.MeanLatencyMs/a.MeanLatencyMs-1) > tol {
			t.Errorf("%s: with the overhead apart b %.4f, latency %.4f ms; folded into tau0 b %.4f, %.4f ms", name, b.MeanBatchSize, b.MeanLatencyMs, a.MeanBatchSize, a.MeanLatencyMs)
		}
	}
	var ie *InvalidError
	if err := (Config{Profile: p, Policy: policy.Adhoc{}, RatePerSec: 1, Overhead: -1}).Validate(); !errors.As(err, &ie) || ie.Field != "Overhead" {
		t.Fatalf("negative overhead: %v", err)
	}
}

// spreadFunc draws batch times with a function.
type spreadFunc func(rng *rand.Rand, meanMs float64) float64

func (f spreadFunc) BatchMs(rng *rand.Rand, meanMs float64) float64 { return f(rng, meanMs) }

// TestSpreadQueuesAtTheSameMean checks Config.Spread: a spread that keeps
// every batch at its mean changes nothing, and a heavy tail of the same
// mean queues more near saturation (the wait grows with the batch time's
// second moment), as the rough emulator's does live.
func TestSpreadQueuesAtTheSameMean(t *testing.T) {
	p := lookupPreset(t, "googlenet-p4")
	rate := 0.8 * 1000 * float64(p.MaxBatch) / p.TauMs(p.MaxBatch)
	run := func(s Spread) Result {
		res, err := Run(context.Background(), Config{Profile: p, Policy: policy.Adhoc{}, RatePerSec: rate, Requests: 40_000, Seed: 5, Spread: s})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	exact := run(nil)
	if same := run(spreadFunc(func(_ *rand.Rand, m float64) float64 { return m })); same.MeanLatencyMs != exact.MeanLatencyMs {
		t.Errorf("a spread of nothing moved the mean latency: %.4g ms against %.4g", same.MeanLatencyMs, exact.MeanLatencyMs)
	}
	// 2% of batches take 10x their mean, the rest a little less: mean
	// kept, squared coefficient of variation 1.6.
	tail := spreadFunc(func(rng *rand.Rand, m float64) float64 {
		if rng.Float64() < 0.02 {
			return 10 * m
		}
		return m * 0.8 / 0.98
	})
	if rough := run(tail); rough.MeanLatencyMs < 1.1*exact.MeanLatencyMs {
		t.Errorf("a heavy tail of the same mean: mean latency %.4g ms against %.4g without, want at least 1.1x", rough.MeanLatencyMs, exact.MeanLatencyMs)
	} else {
		t.Logf("mean latency %.4g ms with the tail, %.4g without", rough.MeanLatencyMs, exact.MeanLatencyMs)
	}
}
