package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/ratebatch/ratebatch/lab/compare"
	"github.com/ratebatch/ratebatch/lab/trace"
	"github.com/ratebatch/ratebatch/policy"
)

func init() {
	register("compare", "run every policy in the simulator over a load grid and paper300, price each against the SMDP optimum, write out/compare/RESULTS.md", runCompare)
}

// compareFlags are compare's flags; those that map one to one onto
// compare.Options are bound to them directly.
type compareFlags struct {
	o             compare.Options
	lists         compare.Lists
	out, plotsDir string
	asJSON, quiet bool
}

func bindCompareFlags(fs *flag.FlagSet) *compareFlags {
	f := &compareFlags{}
	fs.StringVar(&f.lists.Presets, "presets", strings.Join(compare.DefaultPresets, ","), "comma list of model presets; each needs energy figures")
	fs.StringVar(&f.lists.Rhos, "rhos", joinFloats(compare.DefaultRhos), "comma list of loads rho = lambda/mu(B_max), each in (0, 1)")
	fs.IntVar(&f.o.Requests, "requests", compare.DefaultRequests, "arrivals per constant-load run (more near saturation: N*max(1, 0.5/(1-rho)))")
	fs.Uint64Var(&f.o.Seed, "seed", 1, "seed of the arrivals; every policy sees the same ones")
	fs.Float64Var(&f.o.W1, "w1", compare.DefaultW1, "weight of mean latency (per ms) in the cost")
	fs.Float64Var(&f.o.W2, "w2", compare.DefaultW2, "weight of mean power (per W) in the cost")
	fs.Float64Var(&f.o.SLAFactor, "sla-factor", compare.DefaultSLAFactor, "SLA of every request, as a multiple of tau(B_max) of its model")
	fs.StringVar(&f.lists.Trace, "trace", trace.Paper300, "day-shaped trace to run besides the grid: a built-in name or a CSV file (none: skip)")
	fs.Float64Var(&f.o.TracePeakRho, "trace-peak-rho", compare.DefaultTracePeakRho, "also run a copy of the trace scaled so its peak reaches this rho (0: skip)")
	fs.StringVar(&f.lists.Policies, "policies", "all", "comma list of policies to compare, or all ("+strings.Join(policy.Names(), ", ")+")")
	fs.IntVar(&f.o.Workers, "workers", 0, "runs in parallel (0: one per CPU)")
	// The defaults stay under out/, so running compare anywhere never
	// overwrites a docs/ directory (docs/results/energy.md quotes the
	// report's headline).
	fs.StringVar(&f.out, "out", "out/compare/RESULTS.md", "write the Markdown report here (empty: do not write it)")
	fs.StringVar(&f.plotsDir, "plots-dir", "out/compare/img", "write the SVG plots here (empty: no plots)")
	fs.BoolVar(&f.asJSON, "json", false, "print the full report as JSON on stdout")
	fs.BoolVar(&f.quiet, "quiet", false, "do not report progress on stderr")
	return f
}

func runCompare(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("compare", stderr)
	f := bindCompareFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	o, err := f.options(stderr)
	if err != nil {
		return usagef(stderr, "compare", "%v", err)
	}
	rep, err := compare.Run(ctx, o)
	if err != nil {
		return err
	}
	written, err := rep.WriteFiles(f.out, f.plotsDir, append([]string{"ratebatch", "compare"}, args...))
	if err != nil {
		return err
	}
	if f.asJSON {
		return json.NewEncoder(stdout).Encode(rep)
	}
	if f.out != "" {
		fmt.Fprintf(stdout, "wrote %s", f.out)
		if len(written) > 0 {
			fmt.Fprintf(stdout, " and %d plots in %s", len(written), f.plotsDir)
		}
		fmt.Fprintln(stdout)
	}
	return nil
}

// options are the validated compare.Options the flags describe; an error
// is a usage error.
func (f *compareFlags) options(stderr io.Writer) (compare.Options, error) {
	o := f.o
	if err := f.lists.Apply(&o); err != nil {
		return o, err
	}
	if !f.quiet {
		start := time.Now()
		o.Progress = func(done, total int, what string) {
			fmt.Fprintf(stderr, "[%3d/%d %6.1fs] %s\n", done, total, time.Since(start).Seconds(), what)
		}
	}
	return o, o.Validate()
}
