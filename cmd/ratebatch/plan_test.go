package main

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"strings"
	"testing"
)

func runPlanCommand(t *testing.T, v any, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(context.Background(), append([]string{"plan"}, args...), &out, &errb)
	if v != nil && code == 0 {
		if err := json.Unmarshal(out.Bytes(), v); err != nil {
			t.Fatalf("output is not one JSON object: %v\n%s", err, out.String())
		}
	}
	return code, out.String(), errb.String()
}

func TestPlanJSONContract(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		wantRho float64
		energy  bool
		target  float64 // > 0: max_rate_rps expected
	}{
		{"rate", []string{"--alpha", "0.5", "--tau0", "2", "--rate", "1000"}, 0.5, false, 0},
		{"rho", []string{"--alpha", "0.5", "--tau0", "2", "--rho", "0.25"}, 0.25, false, 0},
		{"preset with energy", []string{"--preset", "googlenet-p4", "--rate", "2000"}, 2 * 0.3051, true, 0},
		{"latency target only", []string{"--preset", "resnet50-p4", "--latency-ms", "12"}, -1, true, 12},
		{"target and rate", []string{"--alpha", "1.182", "--tau0", "2.396", "--rate", "300", "--latency-ms", "20"}, 0.3546, false, 20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var rep map[string]any
			code, _, errs := runPlanCommand(t, &rep, append(tt.args, "--json")...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errs)
			}
			for _, k := range []string{"phi_ms", "phi0_ms", "phi1_ms", "rho", "min_mean_batch"} {
				if _, ok := rep[k].(float64); !ok {
					t.Fatalf("key %s = %v, want a number", k, rep[k])
				}
			}
			phi, phi0, phi1 := rep["phi_ms"].(float64), rep["phi0_ms"].(float64), rep["phi1_ms"].(float64)
			if phi != math.Min(phi0, phi1) {
				t.Errorf("phi_ms %v != min(%v, %v)", phi, phi0, phi1)
			}
			if tt.wantRho >= 0 && math.Abs(rep["rho"].(float64)-tt.wantRho) > 1e-12 {
				t.Errorf("rho = %v, want %v", rep["rho"], tt.wantRho)
			}
			if rpj, present := rep["min_requests_per_joule"]; !present || (rpj != nil) != tt.energy {
				t.Errorf("min_requests_per_joule = %v (present %v), want energy %v", rpj, present, tt.energy)
			}
			maxRate, has := rep["max_rate_rps"].(float64)
			if has != (tt.target > 0) {
				t.Fatalf("max_rate_rps = %v, want it only with --latency-ms", rep["max_rate_rps"])
			}
			if tt.target > 0 && !strings.Contains(strings.Join(tt.args, " "), "--rate") {
				// Bounds are reported at the answer: phi meets the target.
				if math.Abs(phi-tt.target) > 1e-6*tt.target || math.Abs(rep["rate_rps"].(float64)-maxRate) > 1e-9*maxRate {
					t.Errorf("at max rate %v: phi %v, want %v", maxRate, phi, tt.target)
				}
			}
		})
	}
}

func TestPlanText(t *testing.T) {
	code, out, errs := runPlanCommand(t, nil, "--preset", "resnet50-titanrtx", "--latency-ms", "30")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{"highest rate with mean latency <= 30 ms", "phi0", "no energy figures"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestPlanUsageErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"nothing to plan", []string{"--alpha", "1", "--tau0", "1"}, "--latency-ms"},
		{"rate and rho", []string{"--rate", "10", "--rho", "0.1"}, "only one"},
		{"bmax", []string{"--rate", "10", "--bmax", "8"}, "unbounded"},
		{"unstable rho", []string{"--rho", "1"}, "unstable"},
		{"unstable rate", []string{"--alpha", "1", "--tau0", "1", "--rate", "1000"}, "unstable"},
		{"negative rate", []string{"--rate", "-5"}, "--rate"},
		{"target too low", []string{"--latency-ms", "1"}, "lone request"},
		{"custom without tau0", []string{"--alpha", "1", "--rate", "10"}, "--tau0"},
		{"bad alpha", []string{"--preset", "googlenet-p4", "--alpha", "-1", "--rate", "10"}, "alpha"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, errs := runPlanCommand(t, nil, tt.args...)
			if code != 2 || !strings.Contains(errs, tt.want) {
				t.Errorf("exit %d, stderr %q; want 2 and %q", code, errs, tt.want)
			}
		})
	}
}
