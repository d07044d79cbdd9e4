package main

import (
	"context"
	"fmt"
	"io"
	"os"

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
		return usagef(stderr, "fit", "--csv FILE is required")
	}
	samples, err := regression.ReadCSVFile(*csvPath, os.Stdin)
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
	rep := regression.Report{Fit: f, Samples: samples}
	if *asJSON {
		return rep.WriteJSON(stdout)
	}
	rep.WriteText(stdout)
	return nil
}
