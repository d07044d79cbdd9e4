package main

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"strings"
	"testing"
)

// runSMDPCommand runs "ratebatch smdp args..." and decodes --json output
// into v when v is not nil.
func runSMDPCommand(t *testing.T, v any, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(context.Background(), append([]string{"smdp"}, args...), &out, &errb)
	if v != nil && code == 0 {
		if err := json.Unmarshal(out.Bytes(), v); err != nil {
			t.Fatalf("output is not one JSON object: %v\n%s", err, out.String())
		}
	}
	return code, out.String(), errb.String()
}

func TestSMDPJSONContract(t *testing.T) {
	var rep map[string]any
	code, _, errs := runSMDPCommand(t, &rep, "--preset", "googlenet-p4", "--rho", "0.4", "--w1", "1", "--w2", "1", "--smax", "80", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, k := range []string{"g", "delta", "iterations", "control_limit", "latency_ms", "power_w", "g_lower", "g_upper"} {
		if _, ok := rep[k].(float64); !ok {
			t.Errorf("key %s = %v, want a number", k, rep[k])
		}
	}
	pol, ok := rep["policy"].([]any)
	if !ok || len(pol) != 80+2 {
		t.Fatalf("policy = %v, want %d actions (states 0..80, then S_o)", rep["policy"], 82)
	}
	limit := int(rep["control_limit"].(float64))
	for s, a := range pol {
		if serves := a.(float64) > 0; serves != (s >= limit) {
			t.Fatalf("control_limit %d disagrees with policy %v at state %d", limit, pol, s)
		}
	}
	g, lat, pow, over := rep["g"].(float64), rep["latency_ms"].(float64), rep["power_w"].(float64), rep["overflow_cost"].(float64)
	if want := lat + pow + over; math.Abs(g-want) > 1e-9*g {
		t.Errorf("g %v != w1*latency_ms + w2*power_w + overflow_cost = %v", g, want)
	}
	if !(rep["delta"].(float64) < 0.001) || rep["converged"] != true {
		t.Errorf("delta %v converged %v", rep["delta"], rep["converged"])
	}
	if _, present := rep["policies"]; present {
		t.Error("policies present without --compare/--evaluate")
	}
}

func TestSMDPCompareTable(t *testing.T) {
	var rep struct {
		G        float64 `json:"g"`
		GLower   float64 `json:"g_lower"`
		GUpper   float64 `json:"g_upper"`
		BMBatch  int     `json:"batchmonitor_batch"`
		Policies []struct {
			Name   string   `json:"name"`
			G      float64  `json:"g"`
			GapPct float64  `json:"gap_pct"`
			PowerW *float64 `json:"power_w"`
		} `json:"policies"`
	}
	code, _, errs := runSMDPCommand(t, &rep, "--rho", "0.5", "--w2", "0.5", "--smax", "100", "--compare", "--evaluate", "static:8, limit:3", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var names []string
	for _, p := range rep.Policies {
		names = append(names, p.Name)
	}
	if got := strings.Join(names, " "); !strings.HasPrefix(got, "optimal adhoc batchmonitor static:32 limit:") || !strings.HasSuffix(got, " static:8 limit:3") {
		t.Fatalf("policies %q", got)
	}
	if rep.Policies[0].G != rep.G || rep.Policies[0].GapPct != 0 {
		t.Errorf("optimal row %+v, want g %v gap 0", rep.Policies[0], rep.G)
	}
	span := rep.GUpper - rep.GLower
	for _, p := range rep.Policies[1:] {
		if p.G < rep.G-span {
			t.Errorf("%s: g %v beats the optimum %v by more than the span %v", p.Name, p.G, rep.G, span)
		}
		if want := 100 * (p.G - rep.G) / rep.G; math.Abs(p.GapPct-want) > 1e-9 {
			t.Errorf("%s: gap %v%%, want %v%%", p.Name, p.GapPct, want)
		}
		if p.PowerW == nil {
			t.Errorf("%s: power_w null on a preset with energy figures", p.Name)
		}
	}
	if rep.BMBatch != 3 { // smallest b >= 2 with 0.5*mu(32) = 1.479 req/ms < mu(b): mu(3) = 1.521
		t.Errorf("batchmonitor_batch = %d, want 3", rep.BMBatch)
	}
}

func TestSMDPTextOutput(t *testing.T) {
	code, out, errs := runSMDPCommand(t, nil, "--preset", "resnet50-titanrtx", "--rate", "400", "--smax", "64", "--compare")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{"no energy figures", "control limit", "policy by state", "S_o", "gap %", "adhoc", "batchmonitor"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestSMDPNoEnergyGivesNullPower(t *testing.T) {
	var rep map[string]any
	code, _, errs := runSMDPCommand(t, &rep, "--preset", "resnet50-titanrtx", "--rho", "0.3", "--smax", "64", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if v, present := rep["power_w"]; !present || v != nil {
		t.Errorf("power_w = %v (present %v), want null", v, present)
	}
}

func TestSMDPUsageErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no load", []string{}, "--rho R or --rate"},
		{"both loads", []string{"--rho", "0.5", "--rate", "100"}, "only one"},
		{"unstable rho", []string{"--rho", "1.2"}, "unstable"},
		{"unstable rate", []string{"--rate", "5000"}, "unstable"},
		{"power weight without energy", []string{"--preset", "resnet50-titanrtx", "--rho", "0.5", "--w2", "1"}, "no published energy"},
		{"bad co", []string{"--rho", "0.5", "--co", "lots"}, "--co"},
		{"negative co", []string{"--rho", "0.5", "--co", "-3"}, "co"},
		{"smax below bmax", []string{"--rho", "0.5", "--smax", "10"}, "smax"},
		{"zero w1", []string{"--rho", "0.5", "--w1", "0"}, "w1"},
		{"unknown policy", []string{"--rho", "0.5", "--smax", "40", "--evaluate", "greedy"}, "unknown policy"},
		{"static too large", []string{"--rho", "0.5", "--smax", "40", "--evaluate", "static:64"}, "1..32"},
		{"custom model missing tau0", []string{"--alpha", "1", "--rho", "0.5"}, "--tau0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, errs := runSMDPCommand(t, nil, tt.args...)
			if code != 2 || !strings.Contains(errs, tt.want) {
				t.Errorf("exit %d, stderr %q; want 2 and %q", code, errs, tt.want)
			}
		})
	}
}

func TestSMDPWarnsOnSmallStateBound(t *testing.T) {
	code, _, errs := runSMDPCommand(t, nil, "--rho", "0.95", "--w2", "1", "--smax", "32", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if !strings.Contains(errs, "raise --smax") {
		t.Errorf("no delta warning on stderr: %q", errs)
	}
}

func TestSMDPInterruptedIsNotAUsageError(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var out, errb bytes.Buffer
	code := run(ctx, []string{"smdp", "--rho", "0.9", "--w2", "1"}, &out, &errb)
	if code != 1 || !strings.Contains(errb.String(), "interrupted") {
		t.Errorf("exit %d, stderr %q; want 1 and an interruption message", code, errb.String())
	}
}

func TestSMDPLatencyBudgetJSON(t *testing.T) {
	for _, tc := range []struct {
		budget   string
		budgetMs func(adhoc float64) float64
	}{
		{"1.10x", func(a float64) float64 { return 1.1 * a }},
		{"4ms", func(float64) float64 { return 4 }},
	} {
		var rep map[string]any
		code, _, errs := runSMDPCommand(t, &rep, "--preset", "googlenet-p4", "--rho", "0.3", "--latency-budget", tc.budget, "--json")
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", tc.budget, code, errs)
		}
		for _, k := range []string{"adhoc_mean_latency_ms", "mean_latency_ms", "power_w", "requests_per_joule", "w2", "mix"} {
			if _, ok := rep[k].(float64); !ok {
				t.Errorf("%s: key %s = %v, want a number", tc.budget, k, rep[k])
			}
		}
		limits, ok := rep["control_limit"].([]any)
		if !ok || len(limits) != 2 {
			t.Fatalf("%s: control_limit = %v, want the two policies' limits", tc.budget, rep["control_limit"])
		}
		lat, adhoc := rep["mean_latency_ms"].(float64), rep["adhoc_mean_latency_ms"].(float64)
		if want := tc.budgetMs(adhoc); math.Abs(lat-want) > 1e-6*want {
			t.Errorf("%s: mean_latency_ms %v, want the budget %v", tc.budget, lat, want)
		}
		if rpj, base := rep["requests_per_joule"].(float64), rep["adhoc_requests_per_joule"].(float64); !(rpj > base) {
			t.Errorf("%s: %v req/J not above ad-hoc's %v", tc.budget, rpj, base)
		}
		if m := rep["mix"].(float64); !(m > 0 && m < 1) {
			t.Errorf("%s: mix %v, want a share in (0, 1)", tc.budget, m)
		}
	}
}

func TestSMDPLatencyBudgetErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--preset", "googlenet-p4", "--rho", "0.3", "--latency-budget", "0.9x"}, "number >= 1"},
		{[]string{"--preset", "googlenet-p4", "--rho", "0.3", "--latency-budget", "fast"}, "duration"},
		{[]string{"--preset", "googlenet-p4", "--rho", "0.3", "--latency-budget", "1.1x", "--w2", "1"}, "drop --w2"},
		{[]string{"--preset", "resnet50-titanrtx", "--rho", "0.3", "--latency-budget", "1.1x"}, "no published energy"},
	} {
		code, _, errs := runSMDPCommand(t, nil, tc.args...)
		if code != 2 || !strings.Contains(errs, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tc.args, code, errs, tc.want)
		}
	}
	code, _, errs := runSMDPCommand(t, nil, "--preset", "googlenet-p4", "--rho", "0.3", "--latency-budget", "0.5ms")
	if code == 0 || !strings.Contains(errs, "below") {
		t.Errorf("infeasible budget: exit %d, stderr %q", code, errs)
	}
}

// --clients solves the closed loop: with a budget the optimum meets it
// (3 ms think time binds) and beats ad-hoc in requests per joule; with
// weights it reports one table; the text names the policies.
func TestSMDPFiniteClients(t *testing.T) {
	type figures struct {
		LatencyMs float64  `json:"latency_ms"`
		RPJ       *float64 `json:"requests_per_joule"`
		Energy    *float64 `json:"energy_per_request_mj"`
		RPS       float64  `json:"throughput_rps"`
	}
	var rep struct {
		figures
		Clients  int       `json:"clients"`
		BudgetMs *float64  `json:"budget_ms"`
		Binding  *bool     `json:"binding"`
		Mix      *float64  `json:"mix"`
		MixState *int      `json:"mix_state"`
		Adhoc    figures   `json:"adhoc"`
		Share    []float64 `json:"share"`
		Policies []struct {
			Policy       []int `json:"policy"`
			ControlLimit *int  `json:"control_limit"`
			figures
		} `json:"policies"`
	}
	code, _, errs := runSMDPCommand(t, &rep, "--preset", "googlenet-p4", "--bmax", "8", "--clients", "16", "--think", "3ms", "--latency-budget", "1.10x", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if rep.Clients != 16 || rep.BudgetMs == nil || rep.Binding == nil || !*rep.Binding || len(rep.Policies) != 2 || len(rep.Share) != 17 {
		t.Fatalf("report %+v", rep)
	}
	if want := 1.1 * rep.Adhoc.LatencyMs; math.Abs(*rep.BudgetMs-want) > 1e-9*want || math.Abs(rep.LatencyMs-want) > 1e-6*want {
		t.Errorf("budget %v ms, latency %v ms, want both 1.1 x ad-hoc's %v", *rep.BudgetMs, rep.LatencyMs, rep.Adhoc.LatencyMs)
	}
	if rep.RPJ == nil || rep.Adhoc.RPJ == nil || !(*rep.RPJ > *rep.Adhoc.RPJ) || math.Abs(*rep.RPJ - 1000 / *rep.Energy) > 1e-9**rep.RPJ {
		t.Errorf("req/J %v vs ad-hoc %v (energy %v mJ/req)", rep.RPJ, rep.Adhoc.RPJ, rep.Energy)
	}
	if d := *rep.MixState; rep.Policies[0].Policy[d] == rep.Policies[1].Policy[d] || !(*rep.Mix > 0 && *rep.Mix < 1) || rep.Share[d] != *rep.Mix {
		t.Errorf("mix %v in state %d: policies %v / %v", *rep.Mix, d, rep.Policies[0].Policy, rep.Policies[1].Policy)
	}
	if !(rep.Policies[0].LatencyMs <= rep.LatencyMs && rep.Policies[1].LatencyMs > rep.LatencyMs) {
		t.Errorf("policies' latencies %v, %v do not straddle %v", rep.Policies[0].LatencyMs, rep.Policies[1].LatencyMs, rep.LatencyMs)
	}

	var w map[string]any
	code, _, errs = runSMDPCommand(t, &w, "--preset", "googlenet-p4", "--bmax", "8", "--clients", "4", "--think", "0.3ms", "--w2", "0.5", "--json")
	if code != 0 {
		t.Fatalf("weights: exit %d: %s", code, errs)
	}
	pols, _ := w["policies"].([]any)
	obj, _ := w["objective"].(float64)
	lat, _ := w["latency_ms"].(float64)
	e, _ := w["energy_per_request_mj"].(float64)
	if len(pols) != 1 || math.Abs(obj-(lat+0.5*e)) > 1e-9*obj {
		t.Errorf("weights: policies %v, objective %v, latency %v, energy %v", pols, obj, lat, e)
	}

	code, out, errs := runSMDPCommand(t, nil, "--preset", "googlenet-p4", "--bmax", "8", "--clients", "8", "--think", "0.3ms", "--latency-budget", "1.10x")
	if code != 0 {
		t.Fatalf("text: exit %d: %s", code, errs)
	}
	for _, want := range []string{"closed loop: 8 clients", "ad-hoc:", "does not bind", "control limit 8", "mJ/req", "req/J", "req/s"} {
		if !strings.Contains(out, want) {
			t.Errorf("text output lacks %q:\n%s", want, out)
		}
	}
}

func TestSMDPFiniteUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--clients", "8"}, "go together"},
		{[]string{"--think", "1ms"}, "go together"},
		{[]string{"--clients", "0", "--think", "1ms"}, "clients must be in 1..1024"},
		{[]string{"--clients", "8", "--think", "0s"}, "think time"},
		{[]string{"--clients", "8", "--think", "1ms", "--rho", "0.5"}, "drop --rho"},
		{[]string{"--clients", "8", "--think", "1ms", "--latency-budget", "1.1x", "--w2", "1"}, "drop --w2"},
		{[]string{"--clients", "8", "--think", "1ms", "--latency-budget", "0.9x"}, "number >= 1"},
		{[]string{"--preset", "resnet50-titanrtx", "--clients", "8", "--think", "1ms", "--latency-budget", "1.1x"}, "no published energy"},
		{[]string{"--preset", "resnet50-titanrtx", "--clients", "8", "--think", "1ms", "--w2", "1"}, "no published energy"},
	} {
		code, _, errs := runSMDPCommand(t, nil, tc.args...)
		if code != 2 || !strings.Contains(errs, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tc.args, code, errs, tc.want)
		}
	}
}
