package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ratebatch/ratebatch/config"
	"github.com/ratebatch/ratebatch/lab/emulator"
	"github.com/ratebatch/ratebatch/lab/emulator/emulatortest"
	"github.com/ratebatch/ratebatch/lab/loadreport"
)

func TestDemoRejectsUnknownPolicy(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"demo", "--policies", "fastest", "--out", t.TempDir()}, &out, &errb); code != 1 ||
		!strings.Contains(errb.String(), "unknown policy") {
		t.Fatalf("exit %d, stderr %q", code, errb.String())
	}
}

// A load run with --admin sampling, read back by `ratebatch report`.
func TestLoadSamplesAndReport(t *testing.T) {
	em := emulatortest.Start(t, emulator.Options{TimeScale: 1})
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
