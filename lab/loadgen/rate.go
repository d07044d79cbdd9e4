package loadgen

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// Rate is an arrival-rate series: the intended requests per second at an
// offset from the start of the run. Run draws a Poisson process that follows
// it, so any series drives the same scheduler: a ConstantRate, or a
// *trace.Series, which has these methods.
type Rate interface {
	// RateAt is the rate in requests per second at offset t (t >= 0).
	RateAt(t time.Duration) float64
	// MaxRate bounds RateAt over the run from above; the thinning sampler
	// proposes arrivals at this rate and keeps each with probability
	// RateAt(t)/MaxRate.
	MaxRate() float64
}

// ConstantRate is a homogeneous Poisson load of that many requests per second.
type ConstantRate float64

// RateAt returns the constant rate.
func (r ConstantRate) RateAt(time.Duration) float64 { return float64(r) }

// MaxRate returns the constant rate.
func (r ConstantRate) MaxRate() float64 { return float64(r) }

// arrivals draws the arrival offsets of a Poisson process with intensity
// Rate over [0, end), by thinning (Lewis and Shedler): candidates come at the
// constant rate MaxRate and each is kept with probability RateAt(t)/MaxRate.
// The draws depend on the seed only, never on how the target answers: the
// load is open loop.
type arrivals struct {
	rate  Rate
	max   float64 // per second
	end   time.Duration
	rng   *rand.Rand
	t     float64 // seconds since start of the last candidate
	exact bool    // RateAt == MaxRate everywhere: skip the acceptance draw
}

func newArrivals(rate Rate, seed uint64, end time.Duration) (*arrivals, error) {
	if rate == nil {
		return nil, fmt.Errorf("no arrival rate: set a constant rate or a trace")
	}
	max := rate.MaxRate()
	if !(max > 0) || math.IsInf(max, 0) {
		return nil, fmt.Errorf("arrival rate bound %v req/s must be positive and finite", max)
	}
	_, constant := rate.(ConstantRate)
	return &arrivals{
		rate:  rate,
		max:   max,
		end:   end,
		rng:   rand.New(rand.NewPCG(seed, 0x6c6f616467656e31)), // "loadgen1"
		exact: constant,
	}, nil
}

// next returns the offset of the next arrival, and false once none is left
// before the end. A series that exceeds its own MaxRate is clipped to it
// (thinning cannot add arrivals). Each call draws about MaxRate/RateAt
// candidates, and never more than MaxRate*end in all.
func (a *arrivals) next() (time.Duration, bool) {
	for {
		a.t += a.rng.ExpFloat64() / a.max
		off := time.Duration(a.t * float64(time.Second))
		if off >= a.end {
			a.t = a.end.Seconds() // stay over: later calls end at once
			return 0, false
		}
		if a.exact || a.rng.Float64()*a.max < a.rate.RateAt(off) {
			return off, true
		}
	}
}

// maxRunLength bounds every run.
const maxRunLength = 7 * 24 * time.Hour

// Schedule returns the arrival offsets Run draws for rate and seed over a
// run of d (at most requests of them when requests > 0). The load is open
// loop, so these are the moments Run sends its requests, less the
// scheduler's lateness: the simulator replays them (sim.Config.Arrivals) to
// see the same realisation of the Poisson process as a live run, not
// another one of the same rate.
func Schedule(rate Rate, seed uint64, d time.Duration, requests int) ([]time.Duration, error) {
	if d <= 0 || d > maxRunLength {
		return nil, fmt.Errorf("duration must be in (0, %v], got %v", maxRunLength, d)
	}
	arr, err := newArrivals(rate, seed, d)
	if err != nil {
		return nil, err
	}
	var out []time.Duration
	for requests <= 0 || len(out) < requests {
		t, more := arr.next()
		if !more {
			break
		}
		out = append(out, t)
	}
	return out, nil
}
