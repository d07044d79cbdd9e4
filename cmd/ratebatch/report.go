package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/ratebatch/ratebatch/lab/loadgen"
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
	out := fs.String("out", "out/report", "directory for summary.md and the SVG plots")
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
		list := strings.Split(*names, ",")
		if strings.TrimSpace(*names) == "" {
			found, err := runsIn(*dir)
			if err != nil {
				return err
			}
			list = found
		}
		for _, n := range list {
			if n = strings.TrimSpace(n); n != "" {
				spec := fmt.Sprintf("%s=%s", n, filepath.Join(*dir, n+".load.csv"))
				// The samples are optional: a plain load run has none.
				if samples := filepath.Join(*dir, n+".samples.csv"); *names != "" || exists(samples) {
					spec += "," + samples
				}
				runs = append(runs, spec)
			}
		}
	}
	if len(runs) == 0 {
		fmt.Fprintln(stderr, "ratebatch report: give at least one --run, or a --dir holding NAME.load.csv files")
		return errUsage
	}
	var loaded []loadreport.Run
	for _, spec := range runs {
		r, err := readRun(spec)
		if err != nil {
			return err
		}
		loaded = append(loaded, r)
	}
	rows := loadreport.Summarize(loaded)
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	if err := writeFile(*out+"/summary.md", func(w io.Writer) error { return loadreport.WriteTable(w, rows) }); err != nil {
		return err
	}
	paths, err := loadreport.WritePlots(*out, loaded)
	if err != nil {
		return err
	}
	if *asJSON {
		return json.NewEncoder(stdout).Encode(struct {
			Rows  []loadreport.Row `json:"rows"`
			Plots []string         `json:"plots"`
		}{rows, paths})
	}
	loadreport.WriteTable(stdout, rows)
	fmt.Fprintf(stdout, "\nwrote %s/summary.md and:\n", *out)
	for _, p := range paths {
		fmt.Fprintln(stdout, "  "+p)
	}
	return nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// runsIn lists the runs a directory holds (NAME.load.csv), those the demo
// runs first in its order (so its first policy stays the baseline), then the
// others by name.
func runsIn(dir string) ([]string, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.load.csv"))
	if err != nil {
		return nil, err
	}
	if len(paths) == 0 {
		return nil, fmt.Errorf("--dir %s: no NAME.load.csv files (as 'ratebatch demo' or 'ratebatch load --csv' write them)", dir)
	}
	rank := func(n string) int {
		if i := slices.Index(demoPolicies, n); i >= 0 {
			return i
		}
		return len(demoPolicies)
	}
	names := make([]string, len(paths))
	for i, p := range paths {
		names[i] = strings.TrimSuffix(filepath.Base(p), ".load.csv")
	}
	slices.SortFunc(names, func(a, b string) int {
		if c := rank(a) - rank(b); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	return names, nil
}

func readRun(spec string) (loadreport.Run, error) {
	name, files, ok := strings.Cut(spec, "=")
	if !ok || name == "" || files == "" {
		return loadreport.Run{}, fmt.Errorf("--run %q: want NAME=LOAD.csv[,SAMPLES.csv]", spec)
	}
	loadPath, samplesPath, _ := strings.Cut(files, ",")
	r := loadreport.Run{Name: name}
	f, err := os.Open(loadPath)
	if err != nil {
		return r, fmt.Errorf("run %s: %w", name, err)
	}
	r.Records, err = loadgen.ReadCSV(f)
	f.Close()
	if err != nil {
		return r, fmt.Errorf("run %s: %s: %w", name, loadPath, err)
	}
	if samplesPath != "" {
		f, err := os.Open(samplesPath)
		if err != nil {
			return r, fmt.Errorf("run %s: %w", name, err)
		}
		r.Samples, err = loadreport.ReadSamplesCSV(f)
		f.Close()
		if err != nil {
			return r, fmt.Errorf("run %s: %s: %w", name, samplesPath, err)
		}
	}
	return r, nil
}
