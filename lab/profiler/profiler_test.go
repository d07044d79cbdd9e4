package profiler

import (
	"context"
	"math"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ratebatch/ratebatch/internal/triton"
	"github.com/ratebatch/ratebatch/lab/emulator"
)

// emulated serves the emulator's KServe API on loopback and returns its URL.
func emulated(t *testing.T) string {
	t.Helper()
	// googlenet-p4 ten times slower, tau(b) = 3.051*b + 10.52 ms: the
	// emulator's sleeps overshoot by a fraction of a millisecond on a
	// busy machine whatever their length, which at full speed (1-3 ms a
	// batch) moved the fitted slope by a third in CI, under -race beside
	// the other packages' tests.
	em, err := emulator.New(emulator.Options{TimeScale: 10})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(em.Handler())
	t.Cleanup(ts.Close)
	return ts.URL
}

func TestRunMeasuresTheServersLine(t *testing.T) {
	up := emulated(t)
	var progress []int
	res, err := Run(context.Background(), Options{
		Upstream: up, Model: "simple", Samples: 6, Warmup: 1, MaxBatch: 6,
		Binary: true, Timeout: 10 * time.Second,
		Progress: func(s Size) { progress = append(progress, s.Batch) },
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Sizes) != 6 || len(res.Samples) != 36 || len(progress) != 6 || progress[5] != 6 {
		t.Fatalf("%d sizes, %d samples, progress %v; want sizes 1..6 (MaxBatch, below the model's 8) of 6 timed requests each", len(res.Sizes), len(res.Samples), progress)
	}
	for _, s := range res.Sizes {
		if s.OK != 6 || s.Errors != 0 || !(s.MedianMs > 0) {
			t.Fatalf("size %+v: want 6 ok requests and a median", s)
		}
	}
	// The server's statistics give its own compute line (the emulator's
	// sleeps overshoot on a busy machine, mostly into tau0 but, with six
	// samples a size, into the slope too: 10% on alpha, 2 ms on tau0);
	// the round trip adds HTTP time on top of it, never less.
	if res.Server == nil || math.Abs(res.Server.AlphaMs-3.051) > 0.3 || res.Server.Tau0Ms < 10.0 || res.Server.Tau0Ms > 12.5 {
		t.Fatalf("server line %+v, want the emulator's 3.051*b + 10.52", res.Server)
	}
	if res.Fit.TauMs(1) < res.Server.TauMs(1) {
		t.Fatalf("round trip tau(1) %.3f ms below the server's compute %.3f ms", res.Fit.TauMs(1), res.Server.TauMs(1))
	}
}

func TestRunErrors(t *testing.T) {
	up := emulated(t)
	tests := []struct {
		name string
		o    Options
		want string
	}{
		{"no model", Options{Upstream: up, Samples: 1}, "model"},
		{"no samples", Options{Upstream: up, Model: "simple"}, "samples"},
		{"unknown model", Options{Upstream: up, Model: "nope", Samples: 1}, "nope"},
		{"no batching", Options{Upstream: up, Model: emulator.NoBatchModel, Samples: 1}, "max_batch_size 0"},
	}
	for _, tt := range tests {
		if _, err := Run(context.Background(), tt.o); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: error %v, want it to mention %q", tt.name, err, tt.want)
		}
	}
}

func TestStatsDeltaCountsOnlyTheRun(t *testing.T) {
	stat := func(b int, n, ns int64) triton.BatchStat {
		var s triton.BatchStat
		s.BatchSize, s.ComputeInfer.Count, s.ComputeInfer.Ns = b, n, ns
		return s
	}
	before := []triton.BatchStat{stat(1, 10, 10e6), stat(2, 5, 10e6)}
	after := []triton.BatchStat{stat(1, 14, 18e6), stat(2, 5, 10e6), stat(4, 2, 8e6)}
	got := statsDelta(before, after)
	// b=1: 4 runs, 8 ms in all; b=2 did not run; b=4 is new: 2 runs, 8 ms.
	if len(got) != 2 || got[0].Batch != 1 || got[0].LatencyMs != 2 || got[0].Weight != 4 || got[1].Batch != 4 || got[1].LatencyMs != 4 {
		t.Fatalf("statsDelta = %+v", got)
	}
}
