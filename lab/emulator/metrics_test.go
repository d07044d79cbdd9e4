package emulator

import (
	"io"
	"math"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/ratebatch/ratebatch/lab/preset"
	"github.com/ratebatch/ratebatch/policy/batchcost"
)

// gather returns metric families by name from the server's registry.
func gather(t *testing.T, s *Server) map[string]*dto.MetricFamily {
	t.Helper()
	mfs, err := s.Registry().Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	out := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		out[mf.GetName()] = mf
	}
	return out
}

// value returns the sample of family name whose labels include want.
func value(t *testing.T, fams map[string]*dto.MetricFamily, name string, want map[string]string) (float64, dto.MetricType) {
	t.Helper()
	mf, ok := fams[name]
	if !ok {
		t.Fatalf("metric %s is not exported", name)
	}
next:
	for _, m := range mf.GetMetric() {
		for k, v := range want {
			found := false
			for _, lp := range m.GetLabel() {
				if lp.GetName() == k && lp.GetValue() == v {
					found = true
				}
			}
			if !found {
				continue next
			}
		}
		switch mf.GetType() {
		case dto.MetricType_COUNTER:
			return m.GetCounter().GetValue(), mf.GetType()
		case dto.MetricType_GAUGE:
			return m.GetGauge().GetValue(), mf.GetType()
		}
	}
	t.Fatalf("metric %s has no sample with labels %v", name, want)
	return 0, 0
}

func TestTritonMetrics(t *testing.T) {
	p, err := preset.Lookup("googlenet-p4")
	if err != nil {
		t.Fatal(err)
	}
	clock := newFakeClock()
	start := clock.Now()
	s, ts := newTestServer(t, Options{Profile: p, TimeScale: 1, Clock: clock, IdleWatts: 10, PowerLimitWatts: 75, GPUUUID: "GPU-test"})

	rows := []int{3, 5}
	for i, r := range rows {
		if res := post(t, ts.URL+"/v2/models/simple/infer", requestFor(t, SimpleModel, r, i), -1); res.status != 200 {
			t.Fatalf("%d %s", res.status, res.errMsg)
		}
	}
	post(t, ts.URL+"/v2/models/simple/infer", []byte("{"), -1) // one failure
	clock.Advance(3 * time.Second)

	fams := gather(t, s)
	simple := map[string]string{"model": "simple", "version": "1"}
	gpu := map[string]string{"gpu_uuid": "GPU-test"}
	inferUS := float64((wantExec(p, 3, 1) + wantExec(p, 5, 1)) / time.Microsecond)
	elapsed := clock.Now().Sub(start).Seconds()
	wantJ := (p.ZetaMJ(3)+p.ZetaMJ(5))/1000 + 10*elapsed
	tests := []struct {
		name   string
		labels map[string]string
		want   float64
		typ    dto.MetricType
	}{
		{"nv_inference_request_success", simple, 2, dto.MetricType_COUNTER},
		{"nv_inference_request_failure", simple, 1, dto.MetricType_COUNTER},
		{"nv_inference_count", simple, 8, dto.MetricType_COUNTER},
		{"nv_inference_exec_count", simple, 2, dto.MetricType_COUNTER},
		{"nv_inference_pending_request_count", simple, 0, dto.MetricType_GAUGE},
		{"nv_inference_compute_infer_duration_us", simple, inferUS, dto.MetricType_COUNTER},
		{"nv_inference_queue_duration_us", simple, 0, dto.MetricType_COUNTER},
		{"nv_inference_request_success", map[string]string{"model": "image", "version": "1"}, 0, dto.MetricType_COUNTER},
		{"nv_gpu_power_usage", gpu, 10, dto.MetricType_GAUGE},
		{"nv_gpu_power_limit", gpu, 75, dto.MetricType_GAUGE},
		{"nv_energy_consumption", gpu, wantJ, dto.MetricType_COUNTER},
		{"nv_gpu_utilization", gpu, 0, dto.MetricType_GAUGE}, // 2 batches of ~3 ms in 3 s
	}
	for _, tt := range tests {
		got, typ := value(t, fams, tt.name, tt.labels)
		if typ != tt.typ {
			t.Errorf("%s is a %v, want %v", tt.name, typ, tt.typ)
		}
		if tt.name == "nv_gpu_utilization" {
			busy := (wantExec(p, 3, 1) + wantExec(p, 5, 1)).Seconds() / elapsed
			if math.Abs(got-busy) > 1e-9 {
				t.Errorf("nv_gpu_utilization = %v, want %v", got, busy)
			}
			continue
		}
		if math.Abs(got-tt.want) > 1e-9*math.Max(1, tt.want) {
			t.Errorf("%s%v = %v, want %v", tt.name, tt.labels, got, tt.want)
		}
	}
	if j, ok := s.EnergyJoules(); !ok || !near(j, wantJ) {
		t.Errorf("EnergyJoules() = %v, %v; want %v, true", j, ok, wantJ)
	}
	// request duration covers successes and failures alike
	st, _ := s.Stats(SimpleModel)
	if got, _ := value(t, fams, "nv_inference_request_duration_us", simple); got != float64((st.InferenceStats.Success.NS+st.InferenceStats.Fail.NS)/1000) {
		t.Errorf("nv_inference_request_duration_us = %v, want the success+fail ns of /stats in us", got)
	}

	// The HTTP exposition carries Triton's names and labels.
	rec := httptest.NewRecorder()
	s.MetricsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	text, _ := io.ReadAll(rec.Body)
	for _, line := range []string{
		`nv_inference_count{model="simple",version="1"} 8`,
		`nv_inference_exec_count{model="simple",version="1"} 2`,
		`# TYPE nv_energy_consumption counter`,
		`nv_gpu_power_limit{gpu_uuid="GPU-test"} 75`,
	} {
		if !strings.Contains(string(text), line) {
			t.Errorf("/metrics lacks %q", line)
		}
	}
}

func TestNoEnergyWithoutPublishedFigures(t *testing.T) {
	p, err := preset.Lookup("resnet50-titanrtx")
	if err != nil {
		t.Fatal(err)
	}
	if p.HasEnergy {
		t.Fatalf("preset %s has energy figures; the test needs one without", p.Name)
	}
	s, ts := newTestServer(t, Options{Profile: p, PowerLimitWatts: 280})
	post(t, ts.URL+"/v2/models/simple/infer", requestFor(t, SimpleModel, 2, 0), -1)
	fams := gather(t, s)
	for _, name := range []string{"nv_energy_consumption", "nv_gpu_power_usage", "nv_gpu_power_limit"} {
		if _, ok := fams[name]; ok {
			t.Errorf("%s is exported for a preset with no energy figures", name)
		}
	}
	if _, ok := fams["nv_gpu_utilization"]; !ok {
		t.Error("nv_gpu_utilization missing")
	}
	if _, ok := s.EnergyJoules(); ok {
		t.Error("EnergyJoules reports energy for a preset without figures")
	}
}

func TestNewRejectsBadOptions(t *testing.T) {
	noEnergy, _ := preset.Lookup("resnet50-titanrtx")
	bad := preset.Profile{Name: "bad", Latency: batchcost.Latency{AlphaMs: -1}, MaxBatch: 4}
	tests := []struct {
		name string
		opts Options
		want string
	}{
		{"negative scale", Options{TimeScale: -1}, "time scale"},
		{"NaN scale", Options{TimeScale: math.NaN()}, "time scale"},
		{"infinite scale", Options{TimeScale: math.Inf(1)}, "time scale"},
		{"negative instances", Options{Instances: -2}, "instances"},
		{"jitter 1", Options{Jitter: 1}, "jitter"},
		{"negative idle", Options{IdleWatts: -3}, "idle power"},
		{"idle power without energy figures", Options{Profile: noEnergy, IdleWatts: 30}, "no published energy figures"},
		{"negative power limit", Options{PowerLimitWatts: -1}, "power limit"},
		{"negative body limit", Options{MaxBodyBytes: -1}, "max body bytes"},
		{"invalid profile", Options{Profile: bad}, "alpha"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.opts)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("New error = %v, want one mentioning %q", err, tt.want)
			}
		})
	}
}
