package power

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// tritonGPU is what the fake Triton publishes for one GPU; a nil pointer
// leaves that series out, as Triton does without DCGM's field.
type tritonGPU struct {
	uuid   string
	energy *float64 // nv_energy_consumption, joules since Triton started
	power  *float64 // nv_gpu_power_usage, watts
}

// fakeTriton serves Triton's exposition text for the GPUs it holds.
type fakeTriton struct {
	mu     sync.Mutex
	gpus   []tritonGPU
	status int
	extra  string // more text, e.g. unrelated families
}

func (f *fakeTriton) set(gpus ...tritonGPU) {
	f.mu.Lock()
	f.gpus = gpus
	f.mu.Unlock()
}

func (f *fakeTriton) setStatus(status int) {
	f.mu.Lock()
	f.status = status
	f.mu.Unlock()
}

func (f *fakeTriton) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.status != 0 {
		w.WriteHeader(f.status)
		return
	}
	var b strings.Builder
	b.WriteString("# HELP nv_inference_count Number of inferences performed\n# TYPE nv_inference_count counter\nnv_inference_count{model=\"m\",version=\"1\"} 12\n")
	b.WriteString("# HELP nv_gpu_power_usage GPU power usage in watts\n# TYPE nv_gpu_power_usage gauge\n")
	for _, g := range f.gpus {
		if g.power != nil {
			fmt.Fprintf(&b, "nv_gpu_power_usage{gpu_uuid=%q} %f\n", g.uuid, *g.power)
		}
	}
	b.WriteString("# HELP nv_energy_consumption GPU energy consumption in joules since the Triton Server started\n# TYPE nv_energy_consumption counter\n")
	for _, g := range f.gpus {
		if g.energy != nil {
			fmt.Fprintf(&b, "nv_energy_consumption{gpu_uuid=%q} %f\n", g.uuid, *g.energy)
		}
	}
	b.WriteString(f.extra)
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	fmt.Fprint(w, b.String())
}

func startTriton(t *testing.T) (*fakeTriton, string) {
	t.Helper()
	f := &fakeTriton{}
	srv := httptest.NewServer(f) // listens on 127.0.0.1
	t.Cleanup(srv.Close)
	return f, srv.URL + "/metrics"
}

func f64(v float64) *float64 { return &v }

func TestTritonReadings(t *testing.T) {
	const a, b = "GPU-2b1a", "GPU-77ff"
	type step struct {
		gpus []tritonGPU
		want []Reading // Time not compared
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"energy counter and power", []step{
			{[]tritonGPU{{a, f64(3594017.4), f64(51.091)}}, []Reading{{GPU: a, EnergyJ: 0, HasEnergy: true, PowerW: 51.091, HasPower: true}}},
			{[]tritonGPU{{a, f64(3594117.4), f64(60)}}, []Reading{{GPU: a, EnergyJ: 100, HasEnergy: true, PowerW: 60, HasPower: true}}},
		}},
		{"counter stuck at 0 (no DCGM energy field): power only", []step{
			{[]tritonGPU{{a, f64(0), f64(40)}}, []Reading{{GPU: a, PowerW: 40, HasPower: true}}},
			{[]tritonGPU{{a, f64(0), f64(45)}}, []Reading{{GPU: a, PowerW: 45, HasPower: true}}},
		}},
		{"no energy family: power only", []step{
			{[]tritonGPU{{a, nil, f64(40)}}, []Reading{{GPU: a, PowerW: 40, HasPower: true}}},
		}},
		{"Triton restarted: counter falls", []step{
			{[]tritonGPU{{a, f64(5000), f64(100)}}, []Reading{{GPU: a, EnergyJ: 0, HasEnergy: true, PowerW: 100, HasPower: true}}},
			{[]tritonGPU{{a, f64(12), f64(100)}}, []Reading{{GPU: a, EnergyJ: 0, HasEnergy: true, Discontinuity: true, PowerW: 100, HasPower: true}}},
			{[]tritonGPU{{a, f64(112), f64(100)}}, []Reading{{GPU: a, EnergyJ: 100, HasEnergy: true, PowerW: 100, HasPower: true}}},
		}},
		{"two GPUs, sorted by UUID", []step{
			{[]tritonGPU{{b, f64(10), f64(20)}, {a, nil, f64(30)}}, []Reading{
				{GPU: a, PowerW: 30, HasPower: true},
				{GPU: b, EnergyJ: 0, HasEnergy: true, PowerW: 20, HasPower: true},
			}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fake, url := startTriton(t)
			clock := newFakeClock()
			src, err := Open(KindTriton, Options{TritonMetricsURL: url, Now: clock.Now})
			if err != nil {
				t.Fatal(err)
			}
			defer src.Close()
			for i, st := range tt.steps {
				clock.Advance(time.Second)
				fake.set(st.gpus...)
				got, err := src.Read(context.Background())
				if err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				if len(got) != len(st.want) {
					t.Fatalf("step %d: %d readings, want %d: %+v", i, len(got), len(st.want), got)
				}
				for j := range got {
					g, w := got[j], st.want[j]
					if !g.Time.Equal(clock.Now()) {
						t.Errorf("step %d: reading time %v, want %v", i, g.Time, clock.Now())
					}
					g.Time = time.Time{}
					if g.GPU != w.GPU || !approx(g.EnergyJ, w.EnergyJ, 1e-6) || g.HasEnergy != w.HasEnergy ||
						g.Discontinuity != w.Discontinuity || !approx(g.PowerW, w.PowerW, 1e-6) || g.HasPower != w.HasPower {
						t.Errorf("step %d reading %d: got %+v, want %+v", i, j, g, w)
					}
				}
			}
		})
	}
}

func TestTritonErrors(t *testing.T) {
	const a, b = "GPU-aaaa", "GPU-bbbb"
	tests := []struct {
		name     string
		gpus     []tritonGPU
		status   int
		extra    string
		selected []string
		readings int    // readings still returned
		gpuErr   string // GPU the error names, "" for a source-level error
		mention  string
	}{
		{"HTTP 503", nil, http.StatusServiceUnavailable, "", nil, 0, "", "503"},
		{"no GPU metrics", nil, 0, "", nil, 0, "", "--allow-gpu-metrics"},
		{"malformed sample", []tritonGPU{{a, nil, f64(1)}}, 0, "nv_gpu_power_usage{gpu_uuid=\"x\"} watts\n", nil, 0, "", `expected float as value, got "watts"`},
		{"negative power", []tritonGPU{{a, nil, f64(-3)}, {b, nil, f64(10)}}, 0, "", nil, 1, a, "want a finite value"},
		{"selected GPU missing", []tritonGPU{{a, nil, f64(10)}}, 0, "", []string{b, a}, 1, b, "no nv_energy_consumption or nv_gpu_power_usage series"},
		{"counter 0 and no power", []tritonGPU{{a, f64(0), nil}}, 0, "", nil, 0, a, "not measured"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fake, url := startTriton(t)
			fake.set(tt.gpus...)
			fake.status, fake.extra = tt.status, tt.extra
			src, err := Open(KindTriton, Options{TritonMetricsURL: url, GPUs: tt.selected})
			if err != nil {
				t.Fatal(err)
			}
			rs, err := src.Read(context.Background())
			if err == nil {
				t.Fatal("Read succeeded, want an error")
			}
			if len(rs) != tt.readings {
				t.Errorf("%d readings, want %d", len(rs), tt.readings)
			}
			var ge *GPUError
			switch {
			case tt.gpuErr == "" && errors.As(err, &ge):
				t.Errorf("error %q names GPU %s, want a source-level error", err, ge.GPU)
			case tt.gpuErr != "" && (!errors.As(err, &ge) || ge.GPU != tt.gpuErr):
				t.Errorf("error %q: want a *GPUError for %s", err, tt.gpuErr)
			}
			if !strings.Contains(err.Error(), tt.mention) {
				t.Errorf("error %q does not mention %q", err, tt.mention)
			}
		})
	}
}

func TestTritonOpenErrors(t *testing.T) {
	tests := []struct {
		name    string
		opts    Options
		mention string
	}{
		{"no URL", Options{}, "TritonMetricsURL is empty"},
		{"not http", Options{TritonMetricsURL: "ftp://127.0.0.1/metrics"}, "want an http or https URL"},
		{"no host", Options{TritonMetricsURL: "http:///metrics"}, "with a host"},
		{"index selection", Options{TritonMetricsURL: "http://127.0.0.1:8002/metrics", GPUs: []string{"0"}}, "by UUID"},
		{"bad interval", Options{TritonMetricsURL: "http://127.0.0.1:8002/metrics", Interval: time.Millisecond}, "Interval"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Open(KindTriton, tt.opts)
			if err == nil || !strings.Contains(err.Error(), tt.mention) {
				t.Errorf("Open: %v; want an error mentioning %q", err, tt.mention)
			}
		})
	}
}

// The Triton path end to end: a Meter scraping the fake Triton integrates
// power until the counter moves, then follows the counter.
func TestTritonMeter(t *testing.T) {
	const id = "GPU-5c3e"
	fake, url := startTriton(t)
	clock := newFakeClock()
	src, err := Open(KindTriton, Options{TritonMetricsURL: url, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	m := newTestMeter(t, src, clock)
	// Three polls with the counter still 0 at 80 W: 2 s integrated = 160 J.
	// Then the counter runs: 1000 J -> 1300 J -> 1400 J, power 300 then 100.
	steps := []tritonGPU{
		{id, f64(0), f64(80)}, {id, f64(0), f64(80)}, {id, f64(0), f64(80)},
		{id, f64(1000), f64(300)}, // counter live; interval from the 0 reading: trapezoid (80+300)/2
		{id, f64(1300), f64(300)}, {id, f64(1400), f64(100)},
	}
	for _, st := range steps {
		fake.set(st)
		if err := m.Poll(context.Background()); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Second)
	}
	g := m.Snapshot().GPUs[0]
	want := 160 + 190 + 300 + 100.0
	checkApprox(t, "energy", g.Windows[TotalWindow].EnergyJ, want, 1e-6)
	if g.Method != "mixed" {
		t.Errorf("method %q, want mixed", g.Method)
	}
}

// parseSample parses a page of one line as a scrape does and returns its
// one sample.
func parseSample(line string) (name string, labels []labelPair, v float64, err error) {
	n := 0
	err = parseExposition(strings.NewReader(line+"\n"), func(string) bool { return true }, func(nm string, ls []labelPair, x float64) {
		name, labels, v = nm, ls, x
		n++
	})
	if err == nil && n != 1 {
		err = fmt.Errorf("%q: %d samples, want 1", line, n)
	}
	return name, labels, v, err
}

func TestParseSample(t *testing.T) {
	tests := []struct {
		line   string
		name   string
		labels []labelPair
		v      float64
		err    string
	}{
		{`nv_gpu_power_usage{gpu_uuid="GPU-1"} 51.091000`, "nv_gpu_power_usage", []labelPair{{"gpu_uuid", "GPU-1"}}, 51.091, ""},
		{`nv_energy_consumption{gpu_uuid="GPU-1",} 3.5e6 1700000000000`, "nv_energy_consumption", []labelPair{{"gpu_uuid", "GPU-1"}}, 3.5e6, ""},
		{`x{a="q\"uo\\te\n", b = "2"} +Inf`, "x", []labelPair{{"a", "q\"uo\\te\n"}, {"b", "2"}}, 0, ""},
		{`up 1`, "up", nil, 1, ""},
		{`x{a="1"}`, "", nil, 0, "expected float as value"},
		{`x{a="1" 2`, "", nil, 0, "unexpected end of label value"},
		{`x{a=1} 2`, "", nil, 0, `expected '"' at start of label value`},
		{`x{a="1} 2`, "", nil, 0, "contains unescaped new-line"},
		{`x 1 2 3`, "", nil, 0, "spurious string after timestamp"},
		{`{a="1"} 2`, "", nil, 0, "invalid metric name"},
	}
	for _, tt := range tests {
		t.Run(tt.line, func(t *testing.T) {
			name, labels, v, err := parseSample(tt.line)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err %v, want one mentioning %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if name != tt.name || fmt.Sprint(labels) != fmt.Sprint(tt.labels) || (v != tt.v && tt.v != 0) {
				t.Errorf("got %s %v %v, want %s %v %v", name, labels, v, tt.name, tt.labels, tt.v)
			}
		})
	}
}

func FuzzParseSample(f *testing.F) {
	for _, s := range []string{
		`nv_gpu_power_usage{gpu_uuid="GPU-1"} 51.091000`,
		`nv_energy_consumption{gpu_uuid="a\"b",x="y"} 1 2`,
		`x{`, `x{a="`, `x{a="\`, `x 1`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		name, _, _, err := parseSample(line)
		if err == nil && name == "" {
			t.Errorf("parseSample(%q) accepted a sample without a name", line)
		}
	})
}

// Triton republishes its counter once per metrics interval (2 s by default),
// so a window's energy is off by up to one update's worth. With a steady
// 300 W, updates every 2 s and polls every 0.7 s (not in step with them),
// the 10 s window must stay within 2 s x 300 W of the truth, and so must
// the total.
func TestTritonLumpyCounter(t *testing.T) {
	const id, watts, update = "GPU-1", 300.0, 2 * time.Second
	fake, url := startTriton(t)
	clock := newFakeClock()
	start := clock.Now()
	src, err := Open(KindTriton, Options{TritonMetricsURL: url, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewMeter(src, Options{Interval: 700 * time.Millisecond, Windows: []time.Duration{10 * time.Second}, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	worst := 0.0
	for range 200 {
		elapsed := clock.Now().Sub(start).Truncate(update) // the last update
		fake.set(tritonGPU{id, f64(1000 + watts*elapsed.Seconds()), f64(watts)})
		if err := m.Poll(context.Background()); err != nil {
			t.Fatal(err)
		}
		f := m.Snapshot().GPUs[0].Windows["10s"]
		if f.EnergyJ != nil && f.Seconds >= 10 {
			worst = max(worst, math.Abs(*f.EnergyJ-watts*f.Seconds))
		}
		clock.Advance(700 * time.Millisecond)
	}
	total := m.Snapshot().GPUs[0].Windows[TotalWindow]
	t.Logf("10s window: worst error %.0f J of %.0f J; total: %.0f J for %.0f J", worst, watts*10, val(total.EnergyJ), watts*total.Seconds)
	if worst > watts*update.Seconds() {
		t.Errorf("10s window error %.0f J exceeds one update's energy %.0f J", worst, watts*update.Seconds())
	}
	if worst == 0 {
		t.Error("no window error at all: the test no longer models lumps")
	}
	checkApprox(t, "total energy", total.EnergyJ, watts*total.Seconds, watts*update.Seconds())
}
