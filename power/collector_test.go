package power

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestCollector(t *testing.T) {
	clock := newFakeClock()
	src := &scriptSource{clock: clock}
	m := newTestMeter(t, src, clock)
	// 10 s: 5 idle seconds at 50 W (the first is not yet "settled"), then
	// one 5 s batch of 40 requests at 250 W. Energy 250 + 1250 = 1500 J.
	energy := 0.0
	src.next = []Reading{counterGPU("GPU-0", energy, 50)}
	m.Poll(context.Background())
	for range 5 {
		clock.Advance(time.Second)
		energy += 50
		src.next = []Reading{counterGPU("GPU-0", energy, 50)}
		m.Poll(context.Background())
	}
	s := m.Begin("resnet", "")
	for range 5 {
		clock.Advance(time.Second)
		energy += 250
		src.next = []Reading{counterGPU("GPU-0", energy, 250)}
		m.Poll(context.Background())
	}
	s.End(40)
	m.Poll(context.Background()) // records the requests; same instant, no energy

	want := `
# HELP ratebatch_gpu_energy_joules_total Energy the GPU used since the proxy started measuring, in joules.
# TYPE ratebatch_gpu_energy_joules_total counter
ratebatch_gpu_energy_joules_total{gpu="GPU-0"} 1500
# HELP ratebatch_gpu_idle_power_watts Mean GPU power while no batch was in flight, in watts.
# TYPE ratebatch_gpu_idle_power_watts gauge
ratebatch_gpu_idle_power_watts{gpu="GPU-0"} 50
# HELP ratebatch_gpu_busy_power_watts Mean GPU power while a batch was in flight, in watts (energy not explained by idle power per busy second).
# TYPE ratebatch_gpu_busy_power_watts gauge
ratebatch_gpu_busy_power_watts{gpu="GPU-0"} 250
# HELP ratebatch_requests_per_joule Requests served per joule used by all measured GPUs over the window.
# TYPE ratebatch_requests_per_joule gauge
ratebatch_requests_per_joule{window="10s"} 0.02666666666666667
ratebatch_requests_per_joule{window="total"} 0.02666666666666667
# HELP ratebatch_model_joules_per_request Joules attributed to the model (by batch time) per request of it served over the window.
# TYPE ratebatch_model_joules_per_request gauge
ratebatch_model_joules_per_request{model="resnet",window="10s"} 37.5
ratebatch_model_joules_per_request{model="resnet",window="total"} 37.5
`
	if err := testutil.CollectAndCompare(m, strings.NewReader(want),
		"ratebatch_gpu_energy_joules_total", "ratebatch_gpu_idle_power_watts", "ratebatch_gpu_busy_power_watts",
		"ratebatch_requests_per_joule", "ratebatch_model_joules_per_request"); err != nil {
		t.Error(err)
	}
	problems, err := testutil.CollectAndLint(m)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(m); err != nil {
		t.Fatalf("registering the Meter: %v", err)
	}
	if _, err := reg.Gather(); err != nil {
		t.Errorf("gathering: %v", err)
	}
}

// Without a source the Meter exports no figure (absent, not zero), only
// that it measures nothing.
func TestCollectorNone(t *testing.T) {
	clock := newFakeClock()
	m := newTestMeter(t, None{}, clock)
	m.Poll(context.Background())
	m.Begin("m", "").End(1)
	clock.Advance(time.Second)
	m.Poll(context.Background())
	if n := testutil.CollectAndCount(m); n != 1 {
		t.Errorf("collected %d series without an energy source, want 1 (ratebatch_power_available)", n)
	}
	checkAvailable(t, m, 0)
}

// checkAvailable compares the meter's ratebatch_power_available with want.
func checkAvailable(t *testing.T, m *Meter, want int) {
	t.Helper()
	exp := fmt.Sprintf(`
# HELP ratebatch_power_available 1 while the energy source yields figures, else 0 (no source, or it reads nothing: /status energy.unavailable says why; energy-aware policies then optimise GPU busy time).
# TYPE ratebatch_power_available gauge
ratebatch_power_available %d
`, want)
	if err := testutil.CollectAndCompare(m, strings.NewReader(exp), "ratebatch_power_available"); err != nil {
		t.Error(err)
	}
}

// Label values from the network may be invalid UTF-8; the scrape must not fail.
func TestCollectorInvalidUTF8(t *testing.T) {
	clock := newFakeClock()
	src := &scriptSource{clock: clock, next: []Reading{counterGPU("GPU-\xff", 0, 10)}}
	m := newTestMeter(t, src, clock)
	m.Poll(context.Background())
	s := m.Begin("bad\xfemodel", "")
	clock.Advance(time.Second)
	s.End(1)
	src.next = []Reading{counterGPU("GPU-\xff", 10, 10)}
	m.Poll(context.Background())
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m)
	if _, err := reg.Gather(); err != nil {
		t.Errorf("gathering: %v", err)
	}
}
