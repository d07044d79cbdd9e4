package orca

import (
	"encoding/base64"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	v3 "github.com/cncf/xds/go/xds/data/orca/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/ratebatch/ratebatch/policy/batchcost"
)

// parseText reads Envoy's native TEXT form into the published proto, as
// Envoy's parser does: comma-separated name=value, named_metrics.NAME.
func parseText(t *testing.T, v string) *v3.OrcaLoadReport {
	t.Helper()
	body, ok := strings.CutPrefix(v, "TEXT ")
	if !ok {
		t.Fatalf("%q: no TEXT prefix", v)
	}
	pb := &v3.OrcaLoadReport{NamedMetrics: map[string]float64{}}
	seen := map[string]bool{}
	for _, kv := range strings.Split(body, ",") {
		k, val, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok {
			t.Fatalf("%q: %q is not name=value", v, kv)
		}
		if seen[k] {
			t.Fatalf("%q: %s twice", v, k)
		}
		seen[k] = true
		f, err := strconv.ParseFloat(val, 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			t.Fatalf("%q: %s=%q is not a finite number", v, k, val)
		}
		switch {
		case strings.HasPrefix(k, "named_metrics."):
			pb.NamedMetrics[strings.TrimPrefix(k, "named_metrics.")] = f
		case k == "application_utilization":
			pb.ApplicationUtilization = f
		case k == "cpu_utilization":
			pb.CpuUtilization = f
		case k == "rps_fractional":
			pb.RpsFractional = f
		case k == "eps":
			pb.Eps = f
		default:
			t.Fatalf("%q: %s is not a field Envoy reads", v, k)
		}
	}
	return pb
}

// Parse reads any of the three header forms into the published proto.
func Parse(t *testing.T, v string) *v3.OrcaLoadReport {
	t.Helper()
	switch {
	case strings.HasPrefix(v, "JSON "):
		pb := &v3.OrcaLoadReport{}
		if err := protojson.Unmarshal([]byte(strings.TrimPrefix(v, "JSON ")), pb); err != nil {
			t.Fatalf("%q: %v", v, err)
		}
		return pb
	case strings.HasPrefix(v, "BIN "):
		b, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(v, "BIN "))
		if err != nil {
			t.Fatalf("%q: %v", v, err)
		}
		pb := &v3.OrcaLoadReport{}
		if err := proto.Unmarshal(b, pb); err != nil {
			t.Fatalf("%q: %v", v, err)
		}
		return pb
	}
	return parseText(t, v)
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-4*math.Max(1, math.Abs(b)) }

func TestReportForms(t *testing.T) {
	// Two models on one GPU: tau(b) = b + 10 ms, B_max 10, one instance:
	// mu = 10 rows / 20 ms = 500 rows/s; 100 rows/s is rho 0.2. The second,
	// 2 instances of tau(b) = 2b + 4 ms, B_max 8: mu = 2*8/20ms = 800/s;
	// 200 rows/s is rho 0.25.
	models := []Model{
		{Name: "a", RatePerSec: 100, BatchSize: 4, MaxBatch: 10, Instances: 1, Latency: batchcost.Latency{AlphaMs: 1, Tau0Ms: 10}, LineKnown: true, QueuedRows: 3},
		{Name: "b", RatePerSec: 200, BatchSize: 1, MaxBatch: 8, Instances: 2, Latency: batchcost.Latency{AlphaMs: 2, Tau0Ms: 4}, LineKnown: true, QueuedRows: 2},
	}
	r := New(Options{Models: func() []Model { return models }, JoulesPerRequest: func() (float64, bool) { return 0.25, true }})
	want := &v3.OrcaLoadReport{ApplicationUtilization: 0.45, RpsFractional: 300, NamedMetrics: map[string]float64{
		MetricQueueRows: 5, MetricBatchSize: (100*4 + 200*1) / 300.0, MetricCapacityRPS: 300 / 0.45, MetricJoulesPerRequest: 0.25}}
	for _, format := range []string{"", "text", "TEXT", "nonsense", "json", "JSON", "bin", "BIN", "binary"} {
		t.Run(format, func(t *testing.T) {
			v := r.HeaderValue([]byte(format))
			wantPrefix := map[string]string{"json": "JSON ", "bin": "BIN ", "binary": "BIN "}[strings.ToLower(format)]
			if wantPrefix == "" {
				wantPrefix = "TEXT "
			}
			if !strings.HasPrefix(v, wantPrefix) {
				t.Fatalf("format %q: %q does not start with %q", format, v, wantPrefix)
			}
			got := Parse(t, v)
			if !near(got.ApplicationUtilization, want.ApplicationUtilization) || !near(got.RpsFractional, want.RpsFractional) {
				t.Errorf("utilization %v rps %v, want %v %v", got.ApplicationUtilization, got.RpsFractional, want.ApplicationUtilization, want.RpsFractional)
			}
			if len(got.NamedMetrics) != len(want.NamedMetrics) {
				t.Errorf("named metrics %v, want %v", got.NamedMetrics, want.NamedMetrics)
			}
			for k, w := range want.NamedMetrics {
				if !near(got.NamedMetrics[k], w) {
					t.Errorf("%s = %v, want %v", k, got.NamedMetrics[k], w)
				}
			}
		})
	}
	sm := r.ServerMetrics()
	if !near(sm.AppUtilization, 0.45) || !near(sm.QPS, 300) || sm.CPUUtilization != -1 || sm.NamedMetrics[MetricQueueRows] != 5 {
		t.Errorf("ServerMetrics %+v", sm)
	}
	sm.NamedMetrics[MetricQueueRows] = 99 // a copy: the next caller's is intact
	if r.ServerMetrics().NamedMetrics[MetricQueueRows] != 5 {
		t.Error("ServerMetrics hands out the shared map")
	}
}

func TestUnknownLineLeavesUtilizationOut(t *testing.T) {
	// No fit yet (the line is zero): utilization is absent, not 0, so that a
	// weighted round robin keeps its default weight instead of reading an
	// idle replica; rate and queue are still reported.
	r := New(Options{Models: func() []Model {
		return []Model{{Name: "a", RatePerSec: 50, BatchSize: 1, MaxBatch: 8, Instances: 1, QueuedRows: 1}}
	}})
	v := r.HeaderValue(nil)
	if strings.Contains(v, "application_utilization") || strings.Contains(v, MetricCapacityRPS) || strings.Contains(v, MetricJoulesPerRequest) {
		t.Errorf("%q reports what is not known", v)
	}
	if got := Parse(t, v); got.RpsFractional != 50 || got.NamedMetrics[MetricQueueRows] != 1 {
		t.Errorf("%q", v)
	}
	if sm := r.ServerMetrics(); sm.AppUtilization != -1 {
		t.Errorf("AppUtilization %v, want unset (-1)", sm.AppUtilization)
	}
}

func TestReportRecomputedAfterMaxAge(t *testing.T) {
	now := time.Unix(0, 0)
	calls := 0
	rate := 10.0
	r := New(Options{MaxAge: time.Second, Now: func() time.Time { return now },
		Models: func() []Model {
			calls++
			return []Model{{RatePerSec: rate, MaxBatch: 1, Instances: 1, Latency: batchcost.Latency{Tau0Ms: 10}, LineKnown: true}}
		}})
	if got := r.Report().ApplicationUtilization; !near(got, 0.1) {
		t.Fatalf("utilization %v, want 0.1", got)
	}
	rate = 50
	now = now.Add(999 * time.Millisecond)
	r.HeaderValue(nil)
	r.ServerMetrics()
	if calls != 1 || !near(r.Report().ApplicationUtilization, 0.1) {
		t.Fatalf("recomputed within MaxAge: %d calls", calls)
	}
	now = now.Add(time.Millisecond)
	if got := r.Report().ApplicationUtilization; !near(got, 0.5) || calls != 2 {
		t.Fatalf("after MaxAge: utilization %v (%d calls), want 0.5", got, calls)
	}
}

func TestConcurrentReaders(t *testing.T) {
	r := New(Options{MaxAge: time.Nanosecond, Models: func() []Model {
		return []Model{{RatePerSec: 1, MaxBatch: 1, Instances: 1, Latency: batchcost.Latency{Tau0Ms: 1}, LineKnown: true}}
	}})
	done := make(chan struct{})
	for range 4 {
		go func() {
			defer func() { done <- struct{}{} }()
			for range 200 {
				if v := r.HeaderValue([]byte("bin")); !strings.HasPrefix(v, "BIN ") {
					t.Errorf("%q", v)
					return
				}
				r.ServerMetrics()
			}
		}()
	}
	for range 4 {
		<-done
	}
}

// BenchmarkHeaderValue is what an answer pays for its header while the
// report is fresh (the common case: one recompute per MaxAge).
func BenchmarkHeaderValue(b *testing.B) {
	r := New(Options{MaxAge: time.Hour, Models: func() []Model {
		return []Model{{RatePerSec: 100, BatchSize: 4, MaxBatch: 8, Instances: 1, LineKnown: true, Latency: batchcost.Latency{AlphaMs: 1, Tau0Ms: 2}}}
	}})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if len(r.HeaderValue(nil)) == 0 {
				b.Fatal("empty")
			}
		}
	})
}
