package demo

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ratebatch/ratebatch/lab/emulator"
	"github.com/ratebatch/ratebatch/lab/loadgen"
	"github.com/ratebatch/ratebatch/lab/loadreport"
	"github.com/ratebatch/ratebatch/lab/preset"
	"github.com/ratebatch/ratebatch/lab/trace"
)

// TestRunComparesPoliciesEndToEnd plays the demo as `ratebatch demo
// --speedup 300 --policies adhoc,budget` does (its other flags' defaults):
// an emulator and a proxy per policy, both regimes, then the report.
func TestRunComparesPoliciesEndToEnd(t *testing.T) {
	dir := t.TempDir()
	exact, err := emulator.LookupRealism("exact")
	if err != nil {
		t.Fatal(err)
	}
	o := Options{Preset: preset.DefaultPreset, TraceName: trace.Paper300, Speedup: 300, TraceScale: 1,
		Policies: []string{"adhoc", "budget"}, Out: dir, Seed: 1, Binary: true, Model: emulator.SimpleModel,
		Realism: exact, Regimes: []string{"light", "loaded"}}
	var out bytes.Buffer
	if err := Run(context.Background(), o, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	text := out.String()
	for _, want := range []string{"| budget |", "| adhoc |", "latency.svg", "batch_size.svg", "requests_per_joule.svg",
		"light regime: peak rho 0.10", "loaded regime: peak rho 0.80", "/ui/", "b = mean rows per batch",
		"Verdict against adhoc", "== Verdict: every policy against adhoc", "| budget |",
		"The default (budget) in the light regime: mean", "The default (budget) in the loaded regime: mean",
		"The default, budget, against adhoc (its budgets: mean 1.10x, p99 1.20x):",
		"--policy-slo-p99 10ms", "bin/ratebatch sim --preset googlenet-p4 --bmax 8 --trace paper300 --speedup 300"} {
		if !strings.Contains(text, want) {
			t.Errorf("demo output lacks %q:\n%s", want, text)
		}
	}
	fitsTheTerminal(t, strings.ReplaceAll(text, dir, "out/demo")) // the default --out, not a test's temporary path
	if _, err := os.Stat(filepath.Join(dir, "loaded", "summary.md")); err != nil {
		t.Errorf("no loaded-regime report: %v", err)
	}
	// One verdict line per policy but the baseline, in each regime.
	if n := strings.Count(text, " req/J ("); n != 2 {
		t.Errorf("%d verdict lines, want 1 policy x 2 regimes:\n%s", n, text)
	}
	if v, err := os.ReadFile(filepath.Join(dir, "verdict.md")); err != nil || !bytes.Contains(v, []byte("| budget |")) {
		t.Errorf("verdict.md: %v, %q", err, v)
	}
	// The files the report command reads back.
	for _, pol := range []string{"budget", "adhoc"} {
		f, err := os.Open(filepath.Join(dir, pol+".load.csv"))
		if err != nil {
			t.Fatal(err)
		}
		recs, err := loadgen.ReadCSV(f)
		f.Close()
		if err != nil || len(recs) == 0 {
			t.Fatalf("%s load CSV: %d records, %v", pol, len(recs), err)
		}
		f, err = os.Open(filepath.Join(dir, pol+".samples.csv"))
		if err != nil {
			t.Fatal(err)
		}
		smp, err := loadreport.ReadSamplesCSV(f)
		f.Close()
		if err != nil || len(smp) == 0 {
			t.Fatalf("%s samples: %d, %v", pol, len(smp), err)
		}
		last := smp[len(smp)-1]
		if last.TotalRequestsPerJoule == nil || *last.TotalRequestsPerJoule <= 0 {
			t.Fatalf("%s: no requests per joule at the end of the run", pol)
		}
		if last.RowsSent != int64(len(recs)) {
			t.Fatalf("%s: proxy sent %d rows upstream for %d requests", pol, last.RowsSent, len(recs))
		}
	}
	svg, err := os.ReadFile(filepath.Join(dir, "latency.svg"))
	if err != nil || !bytes.HasPrefix(svg, []byte("<svg")) {
		t.Fatalf("latency.svg is not an SVG: %v", err)
	}
	for _, pol := range []string{">budget<", ">adhoc<"} {
		if !bytes.Contains(svg, []byte(pol)) {
			t.Errorf("latency.svg has no series %s", pol)
		}
	}
}
