package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/ratebatch/ratebatch/policy/batchcost"
	"github.com/ratebatch/ratebatch/regression"
)

func init() {
	register("fit", "fit tau(b) = alpha*b + tau0 to measured batch latencies (CSV)", runFit)
}

func runFit(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("fit", stderr)
	csvPath := fs.String("csv", "", "CSV file with a header and columns batch_size,latency_ms (one row per batch; - for stdin)")
	noRobust := fs.Bool("no-robust", false, "plain least squares: keep outliers instead of rejecting them")
	asJSON := fs.Bool("json", false, "print one JSON object: alpha_ms, tau0_ms, r2, n, sizes, outliers")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *csvPath == "" {
		fmt.Fprintln(stderr, "ratebatch fit: --csv FILE is required")
		return errUsage
	}
	samples, err := readFitCSV(*csvPath, os.Stdin)
	if err != nil {
		return err
	}
	var opts regression.Options
	if *noRobust {
		opts.OutlierCut = -1
	}
	f, err := regression.FitSamples(samples, opts)
	if err != nil {
		return fmt.Errorf("%s: %w", *csvPath, err)
	}
	if *asJSON {
		return json.NewEncoder(stdout).Encode(struct {
			batchcost.Latency
			R2       float64 `json:"r2"`
			N        int     `json:"n"`
			Sizes    int     `json:"sizes"`
			Outliers int     `json:"outliers"`
			// Rejected are the rejected samples, numbered from 1 in file order.
			Rejected []rejectedSample `json:"rejected"`
		}{f.Line, f.R2, f.N, f.Sizes, f.Outliers, rejected(samples, f.Rejected)})
	}
	fmt.Fprintf(stdout, "tau(b) = %.6g*b + %.6g ms  (alpha %.6g ms, tau0 %.6g ms)\n", f.AlphaMs, f.Tau0Ms, f.AlphaMs, f.Tau0Ms)
	fmt.Fprintf(stdout, "R^2 %.6f over n %d samples, %d batch sizes, %d outliers rejected\n", f.R2, f.N, f.Sizes, f.Outliers)
	for _, r := range rejected(samples, f.Rejected) {
		fmt.Fprintf(stdout, "rejected: sample %d (batch %d, %.6g ms)\n", r.Sample, r.Batch, r.LatencyMs)
	}
	return nil
}

// rejectedSample is a sample the robust fit left out, numbered from 1 in
// the order of the file, so a reader can find it and see why.
type rejectedSample struct {
	Sample    int     `json:"sample"`
	Batch     int     `json:"batch_size"`
	LatencyMs float64 `json:"latency_ms"`
}

func rejected(samples []regression.Sample, idx []int) []rejectedSample {
	out := make([]rejectedSample, 0, len(idx))
	for _, i := range idx {
		out = append(out, rejectedSample{Sample: i + 1, Batch: samples[i].Batch, LatencyMs: samples[i].LatencyMs})
	}
	return out
}

func readFitCSV(path string, stdin io.Reader) ([]regression.Sample, error) {
	if path == "-" {
		s, err := regression.ReadCSV(stdin)
		if err != nil {
			return nil, fmt.Errorf("stdin: %w", err)
		}
		return s, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading the samples: %w", err)
	}
	defer f.Close()
	s, err := regression.ReadCSV(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}
