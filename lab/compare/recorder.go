package compare

import (
	"fmt"
	"math"
	"time"

	"github.com/ratebatch/ratebatch/lab/preset"
	"github.com/ratebatch/ratebatch/lab/sim"
	"github.com/ratebatch/ratebatch/policy"
)

// recorder wraps a policy for one simulator run and rebuilds every
// request's latency from the decisions the simulator asks for, to count SLA
// violations and concurrent launches, which sim.Result does not report.
//
// It relies on what the simulator documents: the rule is asked after every
// arrival (so a queue that grew by one row grew at Queue.Now), a Send takes
// min(Rows, Queue.Rows, MaxBatch) rows from the head of the FIFO when an
// instance is free, and a batch of n takes exactly tau(n) without jitter.
// Because that is an inference, check compares the rebuilt latencies with
// the simulator's own mean, maximum and count and refuses the figures when
// they differ. A recorder is for one run on one goroutine; it is not the
// concurrency-safe Rule the live dispatcher needs.
type recorder struct {
	inner policy.Policy
	prof  preset.Profile
	slaMs float64 // 0: no SLA

	arrivals []time.Time // FIFO of waiting rows
	head     int

	requests, violations int
	sumMs, maxMs         float64
	launches, concurrent int // batches sent; of them, sent while another ran
	lostTrack            error
}

func newRecorder(p policy.Policy, prof preset.Profile, sla time.Duration) *recorder {
	return &recorder{inner: p, prof: prof, slaMs: float64(sla) / float64(time.Millisecond)}
}

// Name implements policy.Policy.
func (r *recorder) Name() string { return r.inner.Name() }

// Plan implements policy.Policy. The rule recorded is the one the proxy
// runs, its holds bounded (policy.BoundHolds) as the monitor bounds them:
// a batch the bound sends must be seen here, or the record loses track.
func (r *recorder) Plan(e policy.Estimate) policy.Rule {
	return recordedRule{r: r, inner: policy.BoundHolds(r.inner.Plan(e), e)}
}

type recordedRule struct {
	r     *recorder
	inner policy.Rule
}

func (rr recordedRule) Status() policy.Status { return rr.inner.Status() }

// HoldAllowance implements policy.HoldAllower: the rule inside already
// bounds its holds (Plan), so the monitor's bound around this one must
// never send a batch the record would not see.
func (rr recordedRule) HoldAllowance() time.Duration { return 365 * 24 * time.Hour }

func (rr recordedRule) Decide(q policy.Queue) policy.Decision {
	r := rr.r
	waiting := len(r.arrivals) - r.head
	switch grew := q.Rows - waiting; {
	case grew == 1:
		r.arrivals = append(r.arrivals, q.Now)
	case grew != 0 && r.lostTrack == nil:
		r.lostTrack = fmt.Errorf("queue went from %d to %d rows between two decisions at %v", waiting, q.Rows, q.Now.Sub(sim.Epoch))
	}
	d := rr.inner.Decide(q)
	if d.Rows <= 0 {
		return d
	}
	if q.Rows == 0 || q.InFlight >= q.Instances {
		return d // the simulator sends nothing
	}
	n := min(d.Rows, q.Rows, q.MaxBatch)
	r.launches++
	if q.InFlight > 0 {
		r.concurrent++
	}
	// The simulator's batch end, to the nanosecond.
	end := q.Now.Add(max(r.prof.TauDuration(n), 1))
	for _, at := range r.arrivals[r.head : r.head+n] {
		ms := float64(end.Sub(at)) / float64(time.Millisecond)
		r.sumMs += ms
		r.maxMs = max(r.maxMs, ms)
		r.requests++
		if r.slaMs > 0 && ms > r.slaMs {
			r.violations++
		}
	}
	r.head += n
	if r.head > 4096 && r.head*2 > len(r.arrivals) {
		r.arrivals = r.arrivals[:copy(r.arrivals, r.arrivals[r.head:])]
		r.head = 0
	}
	return d
}

// check compares the rebuilt latencies with the simulator's result.
func (r *recorder) check(res sim.Result) error {
	if r.lostTrack != nil {
		return fmt.Errorf("rebuilding latencies of %s: %w", res.Policy, r.lostTrack)
	}
	if r.requests != res.Requests {
		return fmt.Errorf("rebuilding latencies of %s: %d requests rebuilt, the simulator served %d", res.Policy, r.requests, res.Requests)
	}
	if r.requests == 0 {
		return nil
	}
	mean := r.sumMs / float64(r.requests)
	if !near(mean, res.MeanLatencyMs) || !near(r.maxMs, res.MaxLatencyMs) {
		return fmt.Errorf("rebuilding latencies of %s: mean %v ms and max %v ms rebuilt, the simulator measured %v and %v",
			res.Policy, mean, r.maxMs, res.MeanLatencyMs, res.MaxLatencyMs)
	}
	return nil
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*max(math.Abs(a), math.Abs(b), 1e-9) }
