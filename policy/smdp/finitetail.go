package smdp

import (
	"math"
	"math/rand/v2"
)

// FiniteTailRule is a closed loop's table rule as the live budget rule
// runs it (policy.FiniteRule): with the instance free and s rows waiting
// it sends First[s] rows (0: waits for the next arrival), Second[s]
// instead with probability Share[s] (one draw per queue state); a row held
// HoldMs goes whatever the table says, and so do the rows when every
// client has its request in the proxy (no partner can come). A nil table,
// or HoldMs 0, is ad-hoc.
type FiniteTailRule struct {
	First, Second []int
	Share         []float64
	// HoldMs bounds the wait of a partial batch's oldest row; 0 never
	// holds (ad-hoc), +Inf holds as long as the table says.
	HoldMs float64
}

// FiniteTailLatency simulates rule r in the closed loop pop on model m and
// returns the distribution of a request's latency, as TailLatency does
// for Poisson arrivals: each of the loop's clients thinks an exponential
// time of mean pop.ThinkMs after its answer (the model SolveFinite
// solves), then sends; a batch's time on the instance is tau(b),
// Gamma-distributed with the model's spread scale when ServiceSCV > 0, and
// its rows are answered Extra.AfterMs(b) after it. m's rate is unused.
//
// The table the SMDP solves gives the loop's mean exactly but not its
// tail: a row waiting for a partner waits an exponential time, and the
// chain carries its mean only. A hold bound cuts that wait off, and only
// a simulation prices the cut (the budget's tail search for closed loops).
//
// It stays one function, as TailLatency does: one discrete-event
// simulation whose loop reads the queue, the clients and the clock
// together.
func FiniteTailLatency(m Model, pop Population, r FiniteTailRule, o TailOptions) Tail {
	n := o.Requests
	if n <= 0 {
		n = DefaultTailRequests
	}
	warm := n / 20
	rng := rand.New(rand.NewPCG(o.Seed, 0xc105ed))
	theta := m.SpreadScaleMs()
	bmax := max(m.MaxBatch, 1)
	clients := max(pop.Clients, 1)
	think := pop.ThinkMs
	hold := r.HoldMs
	if !(hold >= 0) || len(r.First) == 0 {
		hold = 0
	}
	action := func(s int, second bool) int {
		t := r.First
		if second && len(r.Second) > 0 {
			t = r.Second
		}
		return t[min(s, len(t)-1)]
	}

	buf := latencies(n + bmax)
	defer latencyPool.Put(buf)
	sample := tally{lat: (*buf)[:0], warm: warm}
	type answer struct {
		at   float64
		rows int
	}
	var (
		queue         = make([]float64, 0, clients) // arrival times of the waiting rows
		answers       = make([]answer, 0, clients)  // batches sent, from head on not yet answered, in order
		head          int
		thinking      = clients
		now           float64
		free          float64 // when the instance frees up
		drawn, second bool    // a draw for the queue's current state, and what it said
	)
	// The next arrival among the thinking clients: exponential thinkers
	// are memoryless, so it is drawn afresh whenever their number changes.
	nextArrival := math.Inf(1)
	redraw := func() {
		nextArrival = math.Inf(1)
		if thinking > 0 {
			nextArrival = now + rng.ExpFloat64()*think/float64(thinking)
		}
	}
	redraw()
	for sample.measured < n {
		// The next event: an arrival, an answer, the instance freeing up,
		// or the oldest row's hold running out.
		t := nextArrival
		if head < len(answers) && answers[head].at < t {
			t = answers[head].at
		}
		if free > now && free < t {
			t = free
		}
		if len(queue) > 0 && free <= now {
			if due := queue[0] + hold; due < t {
				t = max(due, now)
			}
		}
		if math.IsInf(t, 1) {
			break // nobody thinking, nothing queued or in flight: cannot happen
		}
		now = t
		switch {
		case head < len(answers) && now == answers[head].at:
			thinking += answers[head].rows
			if head++; head == len(answers) {
				answers, head = answers[:0], 0
			}
			redraw()
		case now == nextArrival:
			queue = append(queue, now)
			thinking--
			redraw()
			drawn = false
		}
		if free > now || len(queue) == 0 {
			continue
		}
		q := len(queue)
		a := min(q, bmax)
		if thinking > 0 && now < queue[0]+hold {
			s := min(q, clients)
			if !drawn {
				drawn = true
				second = len(r.Share) > s && rng.Float64() < r.Share[s]
			}
			if x := action(s, second); x <= 0 {
				continue
			} else {
				a = min(x, a)
			}
		}
		mean := m.ServiceMs(a)
		s := mean
		if theta > 0 {
			s = gamma(rng, mean/theta) * theta
		}
		free = now + s
		answers = append(answers, answer{at: free + m.Extra.AfterMs(a), rows: a})
		sample.batch(m, queue[:a], now, s)
		queue = append(queue[:0], queue[a:]...)
		drawn = false
	}
	return sample.tail()
}
