package emulator

import (
	"context"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/ratebatch/ratebatch/internal/testpoll"
	"github.com/ratebatch/ratebatch/lab/preset"
)

// wantExec is the execution time the emulator must give a batch.
func wantExec(p preset.Profile, rows int, scale float64) time.Duration {
	return time.Duration(p.TauMs(rows) * scale * float64(time.Millisecond))
}

func TestExecutionTimeFollowsProfile(t *testing.T) {
	p, err := preset.Lookup("resnet50-p4")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		model string
		scale float64
		rows  []int
	}{
		{"simple at profile speed", SimpleModel, 1, []int{1, 4, 4, 8}},
		{"simple ten times faster", SimpleModel, 0.1, []int{2, 2, 3}},
		{"image slowed down", ImageModel, 2.5, []int{1, 2}},
		{"no delay", SimpleModel, 0, []int{5, 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := newFakeClock()
			s, ts := newTestServer(t, Options{Profile: p, TimeScale: tt.scale, Clock: clock})
			wantInfer := map[int]DurationStat{}
			var total time.Duration
			for i, rows := range tt.rows {
				body := requestFor(t, tt.model, rows, i)
				before := clock.Now()
				if r := post(t, ts.URL+"/v2/models/"+tt.model+"/infer", body, -1); r.status != 200 {
					t.Fatalf("%d %s", r.status, r.errMsg)
				}
				// The statistics are recorded once the response is written,
				// which a large response lets the client see first.
				waitFor(t, func() bool { st, _ := s.Stats(tt.model); return st.ExecutionCount == uint64(i+1) }, "batch %d in the statistics", i+1)
				d := wantExec(p, rows, tt.scale)
				if got := clock.Now().Sub(before); got != d {
					t.Errorf("batch of %d advanced the clock by %v, want tau(%d)*%v = %v", rows, got, rows, tt.scale, d)
				}
				w := wantInfer[rows]
				w.Count++
				w.NS += uint64(d)
				wantInfer[rows] = w
				total += d
			}
			st, _ := s.Stats(tt.model)
			if st.InferenceStats.ComputeInfer.NS != uint64(total) || st.InferenceStats.ComputeInfer.Count != uint64(len(tt.rows)) {
				t.Errorf("compute_infer = %+v, want %d batches, %d ns", st.InferenceStats.ComputeInfer, len(tt.rows), total)
			}
			var sizes []uint64
			for _, b := range st.BatchStats {
				sizes = append(sizes, b.BatchSize)
				if w := wantInfer[int(b.BatchSize)]; b.ComputeInfer != w || b.ComputeInput.Count != w.Count || b.ComputeOutput.Count != w.Count {
					t.Errorf("batch_stats[%d] = %+v, want compute_infer %+v", b.BatchSize, b, w)
				}
			}
			if !slices.IsSorted(sizes) || len(sizes) != len(wantInfer) {
				t.Errorf("batch sizes %v, want the %d distinct sizes sorted", sizes, len(wantInfer))
			}
			sum := 0
			for _, r := range tt.rows {
				sum += r
			}
			if st.InferenceCount != uint64(sum) || st.ExecutionCount != uint64(len(tt.rows)) {
				t.Errorf("inference_count %d, execution_count %d; want %d, %d", st.InferenceCount, st.ExecutionCount, sum, len(tt.rows))
			}
			if want := uint64(clock.Now().UnixMilli()); st.LastInference != want {
				t.Errorf("last_inference = %d, want %d", st.LastInference, want)
			}
		})
	}
}

// requestFor builds a JSON request of rows rows for a model.
func requestFor(t testing.TB, model string, rows, seed int) []byte {
	t.Helper()
	if model == ImageModel {
		in := input{name: "INPUT__0", datatype: "FP32", shape: []int64{int64(rows), 3, 224, 224}, f32: make([]float32, rows*3*224*224)}
		in.f32[0] = float32(seed)
		return jsonBody(t, nil, nil, in)
	}
	a, b := simpleInputs(rows, []int64{int64(rows), 16}, int32(seed))
	if model == NoBatchModel {
		a.shape, b.shape = []int64{16}, []int64{16}
	}
	return jsonBody(t, nil, nil, a, b)
}

func TestJitter(t *testing.T) {
	p, _ := preset.Lookup(preset.DefaultPreset)
	durations := func(seed uint64) []time.Duration {
		s, err := New(Options{Profile: p, TimeScale: 1, Jitter: 0.2, Seed: seed})
		if err != nil {
			t.Fatal(err)
		}
		m := s.byName[SimpleModel]
		var ds []time.Duration
		for range 50 {
			ds = append(ds, s.execTime(m, 4))
		}
		return ds
	}
	a, b, c := durations(1), durations(1), durations(2)
	if !slices.Equal(a, b) {
		t.Error("the same seed gave different execution times")
	}
	if slices.Equal(a, c) {
		t.Error("different seeds gave the same execution times")
	}
	tau := wantExec(p, 4, 1)
	lo, hi := time.Duration(float64(tau)*0.8), time.Duration(float64(tau)*1.2)
	distinct := map[time.Duration]bool{}
	for _, d := range a {
		if d < lo || d > hi {
			t.Errorf("execution time %v outside [%v, %v]", d, lo, hi)
		}
		distinct[d] = true
	}
	if len(distinct) < 10 {
		t.Errorf("only %d distinct times in 50 draws: no jitter", len(distinct))
	}
}

func TestInstancePoolFIFO(t *testing.T) {
	p := newInstancePool(1)
	ctx := context.Background()
	if err := p.acquire(ctx); err != nil {
		t.Fatal(err)
	}
	const waiters = 5
	order := make(chan int, waiters)
	cancelled, cancel := context.WithCancel(ctx)
	for i := range waiters {
		c := ctx
		if i == 2 {
			c = cancelled // gives up while queued; must not take a turn
		}
		go func() {
			if err := p.acquire(c); err != nil {
				order <- -i
				return
			}
			order <- i
		}()
		waitFor(t, func() bool { return p.queued() == i+1 }, "waiter %d to queue", i)
	}
	cancel()
	if got := <-order; got != -2 {
		t.Fatalf("first event %d, want the cancelled waiter 2 leaving", got)
	}
	waitFor(t, func() bool { return p.queued() == waiters-1 }, "the cancelled waiter to leave the queue")
	var got []int
	for range waiters - 1 {
		p.release()
		got = append(got, <-order)
	}
	if want := []int{0, 1, 3, 4}; !slices.Equal(got, want) {
		t.Errorf("instances granted in order %v, want FIFO %v", got, want)
	}
	p.release()
	if p.free != 1 || p.queued() != 0 {
		t.Errorf("after all releases: free %d, queued %d; want 1, 0", p.free, p.queued())
	}
}

func TestGPUEnergyAndPower(t *testing.T) {
	clock := newFakeClock()
	g := newGPU(clock, 20)
	const ms = time.Millisecond

	if s := g.sample(); s.EnergyJ != 0 || s.PowerW != 20 {
		t.Fatalf("at start: %+v, want 0 J and the idle 20 W", s)
	}
	a := g.begin(10*ms, 50) // 50 mJ over 10 ms: 5 W on top of idle
	clock.Advance(4 * ms)
	b := g.begin(2*ms, 8) // 8 mJ over 2 ms: 4 W
	s := g.sample()
	if !near(s.PowerW, 20+5+4) {
		t.Errorf("power with two batches running = %v W, want 29", s.PowerW)
	}
	if want := 20*0.004 + 0.050*0.4; !near(s.EnergyJ, want) {
		t.Errorf("energy 4 ms in = %v J, want %v", s.EnergyJ, want)
	}
	clock.Advance(2 * ms)
	g.end(b)
	clock.Advance(4 * ms)
	g.end(a)
	clock.Advance(990 * ms) // 1 s since start
	s = g.sample()
	if want := 20*1.0 + 0.050 + 0.008; !near(s.EnergyJ, want) {
		t.Errorf("energy after 1 s = %v J, want idle 20 J + 58 mJ = %v", s.EnergyJ, want)
	}
	if !near(s.PowerW, 20) {
		t.Errorf("idle power = %v, want 20", s.PowerW)
	}
	if !near(s.Utilization, 0.010) {
		t.Errorf("utilization = %v, want 10 ms busy in 1 s = 0.01", s.Utilization)
	}

	// A batch cut short is charged for the share it ran; zero-time batches in full.
	c := g.begin(10*ms, 100)
	clock.Advance(3 * ms)
	g.end(c)
	g.end(g.begin(0, 7))
	if want := 20*1.003 + 0.058 + 0.030 + 0.007; !near(g.sample().EnergyJ, want) {
		t.Errorf("energy = %v J, want %v", g.sample().EnergyJ, want)
	}
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

// waitFor is testpoll.Until with a formatted what: it synchronises with
// goroutines, it does not measure time.
func waitFor(t *testing.T, cond func() bool, format string, args ...any) {
	t.Helper()
	testpoll.Until(t, fmt.Sprintf(format, args...), cond)
}
