package power

import (
	"context"
	"math"
	"sync"
	"testing"
	"time"
)

// fakeClock is a manual clock shared by a source and a Meter.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{t: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// scriptSource returns whatever the test put in next, stamped with the clock.
type scriptSource struct {
	clock *fakeClock
	next  []Reading
	err   error
	reads int
	// stamp, when set, is the readings' time instead of the clock's.
	stamp time.Time
}

func (s *scriptSource) Name() string { return "script" }
func (s *scriptSource) Close() error { return nil }
func (s *scriptSource) Read(ctx context.Context) ([]Reading, error) {
	s.reads++
	out := make([]Reading, len(s.next))
	for i, r := range s.next {
		r.Time = s.clock.Now()
		if !s.stamp.IsZero() {
			r.Time = s.stamp
		}
		out[i] = r
	}
	return out, s.err
}

// counterGPU builds a reading with energy and power.
func counterGPU(id string, energyJ, powerW float64) Reading {
	return Reading{GPU: id, EnergyJ: energyJ, HasEnergy: true, PowerW: powerW, HasPower: true}
}

func powerGPU(id string, powerW float64) Reading {
	return Reading{GPU: id, PowerW: powerW, HasPower: true}
}

func newTestMeter(t *testing.T, src Source, clock *fakeClock, windows ...time.Duration) *Meter {
	t.Helper()
	if windows == nil {
		windows = []time.Duration{10 * time.Second}
	}
	m, err := NewMeter(src, Options{Interval: time.Second, Windows: windows, Now: clock.Now})
	if err != nil {
		t.Fatalf("NewMeter: %v", err)
	}
	return m
}

func approx(got, want, tol float64) bool { return math.Abs(got-want) <= tol }

func val(p *float64) float64 {
	if p == nil {
		return math.NaN()
	}
	return *p
}

func checkApprox(t *testing.T, what string, got *float64, want, tol float64) {
	t.Helper()
	if got == nil {
		t.Errorf("%s = null, want %.6g", what, want)
		return
	}
	if !approx(*got, want, tol) {
		t.Errorf("%s = %.9g, want %.9g ± %g", what, *got, want, tol)
	}
}
