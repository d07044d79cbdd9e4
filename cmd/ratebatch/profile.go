package main

import (
	"context"
	"fmt"
	"github.com/ratebatch/ratebatch/lab/loadreport"
	"io"
	"time"

	"github.com/ratebatch/ratebatch/lab/profiler"
	"github.com/ratebatch/ratebatch/regression"
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
		return usagef(stderr, "profile", "--upstream and --model are required")
	}
	if *samples < 1 || *warmup < 0 {
		return usagef(stderr, "profile", "--samples must be >= 1 and --warmup >= 0")
	}
	o := profiler.Options{Upstream: *upstream, Model: *model, Samples: *samples, Warmup: *warmup,
		MaxBatch: *maxBatch, Binary: *binary, Timeout: *timeout}
	if !*asJSON {
		o.Progress = func(s profiler.Size) { profiler.WriteProgress(stdout, s) }
	}
	res, err := profiler.Run(ctx, o)
	if err != nil {
		return err
	}
	if *out != "" {
		if err := loadreport.WriteFile(*out, func(w io.Writer) error { return regression.WriteCSV(w, res.Samples) }); err != nil {
			return fmt.Errorf("writing the profile: %w", err)
		}
	}
	if *asJSON {
		return res.WriteJSON(stdout, *model)
	}
	res.WriteText(stdout)
	if *out != "" {
		fmt.Fprintf(stdout, "samples written to %s\n", *out)
	}
	return nil
}
