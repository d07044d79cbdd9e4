// Package profiler measures a model's batch latency line tau(b) against a
// running server: it sends one request at a time of b rows, going round the
// sizes b = 1 up to the model's max_batch_size, times each round trip and
// fits the line, the
// tau(b) the proxy will see. Where the server keeps per-batch-size
// statistics (Triton does), it also fits the server's own compute line from
// their change over the run, without the network and HTTP the round trip
// carries.
//
// `ratebatch profile` is its command line; `serve` reads the samples it
// writes through models.<name>.profile_csv.
package profiler

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/ratebatch/ratebatch/internal/stats"
	"github.com/ratebatch/ratebatch/internal/triton"
	"github.com/ratebatch/ratebatch/lab/loadgen"
	"github.com/ratebatch/ratebatch/regression"
)

// Options say what to measure and how much.
type Options struct {
	Upstream string // the server's HTTP base URL (measure it directly, not the proxy)
	Model    string
	Samples  int  // timed requests per batch size, >= 1
	Warmup   int  // untimed requests per batch size before them, >= 0
	MaxBatch int  // largest batch size measured; 0: the model's max_batch_size
	Binary   bool // send tensors in Triton's binary form, as the proxy does
	Timeout  time.Duration
	// Progress, when set, is told each batch size's figures as soon as
	// they are measured (the command prints them).
	Progress func(Size)
}

// Size is what one batch size measured.
type Size struct {
	Batch    int     `json:"batch_size"`
	MedianMs float64 `json:"median_ms"` // NaN when every request failed
	OK       int     `json:"-"`
	Errors   int64   `json:"errors"`
}

// Result is a profile run.
type Result struct {
	Samples []regression.Sample // every timed round trip
	Sizes   []Size
	Fit     regression.Fit // the round-trip line
	// Server is the server's own compute line from its batch statistics;
	// nil when it keeps none.
	Server *regression.Fit
}

// Run measures o.Model on o.Upstream.
func Run(ctx context.Context, o Options) (Result, error) {
	switch {
	case o.Upstream == "" || o.Model == "":
		return Result{}, errors.New("profiler: an upstream and a model are required")
	case o.Samples < 1 || o.Warmup < 0:
		return Result{}, fmt.Errorf("profiler: samples must be >= 1 and warmup >= 0, got %d and %d", o.Samples, o.Warmup)
	}
	tc := triton.NewClient(o.Upstream, nil)
	cfg, err := tc.ModelConfig(ctx, o.Model)
	if err != nil {
		return Result{}, fmt.Errorf("reading %s's config: %w", o.Model, err)
	}
	top := cfg.MaxBatchSize
	if top < 1 {
		return Result{}, fmt.Errorf("model %s has max_batch_size %d: it takes no batches, there is nothing to profile", o.Model, top)
	}
	if o.MaxBatch > 0 {
		top = min(top, o.MaxBatch)
	}

	// Every size is warmed up first (a Python backend's first call takes
	// hundreds of ms), then the timed requests go round the sizes, one
	// request of each size per round, not all of one size and then the
	// next: a machine whose load drifts during the run (a shared host,
	// another job starting) then slows every size alike, where size
	// blocks turn the drift into a false slope. Measured on a shared
	// 2-core box against PyTriton before the change, blocks read the
	// server's line as 0.32*b + 10.4 ms for a model that sleeps at least
	// 0.5 ms per row (docs/LEARNING.md).
	for b := 1; b <= top && o.Warmup > 0; b++ {
		if _, _, err := timeBatch(ctx, o, b, o.Warmup); err != nil {
			return Result{}, fmt.Errorf("batch size %d: warm-up: %w", b, err)
		}
	}
	// The server's own per-size statistics around the timed requests, when
	// it keeps them: its compute time, without the network and HTTP the
	// round trip carries (the line the proxy's monitor learns from the
	// same figures). They are counted per size, so one read before and
	// one after cover every size.
	before, statsErr := tc.ModelStats(ctx, o.Model)
	lat := make([][]float64, top+1)
	errs := make([]int64, top+1)
	for range o.Samples {
		for b := 1; b <= top; b++ {
			l, e, err := timeBatch(ctx, o, b, 1)
			if err != nil {
				return Result{}, fmt.Errorf("batch size %d: %w", b, err)
			}
			lat[b] = append(lat[b], l...)
			errs[b] += e
		}
	}
	var serverSamples []regression.Sample
	statsOK := statsErr == nil
	if statsOK {
		if after, err := tc.ModelStats(ctx, o.Model); err == nil {
			serverSamples = statsDelta(before, after)
		} else {
			statsOK = false
		}
	}

	var res Result
	for b := 1; b <= top; b++ {
		if len(lat[b]) == 0 {
			return Result{}, fmt.Errorf("batch size %d: all %d requests failed", b, errs[b])
		}
		for _, l := range lat[b] {
			res.Samples = append(res.Samples, regression.Sample{Batch: b, LatencyMs: l})
		}
		sorted := slices.Sorted(slices.Values(lat[b]))
		s := Size{Batch: b, MedianMs: stats.Percentile(sorted, 50), OK: len(sorted), Errors: errs[b]}
		res.Sizes = append(res.Sizes, s)
		if o.Progress != nil {
			o.Progress(s)
		}
	}
	if res.Fit, err = regression.FitSamples(res.Samples, regression.Options{}); err != nil {
		return Result{}, fmt.Errorf("fitting the measurements: %w", err)
	}
	if statsOK {
		if f, err := regression.FitSamples(serverSamples, regression.Options{OutlierCut: -1}); err == nil {
			res.Server = &f
		}
	}
	return res, nil
}

// timeBatch sends n requests of b rows one at a time and returns the
// latencies in ms of the ok ones and how many failed. The error is for a
// run that could not be made at all.
func timeBatch(ctx context.Context, o Options, b, n int) ([]float64, int64, error) {
	// One request in flight and arrivals far faster than answers: a closed
	// loop, each request sent the moment the previous one is answered.
	res, err := loadgen.Run(ctx, loadgen.Config{
		Target: o.Upstream, Model: o.Model, Rows: b, Binary: o.Binary,
		Rate: loadgen.ConstantRate(1e6), Duration: time.Hour, Requests: n,
		MaxInFlight: 1, OnFull: loadgen.WaitWhenFull, Timeout: o.Timeout, Payloads: 1, Seed: uint64(b),
	})
	if err != nil {
		return nil, 0, err
	}
	if res.Summary.Sent == 0 {
		return nil, 0, errors.New("no request was sent")
	}
	var lat []float64
	var errs int64
	for _, r := range res.Records {
		if r.Err != loadgen.KindNone {
			errs++
			continue
		}
		lat = append(lat, float64(r.Latency)/float64(time.Millisecond))
	}
	return lat, errs, nil
}

// statsDelta is the mean compute time per batch size of the executions
// between two reads of a model's batch statistics, weighted by their count.
func statsDelta(before, after []triton.BatchStat) []regression.Sample {
	type tot struct{ n, ns int64 }
	sum := func(stats []triton.BatchStat) map[int]tot {
		m := map[int]tot{}
		for _, s := range stats {
			t := m[s.BatchSize]
			t.n += s.ComputeInfer.Count
			t.ns += s.ComputeNs()
			m[s.BatchSize] = t
		}
		return m
	}
	b, a := sum(before), sum(after)
	var out []regression.Sample
	for size, t := range a {
		d := tot{t.n - b[size].n, t.ns - b[size].ns}
		if size >= 1 && d.n > 0 && d.ns > 0 {
			out = append(out, regression.Sample{Batch: size, LatencyMs: float64(d.ns) / float64(d.n) / 1e6, Weight: float64(d.n)})
		}
	}
	slices.SortFunc(out, func(x, y regression.Sample) int { return x.Batch - y.Batch })
	return out
}
