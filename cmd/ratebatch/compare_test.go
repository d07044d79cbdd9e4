package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ratebatch/ratebatch/lab/compare"
)

// A tiny comparison through the command: the report and its plots land
// where the flags say, the report names the command that made it and links
// the plots relative to itself.
func TestCompareWritesReport(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "docs", "RESULTS.md")
	plots := filepath.Join(dir, "docs", "img")
	args := []string{"compare", "--presets", "googlenet-p4", "--rhos", "0.3,0.6", "--requests", "2000",
		"--trace", "none", "--out", out, "--plots-dir", plots, "--quiet"}
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), args, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	md, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"ratebatch compare --presets googlenet-p4 --rhos 0.3,0.6", "](img/latency-googlenet-p4.svg)", "| 0.6 |"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("report lacks %q", want)
		}
	}
	if strings.Contains(string(md), "## paper300") {
		t.Error("--trace none still ran the trace")
	}
	for _, f := range []string{"latency-googlenet-p4.svg", "rpj-googlenet-p4.svg", "cost-googlenet-p4.svg"} {
		svg, err := os.ReadFile(filepath.Join(plots, f))
		if err != nil || !bytes.HasPrefix(svg, []byte("<svg")) {
			t.Errorf("plot %s: %v", f, err)
		}
	}
	if !strings.Contains(stdout.String(), "wrote "+out) || stderr.Len() != 0 {
		t.Fatalf("stdout %q, stderr %q", stdout.String(), stderr.String())
	}
}

// Regenerating the report keeps the live figures between the kept markers
// and replaces everything else; an opened but unclosed part is an error, not
// a silent loss.
func TestCompareKeepsTheLiveSection(t *testing.T) {
	out := filepath.Join(t.TempDir(), "RESULTS.md")
	live := compare.KeptBegin + "\n## Live\n| a | b |\n" + compare.KeptEnd
	if err := os.WriteFile(out, []byte("# stale report\nold figures\n\n"+live+"\ntrailing words\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"compare", "--presets", "googlenet-p4", "--rhos", "0.4", "--requests", "1000", "--trace", "none",
		"--policies", "adhoc", "--out", out, "--plots-dir", "", "--quiet"}
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), args, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	md, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	got := string(md)
	if strings.Count(got, live) != 1 || strings.Contains(got, "old figures") || strings.Contains(got, "trailing words") || !strings.Contains(got, "| 0.4 |") {
		t.Fatalf("regenerated report:\n%s", got)
	}
	if err := os.WriteFile(out, []byte(compare.KeptBegin+"\nno end"), 0o600); err != nil {
		t.Fatal(err)
	}
	stderr.Reset()
	if code := run(context.Background(), args, &stdout, &stderr); code == 0 || !strings.Contains(stderr.String(), compare.KeptEnd) {
		t.Fatalf("exit %d, stderr %q: want an error naming the missing end marker", code, stderr.String())
	}
}

func TestCompareJSON(t *testing.T) {
	args := []string{"compare", "--presets", "googlenet-p4", "--rhos", "0.4", "--requests", "1000", "--trace", "none",
		"--policies", "adhoc,batchmonitor", "--out", "", "--plots-dir", "", "--json", "--quiet"}
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), args, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	var rep struct {
		Policies []string `json:"policies"`
		Grid     []struct {
			Rho     float64 `json:"rho"`
			Optimum struct {
				G float64 `json:"g"`
			} `json:"optimum"`
			Policies []struct {
				Policy string   `json:"policy"`
				Cost   float64  `json:"cost"`
				Gap    *float64 `json:"gap_pct"`
			} `json:"policies"`
		} `json:"grid"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, stdout.String())
	}
	if len(rep.Grid) != 1 || len(rep.Grid[0].Policies) != 2 || rep.Grid[0].Optimum.G <= 0 || rep.Grid[0].Policies[0].Gap == nil {
		t.Fatalf("report %+v", rep)
	}
}

func TestCompareUsageErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"rho out of range", []string{"--rhos", "0.5,1.2"}, "rho"},
		{"rho not a number", []string{"--rhos", "half"}, `"half" is not a number`},
		{"preset without energy", []string{"--presets", "resnet152-titanrtx"}, "no energy figures"},
		{"unknown preset", []string{"--presets", "nope"}, "--presets"},
		{"unknown policy", []string{"--policies", "adhoc,nope"}, "nope"},
		{"negative w2", []string{"--w2", "-1"}, "w2"},
		{"unknown trace", []string{"--trace", "nope"}, "--trace"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			args := append([]string{"compare", "--out", "", "--plots-dir", "", "--quiet"}, tt.args...)
			if code := run(context.Background(), args, &stdout, &stderr); code != 2 {
				t.Fatalf("exit %d, want 2 (stderr %q)", code, stderr.String())
			}
			if !strings.Contains(stderr.String(), tt.want) {
				t.Fatalf("stderr %q does not mention %q", stderr.String(), tt.want)
			}
		})
	}
}
