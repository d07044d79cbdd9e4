package main

import (
	"context"
	"fmt"
	"github.com/ratebatch/ratebatch/lab/demo"
	"io"
	"strings"

	"github.com/ratebatch/ratebatch/lab/loadreport"
)

func init() {
	register("report", "summary table and SVG plots from load runs (CSV) and the proxy's samples", runReport)
}

// runFlag collects --run NAME=LOAD.csv[,SAMPLES.csv] flags.
type runFlag []string

func (r *runFlag) String() string     { return strings.Join(*r, " ") }
func (r *runFlag) Set(v string) error { *r = append(*r, v); return nil }

func runReport(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("report", stderr)
	var runs runFlag
	fs.Var(&runs, "run", "a run as NAME=LOAD.csv[,SAMPLES.csv] (repeat; the first is the baseline of the ratios).\n"+
		"LOAD.csv from 'ratebatch load --csv', SAMPLES.csv from 'ratebatch load --admin URL --samples-csv'")
	dir := fs.String("dir", "", "read NAME.load.csv and NAME.samples.csv for every run in this directory (as ratebatch demo writes them); without --names, every NAME.load.csv found there")
	names := fs.String("names", "", "with --dir: comma-separated run names, the first the baseline (default: every run in --dir, in the demo's order)")
	out := fs.String("out", "out/report", "directory for summary.md and the SVG plots (with --dir and no --out: --dir itself)")
	asJSON := fs.Bool("json", false, "print the table as JSON")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: ratebatch report --run NAME=LOAD.csv[,SAMPLES.csv] ... [--out DIR]")
		fmt.Fprintln(fs.Output(), "       ratebatch report --dir out/demo [--names batchmonitor,adhoc] [--out DIR]")
		fmt.Fprintln(fs.Output(), "\nWrites DIR/summary.md (sent, ok, errors, mean/p50/p99 latency, mean batch,")
		fmt.Fprintln(fs.Output(), "requests per joule, ratios to the first run) and plots over time of the")
		fmt.Fprintln(fs.Output(), "arrival rate, the chosen batch size, p50 latency and requests per joule.\n\nFlags:")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *dir != "" {
		specs, err := loadreport.DirSpecs(*dir, splitList(*names), demo.DefaultPolicies)
		if err != nil {
			return err
		}
		runs = append(runs, specs...)
		if !flagsSet(fs)["out"] {
			*out = *dir // redraw the table and plots beside the runs
		}
	}
	if len(runs) == 0 {
		return usagef(stderr, "report", "give at least one --run, or a --dir holding NAME.load.csv files")
	}
	return loadreport.Report(runs, *out, stdout, *asJSON)
}
