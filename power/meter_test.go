package power

import (
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// A GPU that draws 50 W idle and 200 W with a batch in flight, under a
// random batch schedule that leaves some whole seconds idle and splits
// others: the meter must recover both figures from the counter alone.
func TestMeterIdleBusySplit(t *testing.T) {
	const idleW, busyW = 50.0, 200.0
	clock := newFakeClock()
	src := &scriptSource{clock: clock}
	m := newTestMeter(t, src, clock)
	rng := rand.New(rand.NewPCG(1, 2))

	var energy, busyTotal, intervalBusy float64
	var span Span
	inBatch := false
	// run advances the clock by d in the current state.
	run := func(d time.Duration) {
		clock.Advance(d)
		if inBatch {
			intervalBusy += d.Seconds()
		}
	}
	poll := func() {
		energy += idleW*1 + (busyW-idleW)*intervalBusy
		busyTotal += intervalBusy
		intervalBusy = 0
		src.next = []Reading{counterGPU("GPU-0", energy, 0)}
		if err := m.Poll(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	poll()
	const seconds = 120
	for i := range seconds {
		if i%10 < 4 && !inBatch { // whole idle seconds
			run(time.Second)
			poll()
			continue
		}
		// Toggle the batch state at random instants in the second; a
		// batch may stay in flight across the poll.
		left := time.Second
		for left > 0 {
			d := min(left, time.Duration(rng.IntN(400)+1)*time.Millisecond)
			run(d)
			left -= d
			if left == 0 {
				break
			}
			if inBatch {
				span.End(4)
			} else {
				span = m.Begin("resnet", "")
			}
			inBatch = !inBatch
		}
		poll()
	}
	if inBatch {
		span.End(4)
	}

	g := m.Snapshot().GPUs[0]
	checkApprox(t, "idle power", g.IdlePowerW, idleW, 1e-9)
	checkApprox(t, "busy power", g.BusyPowerW, busyW, 1e-9)
	if !approx(g.BusySeconds, busyTotal, 1e-9) || !approx(g.IdleSeconds, seconds-busyTotal, 1e-9) {
		t.Errorf("busy %v s, idle %v s; want %v and %v", g.BusySeconds, g.IdleSeconds, busyTotal, seconds-busyTotal)
	}
	checkApprox(t, "busy energy", g.BusyEnergyJ, busyW*busyTotal, 1e-6)
	checkApprox(t, "idle energy", g.IdleEnergyJ, idleW*(seconds-busyTotal), 1e-6)
	if g.Method != "counter" {
		t.Errorf("method %q, want counter", g.Method)
	}
}

// Energy is shared between models by batch time on each GPU.
func TestMeterAttribution(t *testing.T) {
	type batch struct {
		model, gpu string
		seconds    float64
		served     int
	}
	tests := []struct {
		name      string
		energy    map[string]float64 // joules used in the 10 s, per GPU
		batches   []batch
		modelJ    map[string]float64 // attributed energy per model
		modelReq  map[string]int64
		gpuReq    map[string]int64
		totalReqs int64
	}{
		{
			name:     "one GPU, batches name no GPU",
			energy:   map[string]float64{"GPU-0": 400},
			batches:  []batch{{"a", "", 1.5, 30}, {"b", "", 1, 10}, {"a", "", 1.5, 30}},
			modelJ:   map[string]float64{"a": 300, "b": 100},
			modelReq: map[string]int64{"a": 60, "b": 10},
			gpuReq:   map[string]int64{"GPU-0": 70},
		},
		{
			name:     "two GPUs, batches name their GPU",
			energy:   map[string]float64{"GPU-0": 300, "GPU-1": 100},
			batches:  []batch{{"a", "GPU-0", 2, 30}, {"b", "GPU-1", 2, 20}},
			modelJ:   map[string]float64{"a": 300, "b": 100},
			modelReq: map[string]int64{"a": 30, "b": 20},
			gpuReq:   map[string]int64{"GPU-0": 30, "GPU-1": 20},
		},
		{
			name:     "two GPUs, batches name no GPU: shares by batch time overall",
			energy:   map[string]float64{"GPU-0": 300, "GPU-1": 100},
			batches:  []batch{{"a", "", 1, 5}, {"b", "", 3, 5}},
			modelJ:   map[string]float64{"a": 100, "b": 300},
			modelReq: map[string]int64{"a": 5, "b": 5},
			gpuReq:   map[string]int64{"GPU-0": 0, "GPU-1": 0}, // unknowable
		},
		{
			name:     "a GPU without batches shares by batch time overall",
			energy:   map[string]float64{"GPU-0": 300, "GPU-1": 100},
			batches:  []batch{{"a", "GPU-0", 2, 8}},
			modelJ:   map[string]float64{"a": 400},
			modelReq: map[string]int64{"a": 8},
			gpuReq:   map[string]int64{"GPU-0": 8, "GPU-1": 0},
		},
		{
			name:     "a GPU id the source does not know counts as unattributed",
			energy:   map[string]float64{"GPU-0": 200},
			batches:  []batch{{"a", "7", 1, 3}, {"b", "GPU-0", 1, 1}},
			modelJ:   map[string]float64{"a": 100, "b": 100},
			modelReq: map[string]int64{"a": 3, "b": 1},
			gpuReq:   map[string]int64{"GPU-0": 4},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := newFakeClock()
			src := &scriptSource{clock: clock}
			m := newTestMeter(t, src, clock)
			readings := func(scale float64) []Reading {
				var rs []Reading
				for _, id := range []string{"GPU-0", "GPU-1"} {
					if e, ok := tt.energy[id]; ok {
						rs = append(rs, counterGPU(id, e*scale, 0))
					}
				}
				return rs
			}
			src.next = readings(0)
			m.Poll(context.Background())
			elapsed := 0.0
			for _, b := range tt.batches {
				s := m.Begin(b.model, b.gpu)
				d := time.Duration(b.seconds * float64(time.Second))
				clock.Advance(d)
				elapsed += b.seconds
				s.End(b.served)
			}
			clock.Advance(time.Duration((10 - elapsed) * float64(time.Second)))
			src.next = readings(1)
			if err := m.Poll(context.Background()); err != nil {
				t.Fatal(err)
			}

			snap := m.Snapshot()
			var totalJ float64
			var totalReq int64
			for _, e := range tt.energy {
				totalJ += e
			}
			for _, r := range tt.modelReq {
				totalReq += r
			}
			all := snap.Windows[TotalWindow]
			checkApprox(t, "total energy", all.EnergyJ, totalJ, 1e-9)
			checkApprox(t, "total requests per joule", all.RequestsPerJoule, float64(totalReq)/totalJ, 1e-12)
			if all.Requests != totalReq || all.Seconds != 10 {
				t.Errorf("total: %d requests in %v s, want %d in 10 s", all.Requests, all.Seconds, totalReq)
			}
			if len(snap.Models) != len(tt.modelJ) {
				t.Fatalf("%d models in the snapshot, want %d", len(snap.Models), len(tt.modelJ))
			}
			for _, ms := range snap.Models {
				f := ms.Windows[TotalWindow]
				checkApprox(t, ms.Model+" energy", f.EnergyJ, tt.modelJ[ms.Model], 1e-9)
				checkApprox(t, ms.Model+" requests per joule", f.RequestsPerJoule, float64(tt.modelReq[ms.Model])/tt.modelJ[ms.Model], 1e-12)
				checkApprox(t, ms.Model+" joules per request", f.JoulesPerRequest, tt.modelJ[ms.Model]/float64(tt.modelReq[ms.Model]), 1e-9)
				if f.Requests != tt.modelReq[ms.Model] {
					t.Errorf("%s: %d requests, want %d", ms.Model, f.Requests, tt.modelReq[ms.Model])
				}
			}
			for _, g := range snap.GPUs {
				f := g.Windows[TotalWindow]
				want := tt.gpuReq[g.GPU]
				if f.Requests != want {
					t.Errorf("%s: %d requests, want %d", g.GPU, f.Requests, want)
				}
				if want == 0 {
					if f.RequestsPerJoule == nil || *f.RequestsPerJoule != 0 {
						t.Errorf("%s: requests per joule %v, want 0", g.GPU, val(f.RequestsPerJoule))
					}
					continue
				}
				checkApprox(t, g.GPU+" requests per joule", f.RequestsPerJoule, float64(want)/tt.energy[g.GPU], 1e-12)
			}
		})
	}
}

func TestMeterWindows(t *testing.T) {
	clock := newFakeClock()
	src := &scriptSource{clock: clock}
	m := newTestMeter(t, src, clock, 10*time.Second, time.Minute)
	energy := 0.0
	src.next = []Reading{counterGPU("GPU-0", energy, 100)}
	m.Poll(context.Background())
	for i := range 40 {
		w := 100.0
		if i >= 30 {
			w = 200
		}
		s := m.Begin("m", "")
		clock.Advance(500 * time.Millisecond)
		s.End(10)
		clock.Advance(500 * time.Millisecond)
		energy += w
		src.next = []Reading{counterGPU("GPU-0", energy, w)}
		m.Poll(context.Background())
	}
	snap := m.Snapshot()
	tests := []struct {
		window   string
		seconds  float64
		energy   float64
		requests int64
	}{
		{"10s", 10, 2000, 100},
		{"1m", 40, 5000, 400}, // not full yet: covers what there is
		{TotalWindow, 40, 5000, 400},
	}
	for _, tt := range tests {
		for _, f := range []Figures{snap.Windows[tt.window], snap.GPUs[0].Windows[tt.window], snap.Models[0].Windows[tt.window]} {
			if f.Seconds != tt.seconds || f.Requests != tt.requests {
				t.Errorf("%s: %v s, %d requests; want %v s, %d", tt.window, f.Seconds, f.Requests, tt.seconds, tt.requests)
			}
			checkApprox(t, tt.window+" energy", f.EnergyJ, tt.energy, 1e-9)
			checkApprox(t, tt.window+" average power", f.AvgPowerW, tt.energy/tt.seconds, 1e-9)
			checkApprox(t, tt.window+" requests per joule", f.RequestsPerJoule, float64(tt.requests)/tt.energy, 1e-12)
		}
	}
	// The history keeps only what the longest window needs.
	if n := len(m.hist); n > 62 {
		t.Errorf("history holds %d samples for a 1m window at 1 s", n)
	}
}

func TestMeterNoneSource(t *testing.T) {
	clock := newFakeClock()
	m := newTestMeter(t, None{}, clock)
	if m.Available() {
		t.Fatal("Available() with the none source")
	}
	m.Poll(context.Background())
	s := m.Begin("m", "")
	clock.Advance(time.Second)
	s.End(3)
	m.Poll(context.Background())
	snap := m.Snapshot()
	f := snap.Windows[TotalWindow]
	if f.Requests != 3 || f.EnergyJ != nil || f.RequestsPerJoule != nil || f.AvgPowerW != nil || f.JoulesPerRequest != nil {
		t.Errorf("total %+v: want 3 requests and null energy figures", f)
	}
	if len(snap.GPUs) != 0 {
		t.Errorf("%d GPUs without a source", len(snap.GPUs))
	}
	b, err := json.Marshal(snap)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"source":"none"`, `"available":false`, `"energy_joules":null`, `"requests_per_joule":null`, `"requests":3`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("status JSON lacks %s: %s", want, b)
		}
	}
}

func TestMeterBeforeFirstPoll(t *testing.T) {
	m := newTestMeter(t, &scriptSource{clock: newFakeClock()}, newFakeClock())
	snap := m.Snapshot()
	if snap.Time != nil {
		t.Errorf("time %v before the first poll, want null", snap.Time)
	}
	if f, ok := snap.Windows["10s"]; !ok || f.EnergyJ != nil {
		t.Errorf("10s window %+v (present %v): want present and null", f, ok)
	}
}

func TestMeterSourceErrors(t *testing.T) {
	clock := newFakeClock()
	src := &scriptSource{clock: clock, err: errors.New("connection refused")}
	m := newTestMeter(t, src, clock)
	if err := m.Poll(context.Background()); err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("Poll: %v, want the source's error", err)
	}
	snap := m.Snapshot()
	if snap.Error == "" || snap.SourceErrors != 1 {
		t.Errorf("snapshot error %q, %d source errors; want the error and 1", snap.Error, snap.SourceErrors)
	}
	src.err = nil
	src.next = []Reading{powerGPU("GPU-0", 10)}
	if err := m.Poll(context.Background()); err != nil {
		t.Fatal(err)
	}
	if snap := m.Snapshot(); snap.Error != "" || snap.SourceErrors != 1 {
		t.Errorf("after a good poll: error %q, %d source errors; want none and 1", snap.Error, snap.SourceErrors)
	}
}

func TestMeterIntervals(t *testing.T) {
	tests := []struct {
		name       string
		readings   []Reading // one per second
		energy     float64
		unmeasured float64
		method     string
	}{
		{"power only: trapezoid", []Reading{powerGPU("g", 100), powerGPU("g", 200), powerGPU("g", 200)}, 350, 0, "power_integration"},
		{"counter preferred to power", []Reading{counterGPU("g", 0, 999), counterGPU("g", 120, 999)}, 120, 0, "counter"},
		{"discontinuity: power instead", []Reading{counterGPU("g", 0, 100), {GPU: "g", EnergyJ: 0, HasEnergy: true, Discontinuity: true, PowerW: 300, HasPower: true}, counterGPU("g", 50, 0)}, 250, 0, "mixed"},
		{"discontinuity without power: unmeasured", []Reading{{GPU: "g", HasEnergy: true}, {GPU: "g", HasEnergy: true, Discontinuity: true}, {GPU: "g", EnergyJ: 7, HasEnergy: true}}, 7, 1, "counter"},
		{"counter missing in one reading: power around it", []Reading{counterGPU("g", 0, 100), powerGPU("g", 100), counterGPU("g", 1e6, 100)}, 200, 0, "power_integration"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := newFakeClock()
			src := &scriptSource{clock: clock}
			m := newTestMeter(t, src, clock)
			for _, r := range tt.readings {
				src.next = []Reading{r}
				m.Poll(context.Background())
				clock.Advance(time.Second)
			}
			g := m.Snapshot().GPUs[0]
			checkApprox(t, "energy", g.Windows[TotalWindow].EnergyJ, tt.energy, 1e-9)
			if g.UnmeasuredSeconds != tt.unmeasured || g.Method != tt.method {
				t.Errorf("unmeasured %v s, method %q; want %v, %q", g.UnmeasuredSeconds, g.Method, tt.unmeasured, tt.method)
			}
		})
	}
}

// A reading that is not newer than the previous one adds nothing.
// stampedPower is one poll's reading: power w at time at after the first.
type stampedPower struct {
	at time.Duration
	w  float64
}

// TestMeterIgnoresStaleReadings: a reading not newer than the GPU's last
// (a republished value, or one from a slower path arriving late) adds no
// energy and does not replace the last reading. Each case is built so that
// accepting the stale reading changes the total: its power differs from the
// readings around it, so integrating it, or integrating from it, would not
// give the hand-computed joules.
func TestMeterIgnoresStaleReadings(t *testing.T) {
	s := func(sec float64) time.Duration { return time.Duration(sec * float64(time.Second)) }
	tests := []struct {
		name  string
		polls []stampedPower
		want  float64 // joules: trapezoids over the fresh readings only
	}{
		// Accepted, the second reading would make the interval to 1 s
		// (300+100)/2 = 200 J.
		{"same instant, other power", []stampedPower{{0, 100}, {0, 300}, {s(1), 100}}, 100},
		// Accepted, the reading of 0.5 s would add (100+500)/2 * -0.5 =
		// -150 J, then (500+100)/2 * 1.5 = 450 J: 400 in all.
		{"older than the last", []stampedPower{{0, 100}, {s(1), 100}, {s(0.5), 500}, {s(2), 100}}, 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := newFakeClock()
			start := clock.Now()
			src := &scriptSource{clock: clock}
			m := newTestMeter(t, src, clock)
			for _, p := range tt.polls {
				// The meter's clock only moves forward; the reading carries
				// its own time, which is what the guard compares.
				if d := start.Add(p.at).Sub(clock.Now()); d > 0 {
					clock.Advance(d)
				}
				src.next = []Reading{powerGPU("g", p.w)}
				src.stamp = start.Add(p.at)
				if err := m.Poll(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			checkApprox(t, "energy", m.Snapshot().GPUs[0].Windows[TotalWindow].EnergyJ, tt.want, 1e-9)
		})
	}
}

func TestMeterRun(t *testing.T) {
	clock := newFakeClock()
	reads := make(chan struct{}, 10)
	src := &notifySource{scriptSource: scriptSource{clock: clock, next: []Reading{powerGPU("g", 10)}}, reads: reads}
	m := newTestMeter(t, src, clock)
	ticks := make(chan time.Time)
	stopped := false
	m.tick = func(d time.Duration) (<-chan time.Time, func()) {
		if d != time.Second {
			t.Errorf("ticker period %v, want the 1s Interval", d)
		}
		return ticks, func() { stopped = true }
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- m.Run(ctx) }()
	<-reads // the first poll is immediate
	for range 3 {
		clock.Advance(time.Second)
		ticks <- clock.Now()
		<-reads
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run returned %v after cancel, want nil", err)
	}
	if !stopped {
		t.Error("Run did not stop its ticker")
	}
	checkApprox(t, "energy after 4 polls", m.Snapshot().GPUs[0].Windows[TotalWindow].EnergyJ, 30, 1e-9)
}

type notifySource struct {
	scriptSource
	reads chan struct{}
}

func (s *notifySource) Read(ctx context.Context) ([]Reading, error) {
	defer func() { s.reads <- struct{}{} }()
	return s.scriptSource.Read(ctx)
}

func TestOptionsErrors(t *testing.T) {
	tests := []struct {
		name    string
		kind    string
		opts    Options
		mention string
	}{
		{"unknown kind", "dcgm", Options{}, `unknown energy source "dcgm"`},
		{"short interval", KindNone, Options{Interval: time.Millisecond}, "Interval 1ms"},
		{"window shorter than interval", KindNone, Options{Interval: 2 * time.Second, Windows: []time.Duration{time.Second}}, "shorter than the sampling Interval"},
		{"window twice", KindNone, Options{Windows: []time.Duration{time.Minute, 60 * time.Second}}, "given twice"},
		{"negative timeout", KindNone, Options{Timeout: -time.Second}, "Timeout"},
		{"empty GPU", KindNone, Options{GPUs: []string{" "}}, "GPUs[0] is empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Open(tt.kind, tt.opts)
			if err == nil || !strings.Contains(err.Error(), tt.mention) {
				t.Errorf("Open: %v; want an error mentioning %q", err, tt.mention)
			}
		})
	}
	if _, err := NewMeter(nil, Options{}); err == nil {
		t.Error("NewMeter(nil) succeeded")
	}
}

func TestWindowName(t *testing.T) {
	for d, want := range map[time.Duration]string{
		10 * time.Second: "10s", time.Minute: "1m", 90 * time.Second: "90s",
		2 * time.Hour: "2h", 1500 * time.Millisecond: "1.5s",
	} {
		if got := windowName(d); got != want {
			t.Errorf("windowName(%v) = %q, want %q", d, got, want)
		}
	}
}

// laggingSource reports power as the mean of the true power over the last
// second (as NVML does on Ampere and later GPUs), true power being 50 W
// idle and 200 W while busy() says a batch is in flight.
type laggingSource struct {
	clock   *fakeClock
	history []bool // busy state per 50 ms slice of time, newest last
}

func (s *laggingSource) Name() string { return "lagging" }
func (s *laggingSource) Close() error { return nil }
func (s *laggingSource) Read(context.Context) ([]Reading, error) {
	const slices = 20 // 1 s of 50 ms slices
	var sum float64
	for i := range slices {
		w := 50.0
		if j := len(s.history) - slices + i; j >= 0 && s.history[j] {
			w = 200
		}
		sum += w
	}
	return []Reading{{Time: s.clock.Now(), GPU: "GPU-0", PowerW: sum / slices, HasPower: true}}, nil
}

// Idle power must not carry the busy power a lagging sensor still reports
// after a batch; the settle time is what keeps it out.
func TestMeterIdleSettle(t *testing.T) {
	tests := []struct {
		name   string
		settle time.Duration
		exact  bool
	}{
		{"settle 1s: idle exact", time.Second, true},
		{"settle 0: idle polluted", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := newFakeClock()
			src := &laggingSource{clock: clock}
			m, err := NewMeter(src, Options{Interval: 250 * time.Millisecond, Now: clock.Now})
			if err != nil {
				t.Fatal(err)
			}
			m.settle = tt.settle
			m.Poll(context.Background())
			var span Span
			// 10 cycles of 2 s busy, 3 s idle, in 50 ms slices; poll every 250 ms.
			for i := range 10 * 100 {
				busy := i%100 < 40
				switch {
				case busy && i%100 == 0:
					span = m.Begin("m", "")
				case !busy && i%100 == 40:
					span.End(1)
				}
				clock.Advance(50 * time.Millisecond)
				src.history = append(src.history, busy)
				if i%5 == 4 {
					m.Poll(context.Background())
				}
			}
			g := m.Snapshot().GPUs[0]
			t.Logf("idle %.3f W, busy %.3f W", val(g.IdlePowerW), val(g.BusyPowerW))
			if tt.exact {
				checkApprox(t, "idle power", g.IdlePowerW, 50, 1e-9)
				checkApprox(t, "busy power", g.BusyPowerW, 200, 1e-9)
			} else if val(g.IdlePowerW) < 55 {
				t.Errorf("idle power %v W without settling: the test no longer shows the lag", val(g.IdlePowerW))
			}
		})
	}
}
