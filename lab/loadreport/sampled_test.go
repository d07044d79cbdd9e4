package loadreport_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ratebatch/ratebatch/config"
	"github.com/ratebatch/ratebatch/lab/demo"
	"github.com/ratebatch/ratebatch/lab/emulator"
	"github.com/ratebatch/ratebatch/lab/emulator/emulatortest"
	"github.com/ratebatch/ratebatch/lab/loadgen"
	"github.com/ratebatch/ratebatch/lab/loadreport"
	"github.com/ratebatch/ratebatch/server/servertest"
)

// report is Report's JSON: the table's rows and the plots' paths.
type report struct {
	Rows  []loadreport.Row `json:"rows"`
	Plots []string         `json:"plots"`
}

func reportJSON(t *testing.T, specs []string, out string) report {
	t.Helper()
	var b bytes.Buffer
	if err := loadreport.Report(specs, out, &b, true); err != nil {
		t.Fatalf("report %v: %v", specs, err)
	}
	var rep report
	if err := json.Unmarshal(b.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	return rep
}

// A load run sampling the proxy's admin port, read back by Report.
func TestLoadSamplesAndReport(t *testing.T) {
	em := emulatortest.Start(t, emulator.Options{TimeScale: 1})
	p := servertest.Start(t, em.Addr(), nil, func(c *config.Config) {
		c.Power.Source = "triton"
		c.Power.MetricsURL = "http://" + em.MetricsAddr() + "/metrics"
		c.Power.Interval = 50 * time.Millisecond
	})
	dir := t.TempDir()
	c := loadgen.Config{Target: p.Base, Model: "simple", Rate: loadgen.ConstantRate(200), Duration: 1500 * time.Millisecond, Seed: 1}
	res, err := loadreport.RunSampled(context.Background(), c, p.Admin, dir+"/a.samples.csv")
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	if err := loadreport.WriteFile(dir+"/a.csv", func(w io.Writer) error { return loadgen.WriteCSV(w, res.Records) }); err != nil {
		t.Fatal(err)
	}
	rep := reportJSON(t, []string{"bm=" + dir + "/a.csv," + dir + "/a.samples.csv", "again=" + dir + "/a.csv"}, dir+"/rep")
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
	if err := loadreport.Report([]string{"x=" + dir + "/missing.csv"}, dir+"/rep", io.Discard, true); err == nil {
		t.Fatal("missing file: no error")
	}

	// A directory without names gives the runs found there, the demo's
	// policies first in the demo's order; a run without samples is read
	// without.
	runs := filepath.Join(dir, "runs")
	os.MkdirAll(runs, 0o755)
	for name, files := range map[string][]string{"zeta": {"a.csv"}, "adhoc": {"a.csv", "a.samples.csv"}, "batchmonitor": {"a.csv", "a.samples.csv"}} {
		for i, f := range files {
			data, _ := os.ReadFile(filepath.Join(dir, f))
			suffix := []string{".load.csv", ".samples.csv"}[i]
			os.WriteFile(filepath.Join(runs, name+suffix), data, 0o644)
		}
	}
	specs, err := loadreport.DirSpecs(runs, nil, demo.DefaultPolicies)
	if err != nil {
		t.Fatal(err)
	}
	rep = reportJSON(t, specs, dir+"/rep2")
	var got []string
	for _, r := range rep.Rows {
		got = append(got, r.Name)
	}
	if strings.Join(got, ",") != "adhoc,batchmonitor,zeta" {
		t.Errorf("runs found in the directory: %v, want adhoc,batchmonitor,zeta (the demo's order: the baseline first)", got)
	}
	if _, err := loadreport.DirSpecs(t.TempDir(), nil, demo.DefaultPolicies); err == nil || !strings.Contains(err.Error(), "no NAME.load.csv") {
		t.Errorf("empty directory: error %v", err)
	}
}
