// Package trace describes how a request rate moves over time, as a
// piecewise-linear series of (time, rate) points, and draws Poisson arrival
// times that follow it. The simulator and the load generator read the same
// series, so a simulated run and a live one see the same load.
package trace

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"time"
)

// Point is the arrival rate at one instant of a series.
type Point struct {
	At         time.Duration // from the start of the series
	RatePerSec float64
}

// Series is an arrival rate that moves linearly between its points. It is
// immutable and safe for concurrent use.
type Series struct {
	name   string
	points []Point
}

// New validates points and returns the series. The first point must be at
// time 0, times must increase strictly, and rates must be finite and >= 0.
// A single point is a constant rate of zero duration, so at least two are
// needed.
func New(name string, points []Point) (*Series, error) {
	if len(points) < 2 {
		return nil, fmt.Errorf("trace %q: need at least 2 points, got %d", name, len(points))
	}
	if points[0].At != 0 {
		return nil, fmt.Errorf("trace %q: first point must be at time 0, got %v", name, points[0].At)
	}
	for i, p := range points {
		if math.IsNaN(p.RatePerSec) || math.IsInf(p.RatePerSec, 0) || p.RatePerSec < 0 {
			return nil, fmt.Errorf("trace %q: point %d: rate must be a finite number >= 0, got %v", name, i+1, p.RatePerSec)
		}
		if i > 0 && p.At <= points[i-1].At {
			return nil, fmt.Errorf("trace %q: point %d: time %v does not come after %v", name, i+1, p.At, points[i-1].At)
		}
	}
	return &Series{name: name, points: slices.Clone(points)}, nil
}

// Constant is a series at one rate for d.
func Constant(ratePerSec float64, d time.Duration) (*Series, error) {
	if d <= 0 {
		return nil, fmt.Errorf("constant trace: duration must be > 0, got %v", d)
	}
	return New(fmt.Sprintf("constant %g/s", ratePerSec), []Point{{0, ratePerSec}, {d, ratePerSec}})
}

// Name is the series' name.
func (s *Series) Name() string { return s.name }

// Points returns a copy of the series' points.
func (s *Series) Points() []Point { return slices.Clone(s.points) }

// Duration is the time of the last point: arrivals end there.
func (s *Series) Duration() time.Duration { return s.points[len(s.points)-1].At }

// RateAt returns the rate at t in requests per second, interpolating
// linearly between points and holding the first and last rates outside them.
func (s *Series) RateAt(t time.Duration) float64 {
	i := s.segment(t)
	if i < 0 {
		return s.points[0].RatePerSec
	}
	if i >= len(s.points)-1 {
		return s.points[len(s.points)-1].RatePerSec
	}
	return s.interp(i, t)
}

// segment returns i with points[i].At <= t < points[i+1].At, -1 before the
// start and len-1 at or after the end.
func (s *Series) segment(t time.Duration) int {
	return sort.Search(len(s.points), func(i int) bool { return s.points[i].At > t }) - 1
}

func (s *Series) interp(i int, t time.Duration) float64 {
	a, b := s.points[i], s.points[i+1]
	f := float64(t-a.At) / float64(b.At-a.At)
	return a.RatePerSec + f*(b.RatePerSec-a.RatePerSec)
}

// MaxRate is the highest rate in the series.
func (s *Series) MaxRate() float64 {
	m := 0.0
	for _, p := range s.points {
		m = math.Max(m, p.RatePerSec)
	}
	return m
}

// Expected is the expected number of arrivals over the whole series (the
// integral of the rate).
func (s *Series) Expected() float64 {
	var n float64
	for i := 0; i+1 < len(s.points); i++ {
		a, b := s.points[i], s.points[i+1]
		n += (a.RatePerSec + b.RatePerSec) / 2 * (b.At - a.At).Seconds()
	}
	return n
}

// MeanRate is Expected / Duration in requests per second.
func (s *Series) MeanRate() float64 { return s.Expected() / s.Duration().Seconds() }

// Compress plays the same shape factor times faster: point times are divided
// by factor and rates kept, so a 300 s trace compressed 10x runs in 30 s
// with a tenth of the requests, for a quick demo.
func (s *Series) Compress(factor float64) (*Series, error) {
	if !(factor > 0) || math.IsInf(factor, 0) {
		return nil, fmt.Errorf("trace %q: compression factor must be a finite number > 0, got %v", s.name, factor)
	}
	pts := s.Points()
	for i := range pts {
		pts[i].At = time.Duration(float64(pts[i].At) / factor)
	}
	return New(fmt.Sprintf("%s/%g", s.name, factor), pts)
}

// Scale multiplies every rate by k, keeping the shape: it moves a trace to
// the load range of another model.
func (s *Series) Scale(k float64) (*Series, error) {
	if !(k >= 0) || math.IsInf(k, 0) {
		return nil, fmt.Errorf("trace %q: rate scale must be a finite number >= 0, got %v", s.name, k)
	}
	pts := s.Points()
	for i := range pts {
		pts[i].RatePerSec *= k
	}
	return New(fmt.Sprintf("%s*%g", s.name, k), pts)
}

// Arrivals draws Poisson arrival times that follow a series, by thinning
// each segment at its own peak rate. It is not safe for concurrent use.
type Arrivals struct {
	s   *Series
	rng *rand.Rand
	t   time.Duration
	seg int
}

// Arrivals starts a draw of arrival times from time 0 with rng.
func (s *Series) Arrivals(rng *rand.Rand) *Arrivals {
	return &Arrivals{s: s, rng: rng}
}

// Draw is Arrivals as a simulated run draws them (replay.Series): next is
// the draw's Next.
func (s *Series) Draw(rng *rand.Rand) (next func() (time.Duration, bool)) {
	return s.Arrivals(rng).Next
}

// Next returns the next arrival time, and false once the series has ended.
func (a *Arrivals) Next() (time.Duration, bool) {
	pts := a.s.points
	for a.seg < len(pts)-1 {
		lo, hi := pts[a.seg], pts[a.seg+1]
		peak := math.Max(lo.RatePerSec, hi.RatePerSec)
		if peak == 0 {
			a.t, a.seg = hi.At, a.seg+1
			continue
		}
		gap := a.rng.ExpFloat64() / peak * float64(time.Second)
		if float64(hi.At-a.t) <= gap {
			// No candidate in this segment; the process is memoryless, so
			// restart at the segment's end.
			a.t, a.seg = hi.At, a.seg+1
			continue
		}
		a.t += max(time.Duration(gap), 1)
		if a.rng.Float64()*peak < a.s.interp(a.seg, a.t) {
			return a.t, true
		}
	}
	return 0, false
}
