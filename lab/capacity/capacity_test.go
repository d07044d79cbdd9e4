package capacity

import (
	"math"
	"strings"
	"testing"

	"github.com/ratebatch/ratebatch/lab/preset"
	"github.com/ratebatch/ratebatch/policy/batchcost"
	"github.com/ratebatch/ratebatch/policy/smdp"
)

var (
	alphas = []float64{0.05, 0.1438, 0.3051, 0.5833, 1.182, 2.712, 5}
	tau0s  = []float64{0.01, 0.5, 1.052, 1.8874, 6.739, 20}
)

// Section 4: phi0 <= phi1 exactly when lambda <= 1/(alpha+tau0) (for
// tau0 > 0; at tau0 = 0 the two coincide).
func TestPhiCrossover(t *testing.T) {
	for _, a := range alphas {
		for _, t0 := range tau0s {
			m := Model{AlphaMs: a, Tau0Ms: t0}
			cross := 1 / (a + t0)
			for i := 1; i < 400; i++ {
				l := float64(i) / 400 / a
				if math.Abs(l-cross) < 1e-9*cross {
					continue
				}
				b, err := m.Latency(l)
				if err != nil {
					t.Fatal(err)
				}
				if got, want := b.Phi0Ms <= b.Phi1Ms, l <= cross; got != want {
					t.Fatalf("alpha %v tau0 %v lambda %v: phi0 %v phi1 %v, crossover at %v", a, t0, l, b.Phi0Ms, b.Phi1Ms, cross)
				}
				if b.PhiMs != math.Min(b.Phi0Ms, b.Phi1Ms) {
					t.Fatalf("phi %v is not min(%v, %v)", b.PhiMs, b.Phi0Ms, b.Phi1Ms)
				}
			}
		}
	}
	b, _ := Model{AlphaMs: 0.3, Tau0Ms: 0}.Latency(2)
	if math.Abs(b.Phi0Ms-b.Phi1Ms) > 1e-12*b.PhiMs {
		t.Errorf("tau0 = 0: phi0 %v != phi1 %v", b.Phi0Ms, b.Phi1Ms)
	}
}

// phi starts at the latency of a lone request and grows strictly with the
// rate: the property MaxRate's bisection relies on.
func TestPhiStartsAtTau1AndIncreases(t *testing.T) {
	for _, a := range alphas {
		for _, t0 := range tau0s {
			m := Model{AlphaMs: a, Tau0Ms: t0}
			b, err := m.Latency(0)
			if err != nil {
				t.Fatal(err)
			}
			if math.Abs(b.PhiMs-(a+t0)) > 1e-12*(a+t0) {
				t.Errorf("alpha %v tau0 %v: phi(0) = %v, want tau(1) = %v", a, t0, b.PhiMs, a+t0)
			}
			prev := b.PhiMs
			for i := 1; i < 1000; i++ {
				b, err := m.Latency(float64(i) / 1000 / a)
				if err != nil {
					t.Fatal(err)
				}
				if !(b.PhiMs > prev) {
					t.Fatalf("alpha %v tau0 %v: phi not increasing at rho %v (%v after %v)", a, t0, b.Rho, b.PhiMs, prev)
				}
				prev = b.PhiMs
			}
		}
	}
}

func TestMaxRateMeetsTarget(t *testing.T) {
	for _, p := range preset.All() {
		m := Model{AlphaMs: p.AlphaMs, Tau0Ms: p.Tau0Ms}
		for _, factor := range []float64{1.01, 1.5, 3, 10, 100} {
			target := factor * (p.AlphaMs + p.Tau0Ms)
			l, err := m.MaxRate(target)
			if err != nil {
				t.Fatalf("%s target %v: %v", p.Name, target, err)
			}
			at, err := m.Latency(l)
			if err != nil {
				t.Fatal(err)
			}
			if at.PhiMs > target || at.PhiMs < target*(1-1e-9) {
				t.Errorf("%s target %v ms: phi at max rate %v is %v", p.Name, target, l, at.PhiMs)
			}
			if above, err := m.Latency(l * (1 + 1e-6)); err == nil && !(above.PhiMs > target) {
				t.Errorf("%s target %v ms: a higher rate %v still meets it", p.Name, target, l*(1+1e-6))
			}
		}
	}
}

// The bound holds against the exact mean latency of ad-hoc batching
// computed by the SMDP package on the same queue (B_max large enough to be
// unbounded in effect), it is tight at high load, and so is the mean batch
// bound.
func TestPhiBoundsExactAdHocLatency(t *testing.T) {
	const bmax = 300
	for _, m := range []Model{{0.3051, 1.052}, {1.182, 2.396}} {
		for _, rho := range []float64{0.05, 0.3, 0.6, 0.9} {
			l := rho / m.AlphaMs
			b, err := m.Latency(l)
			if err != nil {
				t.Fatal(err)
			}
			sm := smdp.Model{Latency: batchcost.Latency(m), MaxBatch: bmax, LambdaPerMs: l}
			ev, err := smdp.Evaluate(sm, smdp.Options{W1: 1, Epsilon: 1, SMax: bmax, IterMax: 1}, smdp.AdHoc(sm, bmax))
			if err != nil {
				t.Fatal(err)
			}
			if !(ev.Delta < smdp.DeltaAccept) {
				t.Fatalf("state bound too small: delta %v", ev.Delta)
			}
			if ev.LatencyMs > b.PhiMs*(1+1e-9) {
				t.Errorf("alpha %v tau0 %v rho %v: exact latency %v above the bound %v", m.AlphaMs, m.Tau0Ms, rho, ev.LatencyMs, b.PhiMs)
			}
			if rho >= 0.9 && b.PhiMs > ev.LatencyMs*1.01 {
				t.Errorf("alpha %v tau0 %v rho %v: bound %v not within 1%% of exact %v at high load", m.AlphaMs, m.Tau0Ms, rho, b.PhiMs, ev.LatencyMs)
			}
			minB, err := m.MinMeanBatch(l)
			if err != nil {
				t.Fatal(err)
			}
			if ev.MeanBatch < minB*(1-1e-9) {
				t.Errorf("alpha %v tau0 %v rho %v: exact mean batch %v below the bound %v", m.AlphaMs, m.Tau0Ms, rho, ev.MeanBatch, minB)
			}
		}
	}
}

func TestMinRequestsPerJoule(t *testing.T) {
	m := Model{AlphaMs: 0.3051, Tau0Ms: 1.052}
	e := batchcost.Energy{BetaMJ: 19.90, Zeta0MJ: 19.60}
	low, err := m.MinRequestsPerJoule(0, e)
	if err != nil {
		t.Fatal(err)
	}
	if want := 1000 / (19.90 + 19.60); math.Abs(low-want) > 1e-12*want { // batches of one
		t.Errorf("at rate 0: %v requests/J, want %v", low, want)
	}
	l := 2.0 // E[B] >= 2*1.052/(1-0.6102) = 5.3976
	got, err := m.MinRequestsPerJoule(l, e)
	if err != nil {
		t.Fatal(err)
	}
	if want := 1000 / (19.90 + 19.60/(l*1.052/(1-l*0.3051))); math.Abs(got-want) > 1e-12*want {
		t.Errorf("at rate %v: %v requests/J, want %v", l, got, want)
	}
	if !(got > low) || !(got < 1000/19.90) {
		t.Errorf("efficiency %v must grow with batching and stay below 1/beta", got)
	}
}

func TestInvalidInput(t *testing.T) {
	good := Model{AlphaMs: 0.5, Tau0Ms: 1}
	tests := []struct {
		name string
		call func() error
		want string
	}{
		{"alpha zero", func() error { _, err := Model{0, 1}.Latency(0.1); return err }, "alpha"},
		{"alpha NaN", func() error { _, err := Model{math.NaN(), 1}.MaxRate(10); return err }, "alpha"},
		{"tau0 negative", func() error { _, err := Model{0.5, -1}.Latency(0.1); return err }, "tau0"},
		{"rate negative", func() error { _, err := good.Latency(-1); return err }, "arrival rate"},
		{"rate infinite", func() error { _, err := good.Latency(math.Inf(1)); return err }, "arrival rate"},
		{"unstable", func() error { _, err := good.Latency(2); return err }, "unstable"},
		{"target below tau(1)", func() error { _, err := good.MaxRate(1.5); return err }, "lone request"},
		{"target NaN", func() error { _, err := good.MaxRate(math.NaN()); return err }, "target"},
		{"energy negative", func() error {
			_, err := good.MinRequestsPerJoule(0.1, batchcost.Energy{BetaMJ: -1, Zeta0MJ: 1})
			return err
		}, "beta"},
		{"energy zero", func() error { _, err := good.MinRequestsPerJoule(0.1, batchcost.Energy{}); return err }, "both 0"},
		{"efficiency unstable", func() error {
			_, err := good.MinRequestsPerJoule(3, batchcost.Energy{BetaMJ: 1, Zeta0MJ: 1})
			return err
		}, "unstable"},
	}
	for _, tt := range tests {
		if err := tt.call(); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: error %v, want mention of %q", tt.name, err, tt.want)
		}
	}
}
