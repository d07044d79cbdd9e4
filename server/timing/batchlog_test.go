package timing_test

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ratebatch/ratebatch/dispatcher"
	"github.com/ratebatch/ratebatch/internal/stats"
	"github.com/ratebatch/ratebatch/policy"
)

// batchLog records, test-side, when rows reached the queue, when the policy
// planned, every decision its rules made and every round trip the monitor
// was told of, so that a live run's batches can be measured and its clock
// lined up with a simulation's without adding anything to the proxy: the
// live proxy's model observes its queue beside its monitor (batchRecorder,
// given to the dispatcher) and its policy is wrapped (recordingPolicy,
// given to its monitor), and a simulated policy alike.
type batchLog struct {
	mu        sync.Mutex
	arrivals  []time.Time // live: when each row reached the queue
	plans     []time.Time // when the policy planned (the monitor's ticks)
	decisions []decision  // in the order the rules were asked
	trips     []trip      // live: in the order the batches were answered
}

// decision is one call of a rule's Decide: the queue it saw and the rows
// it sent (0: none).
type decision struct {
	at       time.Time
	oldest   time.Time // the oldest waiting row's arrival
	waiting  int
	inFlight int
	sent     int
	planned  int // the rule's batch size (Status().BatchSize)
}

// trip is one batch's round trip as the monitor was told it, and when.
type trip struct {
	at   time.Time
	rows int
	rt   time.Duration
}

func (l *batchLog) decide(r policy.Rule, q policy.Queue) policy.Decision {
	d := r.Decide(q)
	sent := 0
	if d.Rows > 0 && q.Rows > 0 && q.InFlight < q.Instances {
		sent = min(d.Rows, q.Rows, q.MaxBatch)
	}
	l.mu.Lock()
	l.decisions = append(l.decisions, decision{at: q.Now, oldest: q.OldestArrival, waiting: q.Rows, inFlight: q.InFlight, sent: sent, planned: r.Status().BatchSize})
	l.mu.Unlock()
	return d
}

// loggedRule is a rule whose decisions are logged.
type loggedRule struct {
	policy.Rule
	log *batchLog
}

func (r loggedRule) Decide(q policy.Queue) policy.Decision { return r.log.decide(r.Rule, q) }

// batchRecorder logs the live queue's arrivals and the round trips of the
// batches the upstream answered (what the monitor learns from), observing
// the model beside its monitor.
type batchRecorder struct {
	dispatcher.NopObserver
	log *batchLog
}

func (p batchRecorder) Arrived(a dispatcher.Arrival) {
	p.log.mu.Lock()
	now := time.Now()
	for range a.Rows {
		p.log.arrivals = append(p.log.arrivals, now)
	}
	p.log.mu.Unlock()
}

func (p batchRecorder) BatchEnded(_ *dispatcher.Batch, e dispatcher.BatchEnd) {
	if !e.OK {
		return
	}
	now := time.Now()
	p.log.mu.Lock()
	p.log.trips = append(p.log.trips, trip{at: now, rows: e.Rows, rt: e.RoundTrip})
	p.log.mu.Unlock()
}

// recordingPolicy is a policy with its plans and its rules' decisions
// logged.
type recordingPolicy struct {
	policy.Policy
	log *batchLog
}

func (p recordingPolicy) Plan(e policy.Estimate) policy.Rule {
	p.log.mu.Lock()
	r := p.Policy.Plan(e)
	p.log.plans = append(p.log.plans, e.Now)
	p.log.mu.Unlock()
	return loggedRule{r, p.log}
}

// alignedArrivals returns the live rows' arrivals at the queue as offsets
// from the last tick of the monitor (every slice, planned after since)
// before the first of them: a simulation started there ticks when the
// live monitor did. The live monitor's ticks fall on a grid of period
// slice (a time.Ticker's), delivered late now and then, so the grid is
// taken from the tick least late.
func (l *batchLog) alignedArrivals(since time.Time, slice time.Duration) ([]time.Duration, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.arrivals) == 0 {
		return nil, fmt.Errorf("no arrival logged")
	}
	first := l.arrivals[0]
	phase := time.Duration(-1) // of the ticks after first, modulo slice
	for _, p := range l.plans {
		if p.After(since) {
			ph := time.Duration(math.Mod(float64(p.Sub(first)), float64(slice)))
			if ph < 0 {
				ph += slice
			}
			if phase < 0 || ph < phase {
				phase = ph
			}
		}
	}
	if phase < 0 {
		return nil, fmt.Errorf("no tick logged after %v", since)
	}
	start := first.Add(phase - slice)
	out := make([]time.Duration, len(l.arrivals))
	for i, a := range l.arrivals {
		out[i] = a.Sub(start)
	}
	return out, nil
}

// sizes counts the batches of each size the log's rule sent.
func (l *batchLog) sizes() map[int]int { return l.countSent(func(d decision) int { return d.sent }) }

// planned counts the batches sent under each planned batch size.
func (l *batchLog) planned() map[int]int {
	return l.countSent(func(d decision) int { return d.planned })
}

// countSent counts the decisions that sent a batch, by key.
func (l *batchLog) countSent(key func(decision) int) map[int]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	h := map[int]int{}
	for _, d := range l.decisions {
		if d.sent > 0 {
			h[key(d)]++
		}
	}
	return h
}

// liveOverheads is what a live log says of the time a batch holds the
// instance beyond its compute, for a server whose compute is known.
type liveOverheads struct {
	// RoundTrip is each batch's round trip beyond compute, as the planner
	// was told it (what the monitor sees).
	RoundTrip []time.Duration
	// Hold is, for each batch whose successor was sent by the first
	// decision after its answer with rows that waited for it (back to back:
	// the server did not wait for arrivals), the time from its decision to
	// its successor's beyond compute: all the instance was held for.
	Hold []time.Duration
	// Turnaround is Hold less the batch's round trip beyond compute: the
	// proxy's own time per batch outside the round trip it measures.
	Turnaround []time.Duration
}

// overheads measures a live log of a server whose compute is exactly
// computeOf(rows). The log must come from one instance: decisions and
// answers alternate.
func (l *batchLog) overheads(computeOf func(rows int) time.Duration) liveOverheads {
	l.mu.Lock()
	defer l.mu.Unlock()
	var o liveOverheads
	var sends []decision
	for _, d := range l.decisions {
		if d.sent > 0 {
			sends = append(sends, d)
		}
	}
	n := min(len(sends), len(l.trips))
	for i := range n {
		o.RoundTrip = append(o.RoundTrip, l.trips[i].rt-computeOf(l.trips[i].rows))
	}
	// The first decision with the instance free after answer i.
	j := 0
	for i := range n - 1 {
		done := l.trips[i].at
		for j < len(l.decisions) && (l.decisions[j].at.Before(done) || l.decisions[j].inFlight > 0) {
			j++
		}
		if j == len(l.decisions) {
			break
		}
		if d := l.decisions[j]; d.sent > 0 && d.oldest.Before(done) {
			hold := d.at.Sub(sends[i].at) - computeOf(l.trips[i].rows)
			o.Hold = append(o.Hold, hold)
			o.Turnaround = append(o.Turnaround, hold-o.RoundTrip[i])
		}
	}
	return o
}

func meanDuration(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return sum / time.Duration(len(ds))
}

// distribution formats mean, p50, p90, p99, max and CV of ds in ms.
func distribution(ds []time.Duration) string {
	if len(ds) == 0 {
		return "none"
	}
	v := make([]float64, len(ds))
	var sum float64
	for i, d := range ds {
		v[i] = float64(d) / float64(time.Millisecond)
		sum += v[i]
	}
	mean := sum / float64(len(v))
	var ss float64
	for _, x := range v {
		ss += (x - mean) * (x - mean)
	}
	slices.Sort(v)
	return fmt.Sprintf("n %d mean %.3f p50 %.3f p90 %.3f p99 %.3f max %.3f ms CV %.2f", len(v), mean,
		stats.Percentile(v, 50), stats.Percentile(v, 90), stats.Percentile(v, 99), v[len(v)-1], math.Sqrt(ss/float64(len(v)))/mean)
}

// histogramString formats counts per size as shares.
func histogramString(h map[int]int) string {
	var total int
	for _, c := range h {
		total += c
	}
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(h)) {
		fmt.Fprintf(&b, " %d:%.1f%%", k, 100*float64(h[k])/float64(total))
	}
	return b.String()
}
