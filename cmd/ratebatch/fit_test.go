package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeTempFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestFitJSON(t *testing.T) {
	var b strings.Builder
	b.WriteString("batch_size,latency_ms\n")
	for _, n := range []int{1, 2, 4, 8, 16, 32} {
		for r := 0; r < 3; r++ {
			fmt.Fprintf(&b, "%d,%g\n", n, 0.3051*float64(n)+1.052+0.001*float64(r-1))
		}
	}
	b.WriteString("8,40\n") // a straggler
	path := writeTempFile(t, "profile.csv", b.String())
	code, out, errs := runCmd(t, "fit", "--csv", path, "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var f struct {
		Alpha    float64 `json:"alpha_ms"`
		Tau0     float64 `json:"tau0_ms"`
		R2       float64 `json:"r2"`
		N        int     `json:"n"`
		Outliers int     `json:"outliers"`
		Rejected []struct {
			Sample  int     `json:"sample"`
			Batch   int     `json:"batch_size"`
			Latency float64 `json:"latency_ms"`
		} `json:"rejected"`
	}
	if err := json.Unmarshal([]byte(out), &f); err != nil {
		t.Fatal(err)
	}
	if math.Abs(f.Alpha-0.3051) > 1e-3 || math.Abs(f.Tau0-1.052) > 1e-2 || f.R2 < 0.999 || f.N != 19 || f.Outliers != 1 {
		t.Fatalf("fit %+v, want alpha 0.3051, tau0 1.052, r2 ~1, n 19, 1 outlier", f)
	}

	if len(f.Rejected) != 1 || f.Rejected[0].Sample != 19 || f.Rejected[0].Batch != 8 || f.Rejected[0].Latency != 40 {
		t.Fatalf("rejected %+v, want sample 19 (batch 8, 40 ms)", f.Rejected)
	}

	code, text, _ := runCmd(t, "fit", "--csv", path)
	if code != 0 || !strings.Contains(text, "n 19") || !strings.Contains(text, "alpha 0.305") || !strings.Contains(text, "rejected: sample 19 (batch 8, 40 ms)") {
		t.Fatalf("exit %d, text output:\n%s", code, text)
	}
}

func TestFitErrors(t *testing.T) {
	tests := []struct {
		name    string
		args    func(t *testing.T) []string
		code    int
		message string
	}{
		{"no csv", func(*testing.T) []string { return nil }, 2, "--csv FILE is required"},
		{"missing file", func(*testing.T) []string { return []string{"--csv", "/nonexistent.csv"} }, 1, "reading the samples"},
		{"bad row", func(t *testing.T) []string {
			return []string{"--csv", writeTempFile(t, "x.csv", "batch_size,latency_ms\n1,2\n2,x\n")}
		}, 1, "line 3"},
		{"one size", func(t *testing.T) []string {
			return []string{"--csv", writeTempFile(t, "x.csv", "batch_size,latency_ms\n4,2\n4,3\n")}
		}, 1, "same batch size"},
		{"empty", func(t *testing.T) []string {
			return []string{"--csv", writeTempFile(t, "x.csv", "batch_size,latency_ms\n")}
		}, 1, "no samples"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, errs := runCmd(t, append([]string{"fit"}, tt.args(t)...)...)
			if code != tt.code || !strings.Contains(errs, tt.message) {
				t.Fatalf("exit %d stderr %q, want exit %d mentioning %q", code, errs, tt.code, tt.message)
			}
		})
	}
}
