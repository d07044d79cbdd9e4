package smdp

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/ratebatch/ratebatch/lab/preset"
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

// capped returns a preset with its max batch lowered, to keep tests small.
func capped(t testing.TB, name string, bmax int) preset.Profile {
	p := lookupPreset(t, name)
	p.MaxBatch = bmax
	return p
}

// options returns the section-3 defaults with a chosen SMax and epsilon.
func options(t testing.TB, m Model, w1, w2 float64, sMax int, eps float64) Options {
	t.Helper()
	co, err := DefaultCo(m, w1, w2, sMax)
	if err != nil {
		t.Fatal(err)
	}
	return Options{W1: w1, W2: w2, Co: co, Epsilon: eps, SMax: sMax, IterMax: DefaultIterMax}
}

func TestPoissonIsADistribution(t *testing.T) {
	for _, mean := range []float64{1e-3, 0.5, 3, 29, 300, 2000} {
		pmf, tail := poisson(mean, 400)
		sum := 0.0
		for _, p := range pmf {
			if math.IsNaN(p) || p < 0 {
				t.Fatalf("mean %v: bad probability %v", mean, p)
			}
			sum += p
		}
		if math.Abs(sum-1) > 1e-12 {
			t.Errorf("mean %v: pmf sums to %v", mean, sum)
		}
		if math.Abs(tail[0]-1) > 1e-12 {
			t.Errorf("mean %v: P(K >= 0) = %v", mean, tail[0])
		}
		for k := 0; k < len(tail)-1; k++ {
			pk := 0.0
			if k < len(pmf) {
				pk = pmf[k]
			}
			if d := tail[k] - tail[k+1]; math.Abs(d-pk) > 1e-15+1e-12*pk {
				t.Fatalf("mean %v: tail[%d]-tail[%d] = %v, pmf = %v", mean, k, k+1, d, pk)
			}
		}
	}
}

// With B_max = 1 ad-hoc batching is the M/D/1 queue, whose mean response
// time is D + lambda*D^2/(2(1-lambda*D)) (Pollaczek-Khinchine).
func TestEvaluateMatchesMD1(t *testing.T) {
	for _, rho := range []float64{0.1, 0.5, 0.8, 0.95} {
		m := Model{Latency: batchcost.Latency{AlphaMs: 0.5, Tau0Ms: 1.5}, Energy: batchcost.Energy{BetaMJ: 3, Zeta0MJ: 7}, MaxBatch: 1}
		d := m.TauMs(1)
		m.LambdaPerMs = rho / d
		o := Options{W1: 1, W2: 0.5, Epsilon: DefaultEpsilon, SMax: 400, IterMax: DefaultIterMax}
		ev, err := Evaluate(m, o, AdHoc(m, o.SMax))
		if err != nil {
			t.Fatalf("rho %v: %v", rho, err)
		}
		wantLat := d + m.LambdaPerMs*d*d/(2*(1-rho))
		wantPow := m.LambdaPerMs * m.ZetaMJ(1)
		if math.Abs(ev.LatencyMs-wantLat) > 1e-9*wantLat {
			t.Errorf("rho %v: latency %.12g, want M/D/1 %.12g", rho, ev.LatencyMs, wantLat)
		}
		if math.Abs(ev.PowerW-wantPow) > 1e-9*wantPow {
			t.Errorf("rho %v: power %.12g, want %.12g", rho, ev.PowerW, wantPow)
		}
		if want := o.W1*wantLat + o.W2*wantPow; math.Abs(ev.G-want) > 1e-9*want {
			t.Errorf("rho %v: g %.12g, want %.12g", rho, ev.G, want)
		}
		if ev.MeanBatch != 1 || !(ev.Delta < DeltaAccept) {
			t.Errorf("rho %v: mean batch %v delta %v", rho, ev.MeanBatch, ev.Delta)
		}
	}
}

// The value iteration's expectations, built by convolving Poisson(lambda*alpha)
// action by action, must equal the direct sums over each action's transition
// row (the rows Evaluate uses), for a value vector with the quadratic growth
// of real relative values plus noise.
func TestExpectationsMatchTransitionRows(t *testing.T) {
	for _, rho := range []float64{0.05, 0.5, 0.95} {
		m := modelFor(lookupPreset(t, "googlenet-p4"), rho)
		o := Options{W1: 1, Co: 1, Epsilon: DefaultEpsilon, SMax: 90, IterMax: 1}
		k := newKernel(m, o)
		J := make([]float64, k.n)
		rng := rand.New(rand.NewPCG(1, uint64(rho*100)))
		for s := range J {
			J[s] = float64(s*s) + 10*rng.Float64()
		}
		J[k.so] = 1.2 * J[o.SMax]
		scale := J[k.so]
		calls := 0
		newExpecter(k).each(J, func(a int, e []float64) {
			calls++
			for base := 0; base <= o.SMax-a; base++ {
				direct := 0.0
				k.row(base+a, a, func(j int, p float64) { direct += p * J[j] })
				if math.Abs(e[base]-direct) > 1e-12*scale {
					t.Fatalf("rho %v a %d base %d: expectation %v, direct %v", rho, a, base, e[base], direct)
				}
			}
		})
		if calls != m.MaxBatch {
			t.Fatalf("rho %v: %d actions visited, want %d", rho, calls, m.MaxBatch)
		}
	}
}

// The stationary distribution must satisfy pi P = pi to near machine
// precision, including on chains with transient states.
func TestStationaryResidual(t *testing.T) {
	p := lookupPreset(t, "googlenet-p4")
	for _, rho := range []float64{0.05, 0.5, 0.9} {
		m := modelFor(p, rho)
		o := Options{W1: 1, W2: 1, Co: 10, Epsilon: DefaultEpsilon, SMax: 120, IterMax: 1}
		k := newKernel(m, o)
		for name, pol := range map[string][]int{
			"adhoc": AdHoc(m, o.SMax), "batchmonitor": BatchMonitor(m, o.SMax), "limit:9": ControlLimit(m, o.SMax, 9),
		} {
			pi, err := k.stationary(k.rows(pol))
			if err != nil {
				t.Fatalf("rho %v %s: %v", rho, name, err)
			}
			next := make([]float64, k.n)
			sum := 0.0
			for s, ps := range pi {
				sum += ps
				k.row(s, pol[s], func(j int, p float64) { next[j] += ps * p })
			}
			res := 0.0
			for s := range pi {
				res += math.Abs(next[s] - pi[s])
			}
			if math.Abs(sum-1) > 1e-12 || res > 1e-12 {
				t.Errorf("rho %v %s: sum %v, |pi P - pi|_1 = %v", rho, name, sum, res)
			}
		}
	}
}

// Structure of solved policies. Section 3 expects a control limit L: wait
// below L, serve at and above it, with L growing in w2. What the solver
// finds, and this test holds it to: the serve/wait decision is exactly a
// threshold, the policy serves everything at the threshold, L is
// nondecreasing in w2, and the pure control-limit policy "serve
// min(s, B_max) from L on" with the same L is the best of its family and
// within 0.1% of the optimum. The optimum may send less than min(s, B_max)
// in long queues: with tau linear, splitting n waiting requests into two
// batches lowers their summed latency once n > 2*tau0/alpha, so no rule
// forces min(s, B_max) in every state (such states are rarely visited,
// hence the tiny gap).
func TestSolvedPolicyHasControlLimit(t *testing.T) {
	w2s := []float64{0, 0.3, 1, 3, 10}
	for _, tc := range []struct {
		preset string
		rho    float64
	}{
		{"googlenet-p4", 0.2}, {"googlenet-p4", 0.6}, {"resnet50-p4", 0.4},
	} {
		m := modelFor(capped(t, tc.preset, 32), tc.rho)
		prevL := 0
		for _, w2 := range w2s {
			name := fmt.Sprintf("%s rho %v w2 %v", tc.preset, tc.rho, w2)
			o := options(t, m, 1, w2, 80, 1e-3)
			sol, err := Solve(context.Background(), m, o)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if !sol.Converged {
				t.Fatalf("%s: not converged after %d sweeps", name, sol.Iterations)
			}
			L := sol.ControlLimit
			for s, a := range sol.Policy {
				if (a > 0) != (s >= L) {
					t.Fatalf("%s: policy %v is not a threshold at L=%d (state %d action %d)", name, sol.Policy, L, s, a)
				}
			}
			if got := sol.Policy[L]; got != min(L, m.MaxBatch) {
				t.Errorf("%s: at the limit %d the policy serves %d, want all %d", name, L, got, min(L, m.MaxBatch))
			}
			if L < prevL {
				t.Errorf("%s: control limit %d below %d at a smaller w2", name, L, prevL)
			}
			prevL = L
			if !(sol.Delta < DeltaAccept) {
				t.Errorf("%s: delta %v >= %v", name, sol.Delta, DeltaAccept)
			}
			// The exact g of the greedy policy lies inside the RVI bounds.
			if tol := 1e-9 * sol.G; sol.G < sol.GLower-tol || sol.G > sol.GUpper+tol {
				t.Errorf("%s: exact g %v outside RVI bounds [%v, %v]", name, sol.G, sol.GLower, sol.GUpper)
			}
			evr, err := NewEvaluator(m, o)
			if err != nil {
				t.Fatal(err)
			}
			bestG, bestL := math.Inf(1), 0
			for l := 1; l <= 2*m.MaxBatch; l++ {
				ev, err := evr.Evaluate(ControlLimit(m, o.SMax, l))
				if err != nil {
					t.Fatal(err)
				}
				if ev.G < bestG {
					bestG, bestL = ev.G, l
				}
			}
			if bestL != L {
				t.Errorf("%s: best control limit %d, solver's limit %d", name, bestL, L)
			}
			// g(greedy) - g* <= span: nothing may beat the solution by more.
			if span := sol.GUpper - sol.GLower; sol.G > bestG+span {
				t.Errorf("%s: optimum %v worse than control limit %d (%v) by more than the span %v", name, sol.G, bestL, bestG, span)
			}
			if gap := (bestG - sol.G) / sol.G; gap > 1e-3 {
				t.Errorf("%s: best control-limit policy is %.3g%% above the optimum", name, 100*gap)
			}
		}
	}
}

// The optimum is no worse than any baseline on the same model (up to the
// RVI span, the bound on its suboptimality), and the baselines keep their
// documented shapes.
func TestOptimumBeatsBaselines(t *testing.T) {
	for _, tc := range []struct {
		preset string
		rho    float64
		w2     float64
	}{
		{"googlenet-p4", 0.3, 1}, {"googlenet-p4", 0.7, 0.2}, {"resnet50-p4", 0.5, 3},
	} {
		name := fmt.Sprintf("%s rho %v w2 %v", tc.preset, tc.rho, tc.w2)
		m := modelFor(capped(t, tc.preset, 32), tc.rho)
		o := options(t, m, 1, tc.w2, 100, DefaultEpsilon)
		sol, err := Solve(context.Background(), m, o)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		span := sol.GUpper - sol.GLower
		policies := map[string][]int{"adhoc": AdHoc(m, o.SMax), "batchmonitor": BatchMonitor(m, o.SMax)}
		for b := 1; b <= m.MaxBatch; b++ {
			if m.LambdaPerMs < m.MuPerMs(b) { // static b is stable
				policies[fmt.Sprintf("static:%d", b)] = Static(m, o.SMax, b)
			}
		}
		for pname, pol := range policies {
			ev, err := Evaluate(m, o, pol)
			if err != nil {
				t.Fatalf("%s %s: %v", name, pname, err)
			}
			if sol.G > ev.G+span {
				t.Errorf("%s: optimum g %v above %s's %v (span %v)", name, sol.G, pname, ev.G, span)
			}
			if want := o.W1*ev.LatencyMs + o.W2*ev.PowerW + ev.OverflowCost; math.Abs(ev.G-want) > 1e-9*ev.G {
				t.Errorf("%s %s: g %v is not w1*latency + w2*power + overflow = %v", name, pname, ev.G, want)
			}
		}
	}
}

// Delta flags a state bound that is too small, and shrinks below the
// acceptance level once SMax is reasonable.
func TestDeltaShrinksWithSMax(t *testing.T) {
	m := modelFor(lookupPreset(t, "googlenet-p4"), 0.9)
	small := options(t, m, 1, 1, m.MaxBatch, DefaultEpsilon)
	large := options(t, m, 1, 1, 200, DefaultEpsilon)
	pol := AdHoc(m, small.SMax)
	evSmall, err := Evaluate(m, small, pol)
	if err != nil {
		t.Fatal(err)
	}
	evLarge, err := Evaluate(m, large, AdHoc(m, large.SMax))
	if err != nil {
		t.Fatal(err)
	}
	if !(evSmall.Delta >= DeltaAccept) {
		t.Errorf("smax %d at rho 0.9: delta %v, want >= %v", small.SMax, evSmall.Delta, DeltaAccept)
	}
	if !(evLarge.Delta < DeltaAccept) {
		t.Errorf("smax %d at rho 0.9: delta %v, want < %v", large.SMax, evLarge.Delta, DeltaAccept)
	}
}

// Without an abstract cost the overflow state caps the holding cost, and a
// power-heavy objective then prefers never serving again once the queue is
// full: a finite-model artifact that Delta exposes. DefaultCo removes it.
func TestDefaultCoPreventsParkingInOverflow(t *testing.T) {
	m := modelFor(lookupPreset(t, "googlenet-p4"), 0.5)
	o := options(t, m, 1, 10, DefaultSMax, DefaultEpsilon)
	good, err := Solve(context.Background(), m, o)
	if err != nil {
		t.Fatal(err)
	}
	if good.Policy[o.SMax+1] == 0 || !(good.Delta < DeltaAccept) {
		t.Errorf("default co %v: overflow action %d, delta %v", o.Co, good.Policy[o.SMax+1], good.Delta)
	}
	o.Co = 0
	bad, err := Solve(context.Background(), m, o)
	if err != nil {
		t.Fatal(err)
	}
	if !(bad.Delta >= DeltaAccept) {
		t.Errorf("co 0: delta %v, want the artifact flagged (>= %v); policy %v", bad.Delta, DeltaAccept, bad.Policy)
	}
}

func TestBatchMonitorSize(t *testing.T) {
	p := lookupPreset(t, "googlenet-p4") // mu(b) = b/(0.3051b + 1.052)
	for _, tc := range []struct {
		lambda float64
		want   int
	}{
		{0.1, 2},  // mu(2) = 1.203 > 0.1
		{1.3, 3},  // mu(2) = 1.203 <= 1.3 < mu(3) = 1.521
		{2.0, 6},  // b > 2*1.052/(1 - 2*0.3051) = 5.397
		{3.5, 32}, // above mu(32) = 2.959: no b qualifies, B_max
	} {
		m := modelFor(p, 0)
		m.LambdaPerMs = tc.lambda
		if got := BatchMonitorSize(m); got != tc.want {
			t.Errorf("lambda %v: batch size %d, want %d", tc.lambda, got, tc.want)
		}
	}
}

func TestPolicyBuilders(t *testing.T) {
	m := Model{Latency: batchcost.Latency{AlphaMs: 1, Tau0Ms: 1}, MaxBatch: 4, LambdaPerMs: 0.5}
	tests := []struct {
		spec    string
		want    []int
		wantErr string
	}{
		{spec: "adhoc", want: []int{0, 1, 2, 3, 4, 4, 4, 4, 4}},
		{spec: "limit:3", want: []int{0, 0, 0, 3, 4, 4, 4, 4, 4}},
		{spec: "static:3", want: []int{0, 0, 0, 3, 3, 3, 3, 3, 3}},
		{spec: "batchmonitor", want: []int{0, 0, 2, 2, 2, 2, 2, 2, 2}}, // mu(2) = 2/3 > 0.5
		{spec: " static:4 ", want: []int{0, 0, 0, 0, 4, 4, 4, 4, 4}},
		{spec: "static:5", wantErr: "1..4"},
		{spec: "static", wantErr: "needs a batch size"},
		{spec: "static:x", wantErr: "integer"},
		{spec: "limit:0", wantErr: "1..8"},
		{spec: "adhoc:2", wantErr: "takes no argument"},
		{spec: "greedy", wantErr: "unknown policy"},
	}
	for _, tt := range tests {
		got, err := NamedPolicy(m, 7, tt.spec)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%q: error %v, want %q", tt.spec, err, tt.wantErr)
			}
			continue
		}
		if err != nil || fmt.Sprint(got) != fmt.Sprint(tt.want) {
			t.Errorf("%q: %v, %v; want %v", tt.spec, got, err, tt.want)
		}
	}
	for _, tc := range []struct{ requests, want int }{{-1, 0}, {1, 0}, {2, 2}, {9, 2}} {
		if got := ActionAt([]int{0, 0, 2, 3}, tc.requests); got != tc.want { // smax 2, S_o serves 3
			t.Errorf("ActionAt(%d) = %d, want %d", tc.requests, got, tc.want)
		}
	}
	if got := ControlLimitOf([]int{0, 0, 2, 3}); got != 2 {
		t.Errorf("ControlLimitOf = %d, want 2", got)
	}
}

func TestInvalidInput(t *testing.T) {
	good := Model{Latency: batchcost.Latency{AlphaMs: 0.3, Tau0Ms: 1}, Energy: batchcost.Energy{BetaMJ: 2, Zeta0MJ: 3}, MaxBatch: 8, LambdaPerMs: 1}
	opts := Options{W1: 1, W2: 1, Co: 5, Epsilon: 0.01, SMax: 50, IterMax: 100}
	mod := func(f func(*Model)) Model { m := good; f(&m); return m }
	opt := func(f func(*Options)) Options { o := opts; f(&o); return o }
	tests := []struct {
		name string
		m    Model
		o    Options
		want string
	}{
		{"unstable", mod(func(m *Model) { m.LambdaPerMs = 3 }), opts, "unstable"},
		{"zero rate", mod(func(m *Model) { m.LambdaPerMs = 0 }), opts, "arrival rate"},
		{"alpha NaN", mod(func(m *Model) { m.AlphaMs = math.NaN() }), opts, "alpha"},
		{"tau0 negative", mod(func(m *Model) { m.Tau0Ms = -1 }), opts, "tau0"},
		{"beta negative", mod(func(m *Model) { m.BetaMJ = -1 }), opts, "beta"},
		{"no batches", mod(func(m *Model) { m.MaxBatch = 0 }), opts, "max batch"},
		{"w1 zero", good, opt(func(o *Options) { o.W1 = 0 }), "w1"},
		{"w2 negative", good, opt(func(o *Options) { o.W2 = -1 }), "w2"},
		{"co negative", good, opt(func(o *Options) { o.Co = -1 }), "co"},
		{"epsilon zero", good, opt(func(o *Options) { o.Epsilon = 0 }), "epsilon"},
		{"smax below bmax", good, opt(func(o *Options) { o.SMax = 7 }), "smax"},
		{"iter max zero", good, opt(func(o *Options) { o.IterMax = 0 }), "iter-max"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := Solve(context.Background(), tt.m, tt.o); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Solve error %v, want mention of %q", err, tt.want)
			}
			if _, err := Evaluate(tt.m, tt.o, AdHoc(good, opts.SMax)); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Evaluate error %v, want mention of %q", err, tt.want)
			}
		})
	}
}

func TestEvaluateRejectsBadPolicies(t *testing.T) {
	m := Model{Latency: batchcost.Latency{AlphaMs: 0.3, Tau0Ms: 1}, MaxBatch: 4, LambdaPerMs: 1}
	o := Options{W1: 1, Epsilon: 0.01, SMax: 6, IterMax: 10}
	tests := []struct {
		name   string
		policy []int
		want   string
	}{
		{"short", []int{0, 1, 2}, "want 8"},
		{"more than waiting", []int{0, 2, 2, 3, 4, 4, 4, 4}, "state 1"},
		{"above bmax", []int{0, 1, 2, 3, 4, 5, 4, 4}, "state 5"},
		{"negative", []int{0, 1, -1, 3, 4, 4, 4, 4}, "state 2"},
		{"waits in overflow", []int{0, 1, 2, 3, 4, 4, 4, 0}, "overflow"},
	}
	for _, tt := range tests {
		if _, err := Evaluate(m, o, tt.policy); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: error %v, want mention of %q", tt.name, err, tt.want)
		}
	}
}

func TestSolveStopsAtIterMaxAndOnCancel(t *testing.T) {
	m := modelFor(lookupPreset(t, "googlenet-p4"), 0.5)
	o := options(t, m, 1, 1, 100, DefaultEpsilon)
	o.IterMax = 5
	sol, err := Solve(context.Background(), m, o)
	if err != nil {
		t.Fatal(err)
	}
	if sol.Converged || sol.Iterations != 5 || len(sol.Policy) != o.SMax+2 {
		t.Errorf("iter-max 5: converged %v after %d sweeps, policy len %d", sol.Converged, sol.Iterations, len(sol.Policy))
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	o.IterMax = DefaultIterMax
	if _, err := Solve(ctx, m, o); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled solve: error %v, want context.Canceled", err)
	}
}

func BenchmarkSolve(b *testing.B) {
	p := lookupPreset(b, "googlenet-p4") // B_max = 32
	for _, rho := range []float64{0.5, 0.9, 0.95} {
		for _, scv := range []float64{0, 0.3} {
			name := fmt.Sprintf("bmax=32/smax=200/rho=%v", rho)
			if scv > 0 {
				name += fmt.Sprintf("/scv=%v", scv) // negative binomial arrivals: no convolution
			}
			b.Run(name, func(b *testing.B) {
				m := modelFor(p, rho)
				m.ServiceSCV = scv
				o := options(b, m, 1, 1, 200, DefaultEpsilon)
				var sol Solution
				for b.Loop() {
					var err error
					if sol, err = Solve(context.Background(), m, o); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(sol.Iterations), "sweeps")
			})
		}
	}
}

func BenchmarkEvaluate(b *testing.B) {
	m := modelFor(lookupPreset(b, "googlenet-p4"), 0.5)
	o := options(b, m, 1, 1, 200, DefaultEpsilon)
	pol := BatchMonitor(m, o.SMax)
	for b.Loop() {
		if _, err := Evaluate(m, o, pol); err != nil {
			b.Fatal(err)
		}
	}
}

// modelFor is ModelFor from a published profile.
func modelFor(p preset.Profile, rho float64) Model {
	return ModelFor(p.Latency, p.KnownEnergy(), p.MaxBatch, rho)
}
