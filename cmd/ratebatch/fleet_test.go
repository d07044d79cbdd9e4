package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
)

func TestPlanFleetCommand(t *testing.T) {
	var plans []struct {
		GPUs           int      `json:"gpus"`
		LatencyBoundMs float64  `json:"latency_bound_ms"`
		RPJ            *float64 `json:"min_requests_per_joule"`
	}
	code, _, stderr := runPlanCommand(t, &plans, "--fleet", "--preset", "googlenet-p4", "--rate", "20000", "--latency-ms", "5", "--idle-watts", "20", "--json")
	if code != 0 || len(plans) != 3 || plans[0].GPUs < 1 || plans[0].LatencyBoundMs > 5 || plans[0].RPJ == nil {
		t.Fatalf("code %d plans %+v stderr %s", code, plans, stderr)
	}
	for _, args := range [][]string{
		{"--fleet", "--preset", "googlenet-p4", "--rate", "20000"},
		{"--fleet", "--preset", "googlenet-p4", "--rho", "0.5", "--latency-ms", "5"},
		{"--fleet", "--preset", "googlenet-p4", "--rate", "20000", "--latency-ms", "1"},
	} {
		if code, _, stderr := runPlanCommand(t, nil, args...); code != 2 || !strings.Contains(stderr, "ratebatch plan") {
			t.Errorf("%q: code %d, stderr %q; want a usage error", args, code, stderr)
		}
	}
}

func TestSimReplicas(t *testing.T) {
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"sim", "--replicas", "3", "--policy", "batchmonitor+", "--preset", "googlenet-p4",
		"--replica-speeds", "1,1,0.5", "--rho", "0.7", "--requests", "40000", "--balancer", "rr,orca-wrr", "--json"}, &out, &errb)
	if code != 0 {
		t.Fatalf("code %d: %s", code, errb.String())
	}
	var res []struct {
		Balancer string `json:"balancer"`
		Requests int    `json:"requests"`
		Replicas []struct {
			Share float64 `json:"share"`
		} `json:"replicas"`
	}
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatal(err)
	}
	if len(res) != 2 || res[0].Balancer != "rr" || res[1].Balancer != "orca-wrr" || res[1].Requests != 40000 || len(res[1].Replicas) != 3 {
		t.Fatalf("%+v", res)
	}
	if s := res[1].Replicas; !(s[2].Share < s[0].Share*0.7) {
		t.Errorf("orca-wrr shares %+v: the half-speed replica should get about half", s)
	}
	for _, args := range [][]string{
		{"--replicas", "3", "--policy", "adhoc,maxbatch", "--rate", "100"},
		{"--replicas", "3", "--policy", "adhoc", "--rate", "100", "--replica-speeds", "1,2"},
		{"--replicas", "3", "--policy", "adhoc", "--rate", "100", "--balancer", "random"},
		{"--replicas", "3", "--policy", "adhoc", "--trace", "paper300"},
	} {
		errb.Reset()
		if code := run(context.Background(), append([]string{"sim"}, args...), &out, &errb); code != 2 || !strings.Contains(errb.String(), "ratebatch sim") {
			t.Errorf("%q: code %d, stderr %q; want a usage error", args, code, errb.String())
		}
	}
}
