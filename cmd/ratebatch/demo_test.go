package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratebatch/ratebatch/config"
	"github.com/ratebatch/ratebatch/lab/emulator"

	"github.com/ratebatch/ratebatch/lab/loadgen"
	"github.com/ratebatch/ratebatch/lab/loadreport"
)

func TestDemoComparesPoliciesEndToEnd(t *testing.T) {
	dir := t.TempDir()
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"demo", "--speedup", "300", "--policies", "adhoc,budget", "--out", dir}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s\n%s", code, errb.String(), out.String())
	}
	text := out.String()
	for _, want := range []string{"| budget |", "| adhoc |", "latency.svg", "batch_size.svg", "requests_per_joule.svg",
		"light regime: peak rho 0.10", "loaded regime: peak rho 0.80", "/ui/", "b = mean rows per batch",
		"Verdict against adhoc", "== Verdict: every policy against adhoc", "| budget |", "budget (mean latency at most 1.1x adhoc's) against adhoc: "} {
		if !strings.Contains(text, want) {
			t.Errorf("demo output lacks %q:\n%s", want, text)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "loaded", "summary.md")); err != nil {
		t.Errorf("no loaded-regime report: %v", err)
	}
	// One verdict line per policy but the baseline, in each regime.
	if n := strings.Count(text, " req/J), mean latency "); n != 2 {
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

func TestDemoRejectsUnknownPolicy(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"demo", "--policies", "fastest", "--out", t.TempDir()}, &out, &errb); code != 1 ||
		!strings.Contains(errb.String(), "unknown policy") {
		t.Fatalf("exit %d, stderr %q", code, errb.String())
	}
}

// A load run with --admin sampling, read back by `ratebatch report`.
func TestLoadSamplesAndReport(t *testing.T) {
	em := startEmulator(t, emulator.Options{TimeScale: 1})
	base, admin, _ := startProxy(t, em.Addr(), func(c *config.Config) {
		c.Power.Source = "triton"
		c.Power.MetricsURL = "http://" + em.MetricsAddr() + "/metrics"
		c.Power.Interval = 50 * time.Millisecond
	})
	dir := t.TempDir()
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"load", "--target", base, "--model", "simple", "--rate", "200", "--duration", "1500ms",
		"--admin", admin, "--csv", dir + "/a.csv", "--samples-csv", dir + "/a.samples.csv"}, &out, &errb)
	if code != 0 {
		t.Fatalf("load exit %d: %s", code, errb.String())
	}
	out.Reset()
	code = run(context.Background(), []string{"report", "--run", "bm=" + dir + "/a.csv," + dir + "/a.samples.csv",
		"--run", "again=" + dir + "/a.csv", "--out", dir + "/rep", "--json"}, &out, &errb)
	if code != 0 {
		t.Fatalf("report exit %d: %s", code, errb.String())
	}
	var rep struct {
		Rows  []loadreport.Row `json:"rows"`
		Plots []string         `json:"plots"`
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	bm := rep.Rows[0]
	if bm.OK == 0 || bm.OK != bm.Sent || bm.RequestsPerJoule == nil || bm.MeanBatchSize == nil {
		t.Fatalf("report row %+v: want every request ok, a mean batch and requests per joule", bm)
	}
	if rep.Rows[1].RequestsPerJoule != nil {
		t.Fatal("a run without samples must not get a requests-per-joule figure")
	}
	if len(rep.Plots) != 4 {
		t.Fatalf("plots %v, want rate, batch size, latency and requests per joule", rep.Plots)
	}
	if code := run(context.Background(), []string{"report", "--run", "x=" + dir + "/missing.csv"}, &out, &errb); code != 1 {
		t.Fatalf("missing file: exit %d", code)
	}

	// --dir without --names finds the runs itself, the demo's policies
	// first in the demo's order; a run without samples is read without.
	runs := filepath.Join(dir, "runs")
	os.MkdirAll(runs, 0o755)
	for name, files := range map[string][]string{"zeta": {"a.csv"}, "adhoc": {"a.csv", "a.samples.csv"}, "batchmonitor": {"a.csv", "a.samples.csv"}} {
		for i, f := range files {
			data, _ := os.ReadFile(filepath.Join(dir, f))
			suffix := []string{".load.csv", ".samples.csv"}[i]
			os.WriteFile(filepath.Join(runs, name+suffix), data, 0o644)
		}
	}
	out.Reset()
	errb.Reset()
	if code := run(context.Background(), []string{"report", "--dir", runs, "--out", dir + "/rep2", "--json"}, &out, &errb); code != 0 {
		t.Fatalf("report --dir without --names: exit %d: %s", code, errb.String())
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range rep.Rows {
		got = append(got, r.Name)
	}
	if strings.Join(got, ",") != "adhoc,batchmonitor,zeta" {
		t.Errorf("runs found in --dir: %v, want adhoc,batchmonitor,zeta (the demo's order: the baseline first)", got)
	}
	if code := run(context.Background(), []string{"report", "--dir", t.TempDir()}, &out, &errb); code != 1 || !strings.Contains(errb.String(), "no NAME.load.csv") {
		t.Errorf("empty --dir: exit %d, stderr %q", code, errb.String())
	}
}

func TestDemoProgressCells(t *testing.T) {
	rpj := 12.5
	samples := []loadreport.Sample{
		{T: 0, BatchesSent: 10, RowsSent: 80},
		{T: 0.5, BatchesSent: 12, RowsSent: 90},
		{T: 1.0, BatchesSent: 14, RowsSent: 100, RequestsPerJoule: &rpj},
	}
	// 4 batches of 20 rows in the last second: 5 rows a batch, whatever the cap.
	b, p50, r := progressCells(loadgen.Snapshot{OKRPS: 100, P50LatencyMs: 3.25}, samples)
	if b != "5.00" || p50 != "3.25" || r != "12.5" {
		t.Errorf("cells %q %q %q, want 5.00 3.25 12.5", b, p50, r)
	}
	// A second without completions or batches shows -, not 0.00.
	idle := []loadreport.Sample{{T: 0, BatchesSent: 14, RowsSent: 100}, {T: 1, BatchesSent: 14, RowsSent: 100}}
	b, p50, r = progressCells(loadgen.Snapshot{}, idle)
	if b != "-" || p50 != "-" || r != "-" {
		t.Errorf("idle second: %q %q %q, want - - -", b, p50, r)
	}
}

// The verdict compares each policy with ad-hoc wherever it sits in the
// list, names budget's gain, and says when there is nothing to compare.
func TestDemoVerdict(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	light := []loadreport.Row{
		{Name: "budget", MeanLatencyMs: 4.4, P99LatencyMs: 9, RequestsPerJoule: f(25)},
		{Name: "adhoc", MeanLatencyMs: 4, P99LatencyMs: 10, RequestsPerJoule: f(20)},
		{Name: "smdp", MeanLatencyMs: 4, P99LatencyMs: 10},
	}
	var line bytes.Buffer
	writeVerdictLines(&line, light)
	for _, want := range []string{"budget         +25.0% requests per joule (25.00 vs 20.00 req/J), mean latency 1.10x adhoc's, p99 0.90x: fewer joules per request, slower",
		"smdp           no energy figures; mean latency 1.00x adhoc's"} {
		if !strings.Contains(line.String(), want) {
			t.Errorf("verdict lines lack %q:\n%s", want, line.String())
		}
	}
	if strings.Contains(line.String(), "adhoc  ") {
		t.Errorf("the baseline got a verdict line:\n%s", line.String())
	}

	dir := t.TempDir()
	var out bytes.Buffer
	if err := writeVerdict(&out, dir, []regimeResult{{"light", light}}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| budget | +25.0% (1.25x) | 1.10x (0.90x) |", "| adhoc | baseline: 20.00 req/J | baseline: 4.00 (10.00) ms |",
		"budget (mean latency at most 1.1x adhoc's) against adhoc: +25.0% requests per joule (1.25x) at 1.10x the mean latency in the light regime."} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("closing table lacks %q:\n%s", want, out.String())
		}
	}

	line.Reset()
	writeVerdictLines(&line, light[:1])
	if !strings.Contains(line.String(), "no adhoc run to compare with") {
		t.Errorf("without adhoc: %q", line.String())
	}
}

// The default policies start with the baseline and include budget.
func TestDemoDefaultPolicies(t *testing.T) {
	got := demoPolicyList("")
	if len(got) == 0 || got[0] != demoBaseline || !slices.Contains(got, "budget") {
		t.Errorf("default policies %v: want %s first and budget among them", got, demoBaseline)
	}
	if got := demoPolicyList("a,b"); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("--policies a,b gave %v", got)
	}
}
