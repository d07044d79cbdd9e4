package power

import (
	"context"
	"math"
	"testing"
	"time"
)

// testCurve is a known board power curve in watts: a 150 W base, a 100 W
// swing with a 7 s period and a slow ramp, so that neither the sine's period
// nor the sampling step hides the integration error.
type testCurve struct{}

func (testCurve) power(t float64) float64 {
	return 150 + 100*math.Sin(2*math.Pi*t/7) + 0.5*t
}

// energy is the exact integral of power over [0, t].
func (testCurve) energy(t float64) float64 {
	return 150*t + 100*7/(2*math.Pi)*(1-math.Cos(2*math.Pi*t/7)) + 0.25*t*t
}

func (testCurve) slope(t float64) float64 { return 100*2*math.Pi/7*math.Cos(2*math.Pi*t/7) + 0.5 }

// maxCurvature is the largest absolute second derivative of the power.
func (testCurve) maxCurvature() float64 { return 100 * math.Pow(2*math.Pi/7, 2) }

// integrate runs a Meter over the curve, reading power every h for span
// seconds through read, and returns the Meter's energy.
func integrate(t *testing.T, h time.Duration, span float64, src Source, clock *fakeClock) float64 {
	t.Helper()
	m, err := NewMeter(src, Options{Interval: h, Windows: []time.Duration{time.Minute}, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	steps := int(math.Round(span / h.Seconds()))
	for i := 0; i <= steps; i++ {
		if err := m.Poll(context.Background()); err != nil {
			t.Fatal(err)
		}
		if i < steps {
			clock.Advance(h)
		}
	}
	e := m.Snapshot().GPUs[0].Windows[TotalWindow].EnergyJ
	if e == nil {
		t.Fatal("energy is null")
	}
	return *e
}

// curveSource reads testCurve at the clock's time since start.
type curveSource struct {
	clock *fakeClock
	start time.Time
}

func (s *curveSource) Name() string { return "curve" }
func (s *curveSource) Close() error { return nil }
func (s *curveSource) Read(context.Context) ([]Reading, error) {
	now := s.clock.Now()
	return []Reading{{Time: now, GPU: "GPU-0", PowerW: testCurve{}.power(now.Sub(s.start).Seconds()), HasPower: true}}, nil
}

// Trapezoidal integration of power sampled every h has the error
// (h^2/12)(P'(b) - P'(a)) + O(h^4) (Euler-Maclaurin), bounded by
// (b-a) h^2 M / 12, M the largest |second derivative|. The Meter must match
// the leading term and stay inside the bound, and its error must shrink fourfold when h halves.
func TestIntegrationAccuracy(t *testing.T) {
	const span = 61.0 // s; a whole number of steps for every h below
	c := testCurve{}
	exact := c.energy(span)
	tests := []struct{ h time.Duration }{{time.Second}, {500 * time.Millisecond}, {250 * time.Millisecond}}
	prevErr := 0.0
	for _, tt := range tests {
		clock := newFakeClock()
		got := integrate(t, tt.h, span, &curveSource{clock: clock, start: clock.Now()}, clock)
		h := tt.h.Seconds()
		errJ := got - exact
		leading := h * h / 12 * (c.slope(span) - c.slope(0))
		bound := span * h * h * c.maxCurvature() / 12
		t.Logf("h=%v: %.3f J vs exact %.3f J: error %+.4f J (%+.4f%%), Euler-Maclaurin %+.4f J, bound %.2f J",
			tt.h, got, exact, errJ, 100*errJ/exact, leading, bound)
		if math.Abs(errJ) > bound {
			t.Errorf("h=%v: error %.4f J exceeds the bound %.4f J", tt.h, errJ, bound)
		}
		if math.Abs(errJ-leading) > 0.05*math.Abs(leading) {
			t.Errorf("h=%v: error %.4f J, want the Euler-Maclaurin term %.4f J within 5%%", tt.h, errJ, leading)
		}
		if prevErr != 0 {
			if r := prevErr / errJ; r < 3.6 || r > 4.4 {
				t.Errorf("h=%v: halving h divided the error by %.2f, want about 4 (second order)", tt.h, r)
			}
		}
		prevErr = errJ
	}
}
