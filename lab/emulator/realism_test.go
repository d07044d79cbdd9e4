package emulator

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratebatch/ratebatch/lab/preset"
)

func TestRealismPresets(t *testing.T) {
	for _, name := range RealismNames() {
		r, err := LookupRealism(name)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.validate(); err != nil {
			t.Errorf("preset %s: %v", name, err)
		}
		if (name == "exact") != r.Exact() {
			t.Errorf("preset %s: Exact() = %v", name, r.Exact())
		}
	}
	if _, err := LookupRealism("silky"); err == nil || !strings.Contains(err.Error(), "rough") {
		t.Fatalf("unknown preset: error %v should list the known ones", err)
	}
	bad := []Realism{
		{Sigma: 1},
		{TailShare: 0.1, TailMin: 0.5, TailMax: 2},
		{TailShare: 0.1, TailMin: 3, TailMax: 2},
		{StallShare: 2},
		{Overhead: -1},
	}
	for _, r := range bad {
		if _, err := New(Options{Realism: r}); err == nil || !strings.Contains(err.Error(), "realism") {
			t.Errorf("New accepted %+v (err %v)", r, err)
		}
	}
}

// TestRealismBatchTimes checks the drawn batch times: median on the line,
// a tail of the configured share, stalls, and the same draws for a seed.
func TestRealismBatchTimes(t *testing.T) {
	p, _ := preset.Lookup(preset.DefaultPreset)
	r := Realism{Sigma: 0.05, TailShare: 0.02, TailMin: 3, TailMax: 10, StallShare: 0.01, Stall: 50 * time.Millisecond}
	draw := func(seed uint64) []time.Duration {
		s, err := New(Options{Profile: p, TimeScale: 1, Realism: r, Seed: seed})
		if err != nil {
			t.Fatal(err)
		}
		m := s.byName[ImageModel]
		var ds []time.Duration
		for range 5000 {
			ds = append(ds, s.execTime(m, 4))
		}
		return ds
	}
	a := draw(7)
	if !slices.Equal(a, draw(7)) {
		t.Fatal("the same seed drew different batch times")
	}
	tau := wantExec(p, 4, 1)
	var slow, stalled int
	for _, d := range a {
		switch {
		case d >= r.Stall:
			stalled++
		case d > 2*tau:
			slow++
		}
	}
	// The mean of the draws is the true mean line's tau(4).
	s, _ := New(Options{Profile: p, TimeScale: 1, Realism: r})
	truth, _ := s.Truth(ImageModel)
	var sum time.Duration
	for _, d := range a {
		sum += d
	}
	mean := float64(sum) / float64(len(a)) / float64(time.Millisecond)
	if want := 4*truth.AlphaMs + truth.Tau0Ms; mean < 0.95*want || mean > 1.05*want {
		t.Errorf("mean batch time %.4g ms, want the true mean line's %.4g ms within 5%%", mean, want)
	}
	sorted := slices.Clone(a)
	slices.Sort(sorted)
	if med := sorted[len(sorted)/2]; med < time.Duration(0.98*float64(tau)) || med > time.Duration(1.02*float64(tau)) {
		t.Errorf("median batch time %v, want tau(4) = %v within 2%%", med, tau)
	}
	// 5000 draws: 100 expected in the tail, 50 stalls; 4 sigma bounds.
	if slow < 60 || slow > 140 {
		t.Errorf("%d of 5000 batches in the heavy tail, want about 100", slow)
	}
	if stalled < 22 || stalled > 78 {
		t.Errorf("%d of 5000 batches stalled, want about 50", stalled)
	}
}

// TestRealismOutsideTheBatch checks that the per-request overhead and the
// transfer cost lengthen the round trip but stay out of the statistics,
// and that the true line is served.
func TestRealismOutsideTheBatch(t *testing.T) {
	p, _ := preset.Lookup("resnet50-p4")
	r := Realism{Overhead: 2 * time.Millisecond, PerMiB: 10 * time.Millisecond}
	clock := newFakeClock()
	s, ts := newTestServer(t, Options{Profile: p, TimeScale: 1, Realism: r, Clock: clock})
	var compute time.Duration
	for i, rows := range []int{1, 2, 4} {
		body := requestFor(t, ImageModel, rows, i)
		before := clock.Now()
		if res := post(t, ts.URL+"/v2/models/"+ImageModel+"/infer", body, -1); res.status != 200 {
			t.Fatalf("%d %s", res.status, res.errMsg)
		}
		out := rows * imageClasses * 4
		want := wantExec(p, rows, 1) + r.transfer(len(body)) + r.transfer(out)
		if got := clock.Now().Sub(before); got != want {
			t.Errorf("batch of %d: round trip %v, want tau + overhead + transfer = %v", rows, got, want)
		}
		compute += wantExec(p, rows, 1)
	}
	// The statistics are recorded once the answer is written.
	waitFor(t, func() bool { st, _ := s.Stats(ImageModel); return st.ExecutionCount == 3 }, "3 executions in the statistics")
	st, _ := s.Stats(ImageModel)
	var infer uint64
	for _, b := range st.BatchStats {
		infer += b.ComputeInfer.NS + b.ComputeInput.NS + b.ComputeOutput.NS
	}
	if infer != uint64(compute) {
		t.Errorf("batch_stats add up to %v, want the batches' own %v (no overhead, no transfer)", time.Duration(infer), compute)
	}
	var truth TrueLine
	getJSON(t, ts.URL+"/emulator/models/"+ImageModel, &truth)
	if truth.AlphaMs != p.AlphaMs || truth.Tau0Ms != p.Tau0Ms || truth.MedianAlphaMs != p.AlphaMs || truth.Realism != r {
		t.Errorf("truth %+v, want the profile's line and the realism", truth)
	}
}

// TestRealismBatchMsKeepsTheMean checks the draws a simulation takes from
// a realism: their mean is the mean time asked for (a fit's line), their
// spread the preset's, and the exact preset adds nothing.
func TestRealismBatchMsKeepsTheMean(t *testing.T) {
	for _, name := range RealismNames() {
		t.Run(name, func(t *testing.T) {
			r, _ := LookupRealism(name)
			rng := rand.New(rand.NewPCG(1, 2))
			const meanMs, n = 5.0, 200_000
			var sum, sq float64
			for range n {
				d := r.BatchMs(rng, meanMs)
				sum += d
				sq += d * d
			}
			mean := sum / n
			cv2 := sq/n/(mean*mean) - 1 // squared coefficient of variation
			if mean < 0.99*meanMs || mean > 1.01*meanMs {
				t.Errorf("mean of the draws %.4g ms, want %.4g within 1%%", mean, meanMs)
			}
			switch {
			case r.Exact() && cv2 > 1e-12:
				t.Errorf("exact realism spread its batches: squared cv %.3g", cv2)
			case !r.Exact() && cv2 < 0.1:
				// The heavy tail alone gives 1% x (E[U^2] ~ 46) / 1.06^2.
				t.Errorf("%s realism's squared cv %.3g, want the heavy tail's (> 0.1)", name, cv2)
			}
		})
	}
}
