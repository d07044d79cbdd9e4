package main

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ratebatch/ratebatch/config"
	"github.com/ratebatch/ratebatch/lab/preset"
)

func runCmd(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestSimJSONContract(t *testing.T) {
	tests := []struct {
		name      string
		args      []string
		energy    bool
		wantBatch float64 // exact mean batch when > 0
	}{
		{"preset with energy", []string{"--preset", "googlenet-p4", "--rate", "500"}, true, 0},
		{"preset without energy", []string{"--preset", "resnet50-titanrtx", "--rho", "0.5"}, false, 0},
		{"custom model with energy", []string{"--alpha", "1", "--tau0", "2", "--beta", "3", "--zeta0", "4", "--bmax", "8", "--rate", "100"}, true, 0},
		{"custom model static", []string{"--alpha", "1", "--tau0", "2", "--rate", "1000", "--policy", "static", "--batch", "4"}, false, 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"sim", "--policy", "batchmonitor", "--requests", "5000", "--json"}, tt.args...)
			code, out, errs := runCmd(t, args...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errs)
			}
			var m map[string]any
			if err := json.Unmarshal([]byte(out), &m); err != nil {
				t.Fatalf("output is not one JSON object: %v\n%s", err, out)
			}
			for _, k := range []string{"mean_latency_ms", "p50_latency_ms", "p99_latency_ms", "mean_batch_size", "throughput_rps"} {
				v, ok := m[k].(float64)
				if !ok || !(v > 0) {
					t.Errorf("key %s = %v, want a positive number", k, m[k])
				}
			}
			rpj, present := m["requests_per_joule"]
			if !present {
				t.Fatal("key requests_per_joule missing")
			}
			if tt.energy != (rpj != nil) {
				t.Fatalf("requests_per_joule = %v, want energy %v", rpj, tt.energy)
			}
			if m["requests"].(float64) != 5000 {
				t.Fatalf("requests = %v, want 5000", m["requests"])
			}
			if tt.wantBatch > 0 && m["mean_batch_size"].(float64) != tt.wantBatch {
				t.Fatalf("mean batch %v, want %v", m["mean_batch_size"], tt.wantBatch)
			}
		})
	}
}

func TestSimRhoSetsRate(t *testing.T) {
	code, out, errs := runCmd(t, "sim", "--policy", "adhoc", "--preset", "googlenet-p4", "--rho", "0.5", "--requests", "20000", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var r struct {
		Throughput float64 `json:"throughput_rps"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	p, _ := preset.Lookup("googlenet-p4")
	want := 0.5 * 1000 * p.MuPerMs(p.MaxBatch)
	if math.Abs(r.Throughput-want) > 0.03*want {
		t.Fatalf("throughput %v, want about rho*mu(B_max) = %v", r.Throughput, want)
	}
}

func TestSimAllPolicies(t *testing.T) {
	code, out, errs := runCmd(t, "sim", "--policy", "all", "--trace", "paper300", "--requests", "3000", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var rs []map[string]any
	if err := json.Unmarshal([]byte(out), &rs); err != nil {
		t.Fatalf("want a JSON array: %v", err)
	}
	if len(rs) < 4 {
		t.Fatalf("%d results, want at least the 4 built-ins", len(rs))
	}
	for i, want := range []string{"adhoc", "batchmonitor", "maxbatch", "static"} {
		if rs[i]["policy"] != want {
			t.Fatalf("result %d is %v, want %s", i, rs[i]["policy"], want)
		}
	}
	// Same seed, same arrivals: every policy completes the same requests.
	for _, r := range rs {
		if r["requests"] != rs[0]["requests"] {
			t.Fatalf("policy %v completed %v requests, adhoc %v", r["policy"], r["requests"], rs[0]["requests"])
		}
	}

	code, table, errs := runCmd(t, "sim", "--policy", "adhoc,static", "--rate", "200", "--requests", "2000")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{"googlenet-p4", "mean ms", "req/J", "adhoc", "static"} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
	if strings.Contains(table, "batchmonitor") {
		t.Errorf("table has a policy not asked for:\n%s", table)
	}
}

// sim without --policy simulates the policy serve runs without one.
func TestSimDefaultPolicyIsServes(t *testing.T) {
	args := []string{"sim", "--preset", "googlenet-p4", "--rho", "0.5", "--requests", "3000", "--json"}
	code, out, errs := runCmd(t, args...)
	if code != 0 {
		t.Fatalf("sim without --policy: exit %d: %s", code, errs)
	}
	var r struct {
		Policy string `json:"policy"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if want := config.Default().Policy.Name; r.Policy != want {
		t.Errorf("sim without --policy simulated %q, serve's default is %q", r.Policy, want)
	}
	_, named, _ := runCmd(t, append(args, "--policy", config.Default().Policy.Name)...)
	if named != out {
		t.Errorf("sim without --policy differs from --policy %s:\n%s\n%s", config.Default().Policy.Name, out, named)
	}
}

func TestSimDeterministic(t *testing.T) {
	args := []string{"sim", "--policy", "batchmonitor", "--trace", "paper300", "--seed", "7", "--jitter", "0.1", "--json"}
	_, a, _ := runCmd(t, args...)
	_, b, _ := runCmd(t, args...)
	if a == "" || a != b {
		t.Fatalf("two runs with one seed differ:\n%s\n%s", a, b)
	}
	args[6] = "8"
	if _, c, _ := runCmd(t, args...); c == a {
		t.Fatal("another seed gave the same output")
	}
}

func TestSimTraceFileAndSeries(t *testing.T) {
	dir := t.TempDir()
	tr := filepath.Join(dir, "load.csv")
	if err := os.WriteFile(tr, []byte("time_s,rate_rps\n0,100\n5,300\n10,0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	series := filepath.Join(dir, "series.csv")
	code, out, errs := runCmd(t, "sim", "--policy", "batchmonitor,adhoc", "--trace", tr, "--series-csv", series, "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var rs []map[string]any
	if err := json.Unmarshal([]byte(out), &rs); err != nil || len(rs) != 2 {
		t.Fatalf("want 2 results: %v\n%s", err, out)
	}
	if n := rs[0]["requests"].(float64); math.Abs(n-2000) > 4*math.Sqrt(2000) {
		t.Fatalf("%v requests, want the trace's 2000 ± 4 sd", n)
	}
	data, err := os.ReadFile(series)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if !strings.HasPrefix(lines[0], "policy,start_s,arrivals,rate_rps,batch_size") || len(lines) < 1+2*10 {
		t.Fatalf("series CSV has %d lines:\n%s", len(lines), data)
	}

	// --speedup plays the trace faster at the same rates, as demo's does:
	// half the arrivals over half the time.
	code, out, errs = runCmd(t, "sim", "--policy", "adhoc", "--trace", tr, "--speedup", "2", "--json")
	if code != 0 {
		t.Fatalf("speedup: exit %d: %s", code, errs)
	}
	var r map[string]any
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	if n := r["requests"].(float64); math.Abs(n-1000) > 4*math.Sqrt(1000) {
		t.Fatalf("speedup 2: %v requests, want the trace's 1000 ± 4 sd", n)
	}
}

func TestSimErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no arrivals", []string{"--policy", "adhoc"}, 2, "one of --rate, --rho or --trace"},
		{"two arrivals", []string{"--policy", "adhoc", "--rate", "1", "--rho", "0.5"}, 2, "only one of"},
		{"empty policy", []string{"--policy", "", "--rate", "1"}, 2, "name a policy"},
		{"unknown policy", []string{"--policy", "fifo", "--rate", "1"}, 2, `unknown policy "fifo"`},
		{"unknown preset", []string{"--policy", "adhoc", "--rate", "1", "--preset", "x"}, 2, "unknown preset"},
		{"custom needs tau0", []string{"--policy", "adhoc", "--rate", "1", "--alpha", "1"}, 2, "--alpha and --tau0"},
		{"bad alpha", []string{"--policy", "adhoc", "--rate", "1", "--alpha", "-1", "--tau0", "1"}, 2, "alpha must be > 0"},
		{"energy on a preset without", []string{"--policy", "adhoc", "--rate", "1", "--preset", "resnet50-titanrtx", "--beta", "1"}, 2, "no energy figures"},
		{"bad rate", []string{"--policy", "adhoc", "--rate", "-3"}, 2, "--rate: arrival rate must be a finite number > 0"},
		{"bad rho", []string{"--policy", "adhoc", "--rho", "-0.5"}, 2, "--rho must be > 0"},
		{"bad window", []string{"--policy", "adhoc", "--rate", "1", "--window", "1us"}, 2, "--window: window must be at least"},
		{"bad sla", []string{"--policy", "adhoc", "--rate", "1", "--sla-ms", "-1"}, 2, "--sla-ms: SLA must be >= 0"},
		{"bad instances", []string{"--policy", "adhoc", "--rate", "1", "--instances", "-2"}, 2, "--instances"},
		{"unknown trace", []string{"--policy", "adhoc", "--trace", "day"}, 2, "paper300"},
		{"missing trace file", []string{"--policy", "adhoc", "--trace", "/nonexistent/x.csv"}, 2, "reading the trace"},
		{"scale without trace", []string{"--policy", "adhoc", "--rate", "1", "--trace-scale", "2"}, 2, "need --trace"},
		{"speedup without trace", []string{"--policy", "adhoc", "--rate", "1", "--speedup", "2"}, 2, "need --trace"},
		{"bad jitter", []string{"--policy", "adhoc", "--rate", "1", "--jitter", "1"}, 2, "--jitter"},
		{"static batch", []string{"--policy", "static", "--rate", "1", "--batch", "0"}, 2, "batch size must be >= 1"},
		{"bad delay", []string{"--policy", "maxbatch", "--rate", "1", "--max-queue-delay-ms", "0"}, 2, "--max-queue-delay-ms"},
		{"bad flag", []string{"--policy", "adhoc", "--rate", "x"}, 2, "invalid value"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, errs := runCmd(t, append([]string{"sim"}, tt.args...)...)
			if code != tt.code || !strings.Contains(errs, tt.want) {
				t.Fatalf("exit %d stderr %q, want exit %d mentioning %q", code, errs, tt.code, tt.want)
			}
		})
	}
}

func TestSimHelpDescribesTrace(t *testing.T) {
	code, _, errs := runCmd(t, "sim", "-h")
	if code != 0 || !strings.Contains(errs, "midday peak of 240 req/s") {
		t.Fatalf("exit %d; help should say how paper300 is shaped:\n%s", code, errs)
	}
}
