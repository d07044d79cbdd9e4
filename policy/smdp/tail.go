package smdp

import (
	"math"
	"math/rand/v2"
	"sync"
)

// TailRule is a control-limit rule as the live budget rule runs it
// (policy.BudgetRule): with an instance free it sends min(queue, B_max)
// from Second rows on, waits below First, and in between waits with
// probability Mix (one draw per queue state); a row held HoldMs goes
// whatever the count. First 1 with Mix 0 is ad-hoc.
type TailRule struct {
	First, Second int
	Mix           float64
	// HoldMs bounds the wait of a partial batch's oldest row; 0 never
	// holds (ad-hoc), +Inf holds until the limit is reached.
	HoldMs float64
}

// TailOptions size the simulation of TailLatency.
type TailOptions struct {
	// Requests is how many requests are measured (0: DefaultTailRequests),
	// after a warm-up of a twentieth of them from an empty queue.
	Requests int
	// Seed fixes the arrivals and batch times: two rules simulated with
	// one seed see the same arrivals (common random numbers), so their
	// difference is not sampling noise.
	Seed uint64
}

// DefaultTailRequests is the default length of TailLatency's simulation:
// at rho 0.5 the p99 of 20,000 requests has a relative standard error of a
// few per cent, and the simulation takes a few milliseconds.
const DefaultTailRequests = 20000

// Tail is the latency distribution a rule gives on a model, and what it
// costs.
type Tail struct {
	MeanMs, P50Ms, P90Ms, P99Ms float64
	// EnergyMJ is the mean batch energy per request (zeta(b)/b averaged
	// over requests, the model's energy line; zero without one).
	EnergyMJ float64
	// MeanBatch is the mean size of the batches sent.
	MeanBatch float64
}

// TailLatency simulates rule r on model m and returns the distribution of
// a request's latency: its wait, its batch's time on the instance (tau(b)
// and the proxy's hold, Gamma-distributed with the model's spread scale
// when ServiceSCV > 0, exact otherwise) and the time after its batch
// (Extra.AfterMs), as the SMDP prices the mean (docs/ALGORITHMS.md, "The
// tail"). Arrivals are Poisson at the model's rate; one instance serves.
//
// The SMDP gives the mean exactly but not the percentiles: the wait of a
// request depends on the queue it meets and on the arrivals after it, a
// distribution the embedded chain does not carry. The simulation is
// seeded, so a plan computed twice is the same plan, and bounded by
// Requests.
//
// TailLatency stays one function: it is one discrete-event simulation, whose
// loop reads the queue, the rule and the clock together; cut into steps,
// each would pass the whole state along.
func TailLatency(m Model, r TailRule, o TailOptions) Tail {
	n := o.Requests
	if n <= 0 {
		n = DefaultTailRequests
	}
	warm := n / 20
	rng := rand.New(rand.NewPCG(o.Seed, 0x7a11))
	lambda := m.LambdaPerMs
	theta := m.SpreadScaleMs()
	first, second := max(r.First, 1), max(r.Second, r.First, 1)
	bmax := max(m.MaxBatch, 1)
	hold := r.HoldMs
	if !(hold >= 0) {
		hold = 0
	}

	buf := latencies(n + bmax)
	defer latencyPool.Put(buf)
	sample := tally{lat: (*buf)[:0], warm: warm}
	var (
		base             = make([]float64, 0, 4*bmax)
		queue            = base // arrival times of the waiting rows
		now, nextArrival float64
		free             float64 // when the instance frees up
		drawn            bool    // a draw for the queue's current state
		wait             bool    // that draw: hold for Second
	)
	nextArrival = rng.ExpFloat64() / lambda
	for sample.measured < n {
		// The next event: an arrival, the instance freeing up, or the
		// oldest row's hold running out.
		t := nextArrival
		if free > now && free < t {
			t = free
		}
		if len(queue) > 0 && free <= now && !math.IsInf(hold, 1) {
			if due := queue[0] + hold; due < t {
				t = max(due, now)
			}
		}
		now = t
		if now == nextArrival {
			queue = append(queue, now)
			nextArrival = now + rng.ExpFloat64()/lambda
			drawn = false
		}
		if free > now || len(queue) == 0 {
			continue
		}
		q := len(queue)
		send := q >= second || q >= bmax || now >= queue[0]+hold
		if !send && q >= first {
			if !drawn {
				drawn, wait = true, rng.Float64() < r.Mix
			}
			send = !wait
		}
		if !send {
			continue
		}
		a := min(q, bmax)
		mean := m.ServiceMs(a)
		s := mean
		if theta > 0 {
			s = gamma(rng, mean/theta) * theta
		}
		free = now + s
		sample.batch(m, queue[:a], now, s)
		queue = queue[a:]
		if len(queue) == 0 {
			queue = base[:0]
		}
		drawn = false
	}
	return sample.tail()
}

// tally is what a tail simulation measures: the latency of each request
// after its warm-up, and the batches they went in.
type tally struct {
	lat            []float64
	warm, seen     int
	latSum, energy float64
	measured       int
	batches, rows  int
}

// batch counts a batch of the rows that arrived at arr, sent at now and
// on the instance for s ms, then answered Extra.AfterMs after it.
func (t *tally) batch(m Model, arr []float64, now, s float64) {
	a := len(arr)
	after := m.Extra.AfterMs(a)
	for _, at := range arr {
		t.seen++
		if t.seen <= t.warm {
			continue
		}
		l := now - at + s + after
		t.lat = append(t.lat, l)
		t.latSum += l
		t.measured++
	}
	if t.seen > t.warm {
		t.batches++
		t.rows += a
		t.energy += m.ZetaMJ(a)
	}
}

// tail is the distribution measured.
func (t *tally) tail() Tail {
	lat := t.lat
	if len(lat) == 0 {
		return Tail{}
	}
	// The percentiles as the sorted sample would give them, each found by
	// selection: p99's first, then each lower one among the values under
	// the last (the k-th smallest of the whole is the k-th of those).
	at := func(p float64) int { return min(int(p*float64(len(lat))), len(lat)-1) }
	k99, k90, k50 := at(0.99), at(0.90), at(0.50)
	out := Tail{MeanMs: t.latSum / float64(len(lat)), P99Ms: selectKth(lat, k99)}
	out.P90Ms = selectKth(lat[:k99+1], k90)
	out.P50Ms = selectKth(lat[:k90+1], k50)
	if t.rows > 0 {
		out.EnergyMJ = t.energy / float64(t.rows)
		out.MeanBatch = float64(t.rows) / float64(t.batches)
	}
	return out
}

// latencyPool keeps TailLatency's sample buffers. A plan's tail search
// runs a few dozen simulations of ten thousand requests: a fresh buffer
// each would allocate megabytes per plan and start garbage collections
// whose assists land on the request path of the proxy the plan runs in.
var latencyPool sync.Pool

// latencies is a buffer from latencyPool with room for n values.
func latencies(n int) *[]float64 {
	if b, ok := latencyPool.Get().(*[]float64); ok && cap(*b) >= n {
		return b
	}
	b := make([]float64, 0, n)
	return &b
}

// gamma draws a Gamma variate of the given shape and scale 1
// (Marsaglia and Tsang; shapes below 1 boosted by U^(1/shape)).
func gamma(rng *rand.Rand, shape float64) float64 {
	if !(shape > 0) {
		return 0
	}
	boost := 1.0
	if shape < 1 {
		boost = math.Pow(rng.Float64(), 1/shape)
		shape++
	}
	d := shape - 1.0/3
	c := 1 / math.Sqrt(9*d)
	for {
		x := rng.NormFloat64()
		v := 1 + c*x
		if v <= 0 {
			continue
		}
		v = v * v * v
		u := rng.Float64()
		if u < 1-0.0331*x*x*x*x || math.Log(u) < 0.5*x*x+d*(1-v+math.Log(v)) {
			return d * v * boost
		}
	}
}
