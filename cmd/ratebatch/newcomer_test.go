package main

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

	"github.com/ratebatch/ratebatch/lab/loadgen"
	"github.com/ratebatch/ratebatch/lab/loadreport"
)

// The small items a newcomer met (issue 36).

func TestVersionFlags(t *testing.T) {
	for _, arg := range []string{"--version", "-version"} {
		var out, errb bytes.Buffer
		if code := run(context.Background(), []string{arg}, &out, &errb); code != 0 || !strings.HasPrefix(out.String(), "ratebatch ") {
			t.Errorf("ratebatch %s: exit %d, stdout %q, stderr %q", arg, code, out.String(), errb.String())
		}
	}
}

func TestMisspeltFlagSuggestsOne(t *testing.T) {
	tests := []struct{ args []string }{
		{[]string{"sim", "--polcy", "adhoc"}},
		{[]string{"load", "--targt", "x"}},
		{[]string{"serve", "--upstrem", "x"}},
	}
	want := map[string]string{"sim": "--policy", "load": "--target", "serve": "--upstream"}
	for _, tt := range tests {
		var out, errb bytes.Buffer
		code := run(context.Background(), tt.args, &out, &errb)
		if w := "did you mean " + want[tt.args[0]] + "?"; code != 2 || !strings.Contains(errb.String(), w) {
			t.Errorf("%v: exit %d, stderr %q, want exit 2 and %q", tt.args, code, errb.String(), w)
		}
	}
}

// report --dir redraws the table and plots beside the runs (README), not
// in out/report under the working directory.
func TestReportDirWritesIntoDir(t *testing.T) {
	dir := t.TempDir()
	recs := []loadgen.Record{{Start: 0, Latency: 2 * time.Millisecond, Status: 200}, {Start: time.Millisecond, Latency: 3 * time.Millisecond, Status: 200}}
	if err := loadreport.WriteFile(filepath.Join(dir, "adhoc.load.csv"), func(w io.Writer) error { return loadgen.WriteCSV(w, recs) }); err != nil {
		t.Fatal(err)
	}
	t.Chdir(t.TempDir())
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"report", "--dir", dir}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if _, err := os.Stat(filepath.Join(dir, "summary.md")); err != nil {
		t.Errorf("no summary.md in --dir: %v", err)
	}
	if _, err := os.Stat("out/report"); err == nil {
		t.Error("report --dir also wrote out/report")
	}
}

// smdp --compare without a load compares at a grid of loads.
func TestSMDPCompareWithoutLoadRunsAGrid(t *testing.T) {
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"smdp", "--compare", "--grid", "0.2,0.6", "--smax", "64", "--json"}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var reps []struct {
		Rho      float64 `json:"rho"`
		Policies []struct {
			Name string `json:"name"`
		} `json:"policies"`
	}
	if err := json.Unmarshal(out.Bytes(), &reps); err != nil {
		t.Fatal(err)
	}
	if len(reps) != 2 || reps[0].Rho < 0.19 || reps[0].Rho > 0.21 || reps[1].Rho < 0.59 || reps[1].Rho > 0.61 {
		t.Fatalf("reports %+v, want one at rho 0.2 and one at 0.6", reps)
	}
	for _, r := range reps {
		if len(r.Policies) != 5 || r.Policies[0].Name != "optimal" || r.Policies[1].Name != "adhoc" {
			t.Errorf("rho %v: policies %+v, want the optimum and the four compared", r.Rho, r.Policies)
		}
	}
	if code := run(context.Background(), []string{"smdp", "--grid", "0.2"}, &out, &errb); code != 2 {
		t.Errorf("--grid without --compare: exit %d, want 2", code)
	}
}

// sim --w2 weighs power in smdp's objective: with energy in the cost the
// policy batches more than with latency alone.
func TestSimWeightsReachSMDP(t *testing.T) {
	meanBatch := func(w2 string) float64 {
		var out, errb bytes.Buffer
		code := run(context.Background(), []string{"sim", "--policy", "smdp", "--preset", "googlenet-p4", "--rho", "0.3",
			"--requests", "5000", "--w1", "1", "--w2", w2, "--json"}, &out, &errb)
		if code != 0 {
			t.Fatalf("--w2 %s: exit %d: %s", w2, code, errb.String())
		}
		var r struct {
			MeanBatch float64 `json:"mean_batch_size"`
		}
		if err := json.Unmarshal(out.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		return r.MeanBatch
	}
	if lat, energy := meanBatch("0"), meanBatch("2"); !(energy > lat*1.2) {
		t.Errorf("mean batch with --w2 2: %.2f, with --w2 0: %.2f; want the energy weight to raise it", energy, lat)
	}
}
