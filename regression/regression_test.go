package regression

import (
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

func near(a, b, tol float64) bool { return math.Abs(a-b) <= tol }

func lineSamples(alpha, tau0 float64, sizes []int, reps int, noise float64, rng *rand.Rand) []Sample {
	var out []Sample
	for r := 0; r < reps; r++ {
		for _, b := range sizes {
			y := alpha*float64(b) + tau0
			if noise > 0 {
				y += noise * rng.NormFloat64()
			}
			out = append(out, Sample{Batch: b, LatencyMs: math.Max(y, 0)})
		}
	}
	return out
}

func TestFitSamples(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	withOutliers := lineSamples(0.3, 1.0, []int{1, 2, 4, 8, 16, 32}, 10, 0.02, rng)
	for i := 0; i < len(withOutliers); i += 7 { // ~14% stragglers, 5-20x slower
		withOutliers[i].LatencyMs *= 5 + 15*rng.Float64()
	}
	tests := []struct {
		name        string
		samples     []Sample
		opts        Options
		alpha, tau0 float64
		tol         float64
		minR2       float64
		outliers    bool
	}{
		{"exact line", lineSamples(0.3051, 1.052, []int{1, 2, 4, 8}, 1, 0, nil), Options{}, 0.3051, 1.052, 1e-9, 0.999999, false},
		{"noisy line", lineSamples(0.5, 2, []int{1, 4, 16, 64}, 50, 0.1, rng), Options{}, 0.5, 2, 0.02, 0.99, false},
		{"two sizes only", lineSamples(1.2, 2.4, []int{8, 16}, 20, 0.05, rng), Options{}, 1.2, 2.4, 0.05, 0.99, false},
		{"stragglers rejected", withOutliers, Options{}, 0.3, 1.0, 0.02, 0.99, true},
		{"negative intercept clamps to the origin", []Sample{{Batch: 1, LatencyMs: 0.5}, {Batch: 2, LatencyMs: 2.5}, {Batch: 3, LatencyMs: 4.5}, {Batch: 4, LatencyMs: 6.5}}, Options{}, 1.5, 0, 1e-9, 0.9, false},
		{"falling latency gives the minimum slope", []Sample{{Batch: 1, LatencyMs: 5}, {Batch: 2, LatencyMs: 4}, {Batch: 3, LatencyMs: 3}, {Batch: 4, LatencyMs: 2}}, Options{}, DefaultMinAlphaMs, 3.5 - 2.5*DefaultMinAlphaMs, 1e-9, -10, false},
		{"one size with a prior keeps the prior slope", lineSamples(1, 10, []int{8}, 5, 0, nil), Options{Prior: &Line{AlphaMs: 0.5, Tau0Ms: 1}}, 0.5, 14, 1e-9, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := FitSamples(tt.samples, tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			if !near(f.AlphaMs, tt.alpha, tt.tol) || !near(f.Tau0Ms, tt.tau0, tt.tol*math.Max(1, tt.tau0)) {
				t.Fatalf("fit alpha %v tau0 %v, want %v %v (±%v)", f.AlphaMs, f.Tau0Ms, tt.alpha, tt.tau0, tt.tol)
			}
			if f.AlphaMs <= 0 || f.Tau0Ms < 0 {
				t.Fatalf("fit violates alpha > 0, tau0 >= 0: %+v", f)
			}
			if f.R2 < tt.minR2 {
				t.Fatalf("R2 = %v, want >= %v", f.R2, tt.minR2)
			}
			if (f.Outliers > 0) != tt.outliers {
				t.Fatalf("outliers = %d, want some: %v", f.Outliers, tt.outliers)
			}
			if f.N != len(tt.samples) {
				t.Fatalf("N = %d, want %d", f.N, len(tt.samples))
			}
		})
	}
}

func TestFitSamplesOutliersWouldMislead(t *testing.T) {
	// The robust fit must differ from plain least squares on the same
	// stragglers, or the outlier test above proves nothing.
	rng := rand.New(rand.NewPCG(3, 4))
	s := lineSamples(0.3, 1.0, []int{1, 2, 4, 8, 16, 32}, 10, 0.02, rng)
	s[len(s)-1].LatencyMs *= 20 // a straggler at the largest batch
	plain, err := FitSamples(s, Options{OutlierCut: -1})
	if err != nil {
		t.Fatal(err)
	}
	robust, err := FitSamples(s, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if near(plain.AlphaMs, 0.3, 0.02) {
		t.Fatalf("plain least squares alpha %v is not misled; the case is too weak", plain.AlphaMs)
	}
	if !near(robust.AlphaMs, 0.3, 0.01) || robust.Outliers != 1 {
		t.Fatalf("robust alpha %v outliers %d, want 0.3 and 1", robust.AlphaMs, robust.Outliers)
	}
}

func TestFitSamplesErrors(t *testing.T) {
	tests := []struct {
		name    string
		samples []Sample
		opts    Options
		want    error
		text    string
	}{
		{"none", nil, Options{}, ErrNoSamples, "no samples"},
		{"one size without prior", []Sample{{Batch: 4, LatencyMs: 2}, {Batch: 4, LatencyMs: 3}}, Options{}, ErrOneSize, "same batch size"},
		{"bad batch", []Sample{{Batch: 0, LatencyMs: 2}, {Batch: 4, LatencyMs: 3}}, Options{}, nil, "sample 1: batch size"},
		{"NaN latency", []Sample{{Batch: 1, LatencyMs: 2}, {Batch: 4, LatencyMs: math.NaN()}}, Options{}, nil, "sample 2: latency"},
		{"negative latency", []Sample{{Batch: 1, LatencyMs: -2}, {Batch: 4, LatencyMs: 3}}, Options{}, nil, "latency"},
		{"bad forget", []Sample{{Batch: 1, LatencyMs: 2}, {Batch: 4, LatencyMs: 3}}, Options{Forget: 1.5}, nil, "forget"},
		{"bad prior", []Sample{{Batch: 1, LatencyMs: 2}, {Batch: 4, LatencyMs: 3}}, Options{Prior: &Line{AlphaMs: 0}}, nil, "prior line: alpha"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := FitSamples(tt.samples, tt.opts)
			if err == nil || !strings.Contains(err.Error(), tt.text) {
				t.Fatalf("error %v, want it to mention %q", err, tt.text)
			}
			if tt.want != nil && !errors.Is(err, tt.want) {
				t.Fatalf("error %v does not wrap %v", err, tt.want)
			}
		})
	}
}

func TestEstimatorForgets(t *testing.T) {
	e, err := NewEstimator(Options{Window: 200, Forget: 0.95})
	if err != nil {
		t.Fatal(err)
	}
	// The model slows down: old behaviour 0.3b+1, new 0.6b+2.
	for i := 0; i < 150; i++ {
		b := 1 + i%16
		if err := e.Observe(b, 0.3*float64(b)+1); err != nil {
			t.Fatal(err)
		}
	}
	before, err := e.Fit()
	if err != nil {
		t.Fatal(err)
	}
	if !near(before.AlphaMs, 0.3, 1e-6) || !near(before.Tau0Ms, 1, 1e-6) {
		t.Fatalf("fit before the change %+v", before.Line)
	}
	for i := 0; i < 50; i++ {
		b := 1 + i%16
		_ = e.Observe(b, 0.6*float64(b)+2)
	}
	after, err := e.Fit()
	if err != nil {
		t.Fatal(err)
	}
	// 50 new samples at forget 0.95 carry 1-0.95^50 = 92% of the weight, and
	// the robust fit rejects the old regime as outliers of the new one.
	if !near(after.AlphaMs, 0.6, 0.01) || !near(after.Tau0Ms, 2, 0.05) {
		t.Fatalf("fit after the change %+v, want near 0.6b+2", after.Line)
	}
	// Without forgetting the same window mixes both regimes.
	flat, _ := NewEstimator(Options{Window: 200, Forget: 1, OutlierCut: -1})
	for i := 0; i < 150; i++ {
		b := 1 + i%16
		_ = flat.Observe(b, 0.3*float64(b)+1)
	}
	for i := 0; i < 50; i++ {
		b := 1 + i%16
		_ = flat.Observe(b, 0.6*float64(b)+2)
	}
	mixed, _ := flat.Fit()
	if near(mixed.AlphaMs, 0.6, 0.05) {
		t.Fatalf("unweighted window fit %v already follows the change; the test is too weak", mixed.AlphaMs)
	}
	if e.Observed() != 200 {
		t.Fatalf("Observed = %d, want 200", e.Observed())
	}
}

func TestEstimatorWindowSlides(t *testing.T) {
	e, _ := NewEstimator(Options{Window: 8, Forget: 1})
	for i := 0; i < 100; i++ {
		_ = e.Observe(1+i%4, 100) // old regime, flat
	}
	for i := 0; i < 8; i++ {
		_ = e.Observe(1+i%4, 2*float64(1+i%4)+1)
	}
	f, err := e.Fit()
	if err != nil {
		t.Fatal(err)
	}
	if f.N != 8 || !near(f.AlphaMs, 2, 1e-9) || !near(f.Tau0Ms, 1, 1e-9) {
		t.Fatalf("window fit %+v, want exactly the last 8 samples' line 2b+1", f)
	}
}

func TestEstimatorSeed(t *testing.T) {
	e, _ := NewEstimator(Options{})
	if _, err := e.Fit(); !errors.Is(err, ErrNoSamples) {
		t.Fatalf("empty estimator error %v", err)
	}
	if err := e.Seed(Line{AlphaMs: 0.5, Tau0Ms: 1}); err != nil {
		t.Fatal(err)
	}
	f, err := e.Fit()
	if err != nil || f.Line != (Line{AlphaMs: 0.5, Tau0Ms: 1}) || !f.Seeded {
		t.Fatalf("seeded empty fit %+v, %v", f, err)
	}
	// Few batches all of one size: the slope stays the prior's, the
	// intercept moves to the data.
	for i := 0; i < 10; i++ {
		_ = e.Observe(4, 5)
	}
	f, _ = e.Fit()
	if !near(f.AlphaMs, 0.5, 1e-9) || !near(f.Tau0Ms, 3, 1e-9) {
		t.Fatalf("one-size fit %+v, want slope 0.5 through (4, 5)", f.Line)
	}
	// With two sizes the data dominate a prior of weight 4.
	for i := 0; i < 100; i++ {
		b := []int{1, 32}[i%2]
		_ = e.Observe(b, float64(b)+1)
	}
	f, _ = e.Fit()
	if !near(f.AlphaMs, 1, 0.05) {
		t.Fatalf("two-size fit alpha %v, want the data's 1", f.AlphaMs)
	}
	if err := e.Seed(Line{AlphaMs: -1}); err == nil {
		t.Fatal("seeding a negative slope must fail")
	}
	if err := e.Observe(0, 1); err == nil {
		t.Fatal("observing batch 0 must fail")
	}
}

func TestEstimatorConcurrent(t *testing.T) {
	e, _ := NewEstimator(Options{Prior: &Line{AlphaMs: 1, Tau0Ms: 1}})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < 2000; i++ {
			_ = e.Observe(1+i%8, float64(1+i%8)+1)
		}
	}()
	for i := 0; i < 50; i++ {
		if f, err := e.Fit(); err != nil || f.AlphaMs <= 0 || f.Tau0Ms < 0 {
			t.Fatalf("concurrent fit %+v, %v", f, err)
		}
	}
	<-done
}

// FuzzFitSamples: whatever the samples, a fit is either an error or a usable
// line (alpha > 0, tau0 >= 0, finite).
func FuzzFitSamples(f *testing.F) {
	f.Add(1, 1.0, 2, 2.0, 3, 2.5, 1.0)
	f.Add(4, 0.0, 4, 10.0, 8, 1e9, 0.9)
	f.Fuzz(func(t *testing.T, b1 int, y1 float64, b2 int, y2 float64, b3 int, y3 float64, forget float64) {
		s := []Sample{{Batch: b1, LatencyMs: y1}, {Batch: b2, LatencyMs: y2}, {Batch: b3, LatencyMs: y3}, {Batch: b1, LatencyMs: y2}, {Batch: b2, LatencyMs: y3}, {Batch: b3, LatencyMs: y1}}
		fit, err := FitSamples(s, Options{Forget: forget})
		if err != nil {
			return
		}
		if !(fit.AlphaMs > 0) || !(fit.Tau0Ms >= 0) || math.IsInf(fit.AlphaMs, 0) || math.IsInf(fit.Tau0Ms, 0) || math.IsNaN(fit.R2) {
			t.Fatalf("unusable fit %+v from %v", fit, s)
		}
	})
}

func TestFitRejectingNothingIsLeastSquares(t *testing.T) {
	// Per-size latencies shaped like the published ResNet-50 V100 figures
	// (a few percent off the line, unevenly): no sample is an outlier, so
	// the robust fit must be the least-squares line exactly. Bisquare
	// weights below 1 used to tilt it (alpha 0.14400 for 0.14382).
	var s []Sample
	dev := []float64{0.03, -0.05, 0.02, 0.06, -0.04, 0.09, -0.12, 0.1}
	for i, b := range []int{1, 2, 4, 8, 16, 32, 64, 128} {
		s = append(s, Sample{Batch: b, LatencyMs: 0.1438*float64(b) + 1.8874 + dev[i]})
	}
	plain, err := FitSamples(s, Options{OutlierCut: -1})
	if err != nil {
		t.Fatal(err)
	}
	robust, err := FitSamples(s, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if robust.Outliers != 0 || len(robust.Rejected) != 0 {
		t.Fatalf("rejected %v from a clean profile", robust.Rejected)
	}
	if !near(robust.AlphaMs, plain.AlphaMs, 1e-12) || !near(robust.Tau0Ms, plain.Tau0Ms, 1e-12) || !near(robust.R2, plain.R2, 1e-12) {
		t.Fatalf("robust fit %+v differs from least squares %+v though it rejected nothing", robust.Line, plain.Line)
	}

	// With a straggler, the answer is least squares over the rest, and the
	// fit names the straggler.
	s = append(s, Sample{Batch: 8, LatencyMs: 30})
	robust, err = FitSamples(s, Options{})
	if err != nil {
		t.Fatal(err)
	}
	rest, err := FitSamples(s[:len(s)-1], Options{OutlierCut: -1})
	if err != nil {
		t.Fatal(err)
	}
	if len(robust.Rejected) != 1 || robust.Rejected[0] != len(s)-1 || robust.Outliers != 1 {
		t.Fatalf("rejected %v, want [%d]", robust.Rejected, len(s)-1)
	}
	if !near(robust.AlphaMs, rest.AlphaMs, 1e-12) || !near(robust.Tau0Ms, rest.Tau0Ms, 1e-12) {
		t.Fatalf("fit %+v, want least squares without the straggler %+v", robust.Line, rest.Line)
	}
}

func TestPriorNeverOutweighsSamples(t *testing.T) {
	// Traffic that only forms batches of 2 and 3, on a line of slope 0.5,
	// against a heavy prior of slope 0.1: the samples decide.
	rng := rand.New(rand.NewPCG(5, 6))
	s := lineSamples(0.5, 4, []int{2, 3}, 40, 0.05, rng)
	f, err := FitSamples(s, Options{Prior: &Line{AlphaMs: 0.1, Tau0Ms: 1}, PriorWeight: 100, MaxBatch: 32})
	if err != nil {
		t.Fatal(err)
	}
	// At most a tenth of the way to the prior, plus noise.
	if bound := 0.1*(0.5-0.1) + 3*f.SEAlphaMs; math.Abs(f.AlphaMs-0.5) > bound {
		t.Fatalf("alpha %v, want 0.5 within %v: the prior outweighed the samples", f.AlphaMs, bound)
	}
	// With one size the prior still gives the slope.
	one := lineSamples(0.5, 4, []int{3}, 10, 0, nil)
	f, err = FitSamples(one, Options{Prior: &Line{AlphaMs: 0.1, Tau0Ms: 1}})
	if err != nil || f.AlphaMs != 0.1 {
		t.Fatalf("one size: alpha %v (err %v), want the prior's 0.1", f.AlphaMs, err)
	}
}

func TestFitStandardErrors(t *testing.T) {
	exact, err := FitSamples(lineSamples(0.3, 1, []int{1, 2, 4, 8}, 2, 0, nil), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if exact.SEAlphaMs > 1e-9 || exact.SETau0Ms > 1e-9 || exact.RelErr() > 1e-9 {
		t.Fatalf("exact line: errors %v %v, want 0", exact.SEAlphaMs, exact.SETau0Ms)
	}
	tiny, _ := FitSamples([]Sample{{Batch: 1, LatencyMs: 1}, {Batch: 2, LatencyMs: 2}}, Options{})
	if !math.IsInf(tiny.SEAlphaMs, 1) || !math.IsInf(tiny.RelErr(), 1) {
		t.Fatalf("two samples: error %v, want +Inf (nothing to judge the line by)", tiny.SEAlphaMs)
	}
	// Coverage: over many noisy fits the true slope lies within two
	// standard errors about 95% of the time (sigma 0.2 ms, 24 samples).
	rng := rand.New(rand.NewPCG(7, 8))
	covered := 0
	const runs = 400
	for range runs {
		f, err := FitSamples(lineSamples(0.3, 1, []int{1, 2, 4, 8}, 6, 0.2, rng), Options{OutlierCut: -1})
		if err != nil {
			t.Fatal(err)
		}
		if math.Abs(f.AlphaMs-0.3) <= 2*f.SEAlphaMs {
			covered++
		}
	}
	if covered < runs*88/100 || covered > runs*99/100 {
		t.Fatalf("true slope within 2 SE in %d of %d fits, want about 95%%", covered, runs)
	}
}

func TestCountWeighsLikeCopies(t *testing.T) {
	var copies, means []Sample
	for _, b := range []int{1, 4, 8} {
		for i := range 5 {
			copies = append(copies, Sample{Batch: b, LatencyMs: 0.5*float64(b) + 2 + 0.01*float64(i*b%3)})
		}
		var sum float64
		for _, c := range copies[len(copies)-5:] {
			sum += c.LatencyMs
		}
		means = append(means, Sample{Batch: b, LatencyMs: sum / 5, Weight: 5})
	}
	means = append(means, Sample{Batch: 2, LatencyMs: 3, Weight: 1})
	copies = append(copies, Sample{Batch: 2, LatencyMs: 3})
	a, err := FitSamples(copies, Options{OutlierCut: -1})
	if err != nil {
		t.Fatal(err)
	}
	b, err := FitSamples(means, Options{OutlierCut: -1})
	if err != nil {
		t.Fatal(err)
	}
	if !near(a.AlphaMs, b.AlphaMs, 1e-12) || !near(a.Tau0Ms, b.Tau0Ms, 1e-12) {
		t.Fatalf("means with counts fit %+v, copies %+v", b.Line, a.Line)
	}
	if _, err := FitSamples([]Sample{{Batch: 1, LatencyMs: 1, Weight: -1}}, Options{}); err == nil || !strings.Contains(err.Error(), "weight") {
		t.Fatalf("negative count: error %v", err)
	}
}

func TestEstimatorSamplesOldestFirst(t *testing.T) {
	e, err := NewEstimator(Options{Window: 3})
	if err != nil {
		t.Fatal(err)
	}
	if got := e.Samples(); len(got) != 0 {
		t.Fatalf("empty estimator has samples %v", got)
	}
	for b := 1; b <= 5; b++ {
		e.Observe(b, float64(b))
	}
	got := e.Samples()
	if len(got) != 3 || got[0].Batch != 3 || got[1].Batch != 4 || got[2].Batch != 5 {
		t.Fatalf("Samples() = %v, want batches 3, 4, 5 (the window, oldest first)", got)
	}
}
