package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/ratebatch/ratebatch/lab/profiler"
	"github.com/ratebatch/ratebatch/policy/batchcost"
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
		fmt.Fprintln(stderr, "ratebatch profile: --upstream and --model are required")
		return errUsage
	}
	if *samples < 1 || *warmup < 0 {
		fmt.Fprintln(stderr, "ratebatch profile: --samples must be >= 1 and --warmup >= 0")
		return errUsage
	}
	o := profiler.Options{Upstream: *upstream, Model: *model, Samples: *samples, Warmup: *warmup,
		MaxBatch: *maxBatch, Binary: *binary, Timeout: *timeout}
	if !*asJSON {
		o.Progress = func(s profiler.Size) {
			fmt.Fprintf(stdout, "b=%-4d median %8.3f ms  (%d ok, %d errors)\n", s.Batch, s.MedianMs, s.OK, s.Errors)
		}
	}
	res, err := profiler.Run(ctx, o)
	if err != nil {
		return err
	}
	if *out != "" {
		if err := writeSamples(*out, res.Samples); err != nil {
			return err
		}
	}
	fit, server := res.Fit, res.Server
	if *asJSON {
		out := struct {
			Model string `json:"model"`
			batchcost.Latency
			R2    float64         `json:"r2"`
			N     int             `json:"n"`
			Sizes []profiler.Size `json:"sizes"`
			// The server's own compute line from its batch statistics;
			// null when it keeps none.
			ServerAlphaMs *float64 `json:"server_alpha_ms"`
			ServerTau0Ms  *float64 `json:"server_tau0_ms"`
		}{Model: *model, Latency: fit.Line, R2: fit.R2, N: fit.N, Sizes: res.Sizes}
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
