package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"time"

	"github.com/ratebatch/ratebatch/loadgen"
	"github.com/ratebatch/ratebatch/regression"
	"github.com/ratebatch/ratebatch/triton"
)

func init() {
	register("profile", "measure a model's batch latency tau(b) for b = 1..max_batch_size (CSV for fit and serve)", runProfile)
}

func runProfile(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("profile", stderr)
	upstream := fs.String("upstream", "", "Triton's HTTP URL, e.g. http://127.0.0.1:8000 (measure Triton directly, not the proxy)")
	model := fs.String("model", "", "model to profile")
	samples := fs.Int("samples", 20, "timed requests per batch size, after the warm-up")
	warmup := fs.Int("warmup", 3, "untimed requests per batch size")
	maxBatch := fs.Int("max-batch", 0, "largest batch size to measure (0: the model's max_batch_size)")
	binary := fs.Bool("binary", true, "send tensors in Triton's binary form (as the proxy does)")
	out := fs.String("out", "", "write the samples as CSV (batch_size,latency_ms) to this file")
	asJSON := fs.Bool("json", false, "print the fit and per-size medians as JSON")
	timeout := fs.Duration("timeout", 30*time.Second, "per-request timeout")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: ratebatch profile --upstream URL --model M [--out FILE] [--json]")
		fmt.Fprintln(fs.Output(), "\nSends one request at a time of b rows for b = 1..max_batch_size and records")
		fmt.Fprintln(fs.Output(), "each round trip: the tau(b) the proxy will see. `serve` reads the CSV through")
		fmt.Fprintln(fs.Output(), "models.<name>.profile_csv; `fit --csv` fits it.\n\nFlags:")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *upstream == "" || *model == "" {
		fmt.Fprintln(stderr, "ratebatch profile: --upstream and --model are required")
		return errUsage
	}
	if *samples < 1 || *warmup < 0 {
		fmt.Fprintln(stderr, "ratebatch profile: --samples must be >= 1 and --warmup >= 0")
		return errUsage
	}
	cfg, err := triton.NewClient(*upstream, nil).ModelConfig(ctx, *model)
	if err != nil {
		return fmt.Errorf("reading %s's config: %w", *model, err)
	}
	top := cfg.MaxBatchSize
	if top < 1 {
		return fmt.Errorf("model %s has max_batch_size %d: it takes no batches, there is nothing to profile", *model, top)
	}
	if *maxBatch > 0 {
		top = min(top, *maxBatch)
	}

	// The server's own per-size statistics around the run, when it keeps
	// them: its compute time, without the network and HTTP the round trip
	// carries (the line the proxy's monitor learns from the same figures).
	tc := triton.NewClient(*upstream, nil)
	statsBefore, statsErr := tc.ModelStats(ctx, *model)

	var all []regression.Sample
	type size struct {
		Batch    int     `json:"batch_size"`
		MedianMs float64 `json:"median_ms"`
		Errors   int64   `json:"errors"`
	}
	var sizes []size
	for b := 1; b <= top; b++ {
		lat, errs, err := timeBatch(ctx, *upstream, *model, b, *warmup, *samples, *binary, *timeout)
		if err != nil {
			return fmt.Errorf("batch size %d: %w", b, err)
		}
		for _, l := range lat {
			all = append(all, regression.Sample{Batch: b, LatencyMs: l})
		}
		slices.Sort(lat)
		med := math.NaN()
		if len(lat) > 0 {
			med = lat[len(lat)/2]
		}
		sizes = append(sizes, size{Batch: b, MedianMs: med, Errors: errs})
		if !*asJSON {
			fmt.Fprintf(stdout, "b=%-4d median %8.3f ms  (%d ok, %d errors)\n", b, med, len(lat), errs)
		}
	}
	if *out != "" {
		if err := writeSamples(*out, all); err != nil {
			return err
		}
	}
	fit, err := regression.FitSamples(all, regression.Options{})
	if err != nil {
		return fmt.Errorf("fitting the measurements: %w", err)
	}
	var server *regression.Fit
	if statsErr == nil {
		if after, err := tc.ModelStats(ctx, *model); err == nil {
			if f, err := regression.FitSamples(statsDelta(statsBefore, after), regression.Options{OutlierCut: -1}); err == nil {
				server = &f
			}
		}
	}
	if *asJSON {
		out := struct {
			Model   string  `json:"model"`
			AlphaMs float64 `json:"alpha_ms"`
			Tau0Ms  float64 `json:"tau0_ms"`
			R2      float64 `json:"r2"`
			N       int     `json:"n"`
			Sizes   []size  `json:"sizes"`
			// The server's own compute line from its batch statistics;
			// null when it keeps none.
			ServerAlphaMs *float64 `json:"server_alpha_ms"`
			ServerTau0Ms  *float64 `json:"server_tau0_ms"`
		}{Model: *model, AlphaMs: fit.AlphaMs, Tau0Ms: fit.Tau0Ms, R2: fit.R2, N: fit.N, Sizes: sizes}
		if server != nil {
			out.ServerAlphaMs, out.ServerTau0Ms = &server.AlphaMs, &server.Tau0Ms
		}
		return json.NewEncoder(stdout).Encode(out)
	}
	fmt.Fprintf(stdout, "tau(b) = %.4g*b + %.4g ms, R^2 %.4f over %d samples\n", fit.AlphaMs, fit.Tau0Ms, fit.R2, fit.N)
	if server != nil {
		fmt.Fprintf(stdout, "server's own compute (batch statistics): tau(b) = %.4g*b + %.4g ms; the round trip adds %.3g ms at b=1\n",
			server.AlphaMs, server.Tau0Ms, fit.TauMs(1)-server.TauMs(1))
	}
	if *out != "" {
		fmt.Fprintf(stdout, "samples written to %s\n", *out)
	}
	return nil
}

// timeBatch sends warmup+samples requests of b rows one at a time and
// returns the timed latencies in ms of the ok ones.
func timeBatch(ctx context.Context, target, model string, b, warmup, samples int, binary bool, timeout time.Duration) ([]float64, int64, error) {
	// One request in flight and arrivals far faster than answers: a closed
	// loop, each request sent the moment the previous one is answered.
	res, err := loadgen.Run(ctx, loadgen.Config{
		Target: target, Model: model, Rows: b, Binary: binary,
		Rate: loadgen.ConstantRate(1e6), Duration: time.Hour, Requests: warmup + samples,
		MaxInFlight: 1, OnFull: loadgen.WaitWhenFull, Timeout: timeout, Payloads: 1, Seed: uint64(b),
	})
	if err != nil {
		return nil, 0, err
	}
	if res.Summary.Sent == 0 {
		return nil, 0, errors.New("no request was sent")
	}
	var lat []float64
	var errs int64
	for i, r := range res.Records {
		if r.Err != loadgen.KindNone {
			errs++
			continue
		}
		if i >= warmup {
			lat = append(lat, float64(r.Latency)/float64(time.Millisecond))
		}
	}
	if len(lat) == 0 {
		return nil, errs, fmt.Errorf("all %d requests failed (by kind: %v, statuses: %v)", errs, res.Summary.ErrorsByKind, res.Summary.StatusCounts)
	}
	return lat, errs, nil
}

func writeSamples(path string, s []regression.Sample) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("writing the profile: %w", err)
	}
	if err := regression.WriteCSV(f, s); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return f.Close()
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
			t.ns += s.ComputeInput.Ns + s.ComputeInfer.Ns + s.ComputeOutput.Ns
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
