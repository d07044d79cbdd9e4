package power

import "time"

// A counter increment is believed only if the mean power it implies over the
// time since the previous reading, plus counterSlack, stays under
// maxPlausibleW. The slack admits sources that publish their counter in lumps
// (Triton updates it once per metrics interval, 2 s by default); the bound
// still rejects the jumps of a reset counter or of a counter kept in too few
// bits upstream, which are orders of magnitude larger.
const (
	maxPlausibleW = 10_000.0
	counterSlack  = 60 * time.Second
)

func maxPlausibleJ(dt time.Duration) float64 {
	if dt < 0 {
		dt = 0
	}
	return maxPlausibleW * (dt + counterSlack).Seconds()
}

// mjCounter follows a device's uint64 millijoule total (NVML's
// nvmlDeviceGetTotalEnergyConsumption). Unsigned subtraction makes a wrap
// past 2^64 an ordinary small increment; any other decrease is a reset.
type mjCounter struct {
	started bool
	prev    uint64
	prevT   time.Time
	totalJ  float64
}

// observe takes the raw counter at t and returns the energy since the first
// observation, and whether the counter was discontinuous since the last one.
func (c *mjCounter) observe(raw uint64, t time.Time) (totalJ float64, discontinuity bool) {
	if !c.started {
		c.started, c.prev, c.prevT = true, raw, t
		return c.totalJ, false
	}
	delta := raw - c.prev // wraps correctly past 2^64
	deltaJ := float64(delta) / 1000
	if deltaJ <= maxPlausibleJ(t.Sub(c.prevT)) {
		c.totalJ += deltaJ
	} else {
		discontinuity = true
	}
	c.prev, c.prevT = raw, t
	return c.totalJ, discontinuity
}

// jCounter follows a float joule total that only grows until its producer
// restarts (Triton's nv_energy_consumption counter).
type jCounter struct {
	started bool
	prev    float64
	prevT   time.Time
	totalJ  float64
}

func (c *jCounter) observe(raw float64, t time.Time) (totalJ float64, discontinuity bool) {
	if !c.started {
		c.started, c.prev, c.prevT = true, raw, t
		return c.totalJ, false
	}
	deltaJ := raw - c.prev
	if deltaJ >= 0 && deltaJ <= maxPlausibleJ(t.Sub(c.prevT)) {
		c.totalJ += deltaJ
	} else {
		discontinuity = true
	}
	c.prev, c.prevT = raw, t
	return c.totalJ, discontinuity
}

// restart forgets the baseline: the next observation starts afresh.
func (c *jCounter) restart() { c.started = false }
