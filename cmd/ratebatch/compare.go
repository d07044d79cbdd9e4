package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/ratebatch/ratebatch/lab/compare"
	"github.com/ratebatch/ratebatch/lab/preset"
	"github.com/ratebatch/ratebatch/lab/trace"
	"github.com/ratebatch/ratebatch/policy"
)

func init() {
	register("compare", "run every policy in the simulator over a load grid and paper300, price each against the SMDP optimum, write out/compare/RESULTS.md", runCompare)
}

func runCompare(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("compare", stderr)
	presets := fs.String("presets", strings.Join(compare.DefaultPresets, ","), "comma list of model presets; each needs energy figures")
	rhos := fs.String("rhos", joinFloats(compare.DefaultRhos), "comma list of loads rho = lambda/mu(B_max), each in (0, 1)")
	requests := fs.Int("requests", compare.DefaultRequests, "arrivals per constant-load run (more near saturation: N*max(1, 0.5/(1-rho)))")
	seed := fs.Uint64("seed", 1, "seed of the arrivals; every policy sees the same ones")
	w1 := fs.Float64("w1", compare.DefaultW1, "weight of mean latency (per ms) in the cost")
	w2 := fs.Float64("w2", compare.DefaultW2, "weight of mean power (per W) in the cost")
	slaFactor := fs.Float64("sla-factor", compare.DefaultSLAFactor, "SLA of every request, as a multiple of tau(B_max) of its model")
	traceName := fs.String("trace", trace.Paper300, "day-shaped trace to run besides the grid: a built-in name or a CSV file (none: skip)")
	peak := fs.Float64("trace-peak-rho", compare.DefaultTracePeakRho, "also run a copy of the trace scaled so its peak reaches this rho (0: skip)")
	policies := fs.String("policies", "all", "comma list of policies to compare, or all ("+strings.Join(policy.Names(), ", ")+")")
	workers := fs.Int("workers", 0, "runs in parallel (0: one per CPU)")
	// The defaults stay under out/, so running compare anywhere never
	// overwrites a docs/ directory; the project's docs/RESULTS.md is made
	// with --out docs/RESULTS.md --plots-dir docs/img, as it says.
	out := fs.String("out", "out/compare/RESULTS.md", "write the Markdown report here (empty: do not write it); docs/RESULTS.md is made with --out docs/RESULTS.md --plots-dir docs/img")
	plotsDir := fs.String("plots-dir", "out/compare/img", "write the SVG plots here (empty: no plots)")
	asJSON := fs.Bool("json", false, "print the full report as JSON on stdout")
	quiet := fs.Bool("quiet", false, "do not report progress on stderr")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	usageErr := func(format string, a ...any) error {
		fmt.Fprintf(stderr, "ratebatch compare: "+format+"\n", a...)
		return errUsage
	}

	o := compare.Options{Requests: *requests, Seed: *seed, W1: *w1, W2: *w2, SLAFactor: *slaFactor,
		TracePeakRho: *peak, Workers: *workers}
	for _, name := range splitList(*presets) {
		p, err := preset.Lookup(name)
		if err != nil {
			return usageErr("--presets: %v", err)
		}
		o.Presets = append(o.Presets, p)
	}
	var err error
	if o.Rhos, err = parseFloats(*rhos); err != nil {
		return usageErr("--rhos: %v", err)
	}
	if t := strings.TrimSpace(*traceName); t != "" && t != "none" {
		if o.Trace, err = loadTrace(t); err != nil {
			return usageErr("--trace: %v", err)
		}
	}
	if p := strings.TrimSpace(*policies); p != "all" {
		o.Policies = splitList(p)
		if len(o.Policies) == 0 {
			return usageErr("--policies: name at least one policy, or all")
		}
	}
	if !*quiet {
		start := time.Now()
		o.Progress = func(done, total int, what string) {
			fmt.Fprintf(stderr, "[%3d/%d %6.1fs] %s\n", done, total, time.Since(start).Seconds(), what)
		}
	}

	if err := o.Validate(); err != nil {
		return usageErr("%v", err)
	}
	rep, err := compare.Run(ctx, o)
	if err != nil {
		return err
	}

	imgRel := ""
	var written []string
	if *plotsDir != "" {
		if err := os.MkdirAll(*plotsDir, 0o755); err != nil {
			return fmt.Errorf("creating the plots directory: %w", err)
		}
		for _, f := range rep.Figures() {
			if err := writeFigure(filepath.Join(*plotsDir, f.File), f); err != nil {
				return err
			}
			written = append(written, f.File)
		}
		imgRel = *plotsDir
		if *out != "" {
			if rel, err := filepath.Rel(filepath.Dir(*out), *plotsDir); err == nil {
				imgRel = rel
			}
		}
		imgRel = filepath.ToSlash(imgRel)
	}
	if *out != "" {
		if err := writeReport(*out, rep, "ratebatch compare "+shellJoin(args), imgRel); err != nil {
			return err
		}
	}
	if *asJSON {
		return json.NewEncoder(stdout).Encode(rep)
	}
	if *out != "" {
		fmt.Fprintf(stdout, "wrote %s", *out)
		if len(written) > 0 {
			fmt.Fprintf(stdout, " and %d plots in %s", len(written), *plotsDir)
		}
		fmt.Fprintln(stdout)
	}
	return nil
}

func writeFigure(path string, f compare.Figure) error {
	file, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("writing plot %s: %w", f.File, err)
	}
	if err := f.Figure.WriteSVG(file); err != nil {
		file.Close()
		return fmt.Errorf("writing plot %s: %w", f.File, err)
	}
	if err := file.Close(); err != nil {
		return fmt.Errorf("writing plot %s: %w", f.File, err)
	}
	return nil
}

func writeReport(path string, rep *compare.Report, command, imgRel string) error {
	if dir := filepath.Dir(path); dir != "." {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("writing the report: %w", err)
		}
	}
	kept, err := keptSection(path)
	if err != nil {
		return fmt.Errorf("writing the report: %w", err)
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("writing the report: %w", err)
	}
	if err := rep.WriteMarkdown(f, command, imgRel); err != nil {
		f.Close()
		return fmt.Errorf("writing the report: %w", err)
	}
	if kept != "" {
		if _, err := io.WriteString(f, "\n"+kept+"\n"); err != nil {
			f.Close()
			return fmt.Errorf("writing the report: %w", err)
		}
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("writing the report: %w", err)
	}
	return nil
}

// The report keeps, across regenerations, the one part of it that compare
// does not make: figures of live runs (other commands, each named in the
// section), between these two lines.
const (
	keptBegin = "<!-- kept by ratebatch compare: BEGIN -->"
	keptEnd   = "<!-- kept by ratebatch compare: END -->"
)

// keptSection returns the kept part of the report at path, markers
// included, or "" when the file or the part does not exist.
func keptSection(path string) (string, error) {
	old, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	_, rest, ok := strings.Cut(string(old), keptBegin)
	if !ok {
		return "", nil
	}
	body, _, ok := strings.Cut(rest, keptEnd)
	if !ok {
		return "", fmt.Errorf("%s has %q without %q", path, keptBegin, keptEnd)
	}
	return keptBegin + body + keptEnd, nil
}

func splitList(s string) []string {
	var out []string
	for part := range strings.SplitSeq(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}

func parseFloats(s string) ([]float64, error) {
	var out []float64
	for _, part := range splitList(s) {
		v, err := strconv.ParseFloat(part, 64)
		if err != nil {
			return nil, fmt.Errorf("%q is not a number", part)
		}
		out = append(out, v)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no value in %q", s)
	}
	return out, nil
}

func joinFloats(xs []float64) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = strconv.FormatFloat(x, 'g', -1, 64)
	}
	return strings.Join(parts, ",")
}

// shellJoin quotes args so that the printed command line can be pasted
// back into a shell.
func shellJoin(args []string) string {
	out := make([]string, len(args))
	for i, a := range args {
		if a != "" && strings.IndexFunc(a, func(r rune) bool {
			return !(r == '-' || r == '_' || r == '.' || r == ',' || r == '/' || r == '=' || r == '+' || r == ':' ||
				r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z')
		}) < 0 {
			out[i] = a
			continue
		}
		out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(out, " ")
}
