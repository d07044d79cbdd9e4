package monitor

import (
	"math"
	"time"
)

// Tick ends the current slice now: it takes the arrival count, updates the
// rate estimate, re-fits tau(b) and publishes the policy's new rule. Run
// calls it; the simulator and tests may too.
func (m *Monitor) Tick() {
	now := m.now()
	n := m.arrivals.Swap(0)
	m.mu.Lock()
	elapsed := now.Sub(m.last)
	m.last = now
	if elapsed <= 0 {
		elapsed = m.TickEvery()
	}
	span, count := m.rate.add(int(n), elapsed)
	m.mu.Unlock()
	m.plan(now, span, count, decisionCount{m.decisions.Swap(0), m.openDecisions.Swap(0)})
}

// decisionCount is a slice's decisions, and those at which a partner
// could have come.
type decisionCount struct{ all, open int64 }

// rateEstimator estimates the arrival rate from counts per slice of the
// window. In steady load it is the count over the last window (a sliding
// window, re-planned every slice, so it lags a change by half a window
// instead of a whole one). A step is followed within one slice: when the
// newest slice's count is implausible under the rate of the slices before
// it (more than 3 Poisson standard deviations plus 2 off the count that
// rate predicts, counting the noise of both), the older slices are dropped
// and the rate is the newest slice's. Under a steady Poisson load that
// happens by chance in few slices (docs/LEARNING.md, "Starting right and
// following steps"; TestRateEstimatorRarelyMistakesNoiseForAStep), and then
// costs one slice of a noisier estimate; a step from idle to 4 or more
// arrivals per slice is caught at once.
// A plain moving average cannot do both: a short one is noisy, a long one
// builds a queue for a whole window after every step, which is exactly
// the cold start the first requests of a model see.
type rateEstimator struct {
	window time.Duration
	slices []rateSlice // oldest first, spanning at most about a window
}

type rateSlice struct {
	n int
	d time.Duration
}

// add records a slice and returns the span and count the rate is n/span.
func (r *rateEstimator) add(n int, d time.Duration) (time.Duration, int) {
	var oldN int
	var oldD time.Duration
	for _, s := range r.slices {
		oldN += s.n
		oldD += s.d
	}
	if oldD > 0 {
		// The difference of the new count and the one the older slices
		// predict has variance want*(1 + d/oldD) under a steady Poisson load.
		want := float64(oldN) * float64(d) / float64(oldD)
		sd := math.Sqrt(math.Max(want, 1) * (1 + float64(d)/float64(oldD)))
		if math.Abs(float64(n)-want) > 3*sd+2 {
			r.slices = r.slices[:0] // a step: what came before no longer says anything
		}
	}
	r.slices = append(r.slices, rateSlice{n, d})
	var span time.Duration
	var count int
	for _, s := range r.slices {
		span += s.d
		count += s.n
	}
	// Drop the oldest slices while the rest still spans the window, to
	// within half a slice: a wall clock's ticks come microseconds early or
	// late, and four slices spanning 999.9 ms must not keep a fifth. Held
	// to the exact window, the live estimate was often the count over a
	// window and a slice (a simulation's, whose ticks are exact, never),
	// which moved its batch sizes away from the simulated ones
	// (docs/LEARNING.md, "The simulator predicts the live proxy").
	for len(r.slices) > 1 && span-r.slices[0].d >= r.window-d/2 {
		span -= r.slices[0].d
		count -= r.slices[0].n
		r.slices = r.slices[1:]
	}
	return span, count
}
