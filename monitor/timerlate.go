package monitor

import (
	"math"
	"sync/atomic"
	"time"

	"github.com/ratebatch/ratebatch/dispatcher"
	"github.com/ratebatch/ratebatch/policy"
)

// timerLate measures how late the proxy's timed waits end: a rule that
// holds a partial batch asks to decide again at a time (Decision.WakeAt),
// the dispatcher sets a timer for it, and Go's timers wake through the
// network poller, whose wait is a whole number of milliseconds from the
// moment it is set, and later still on a busy host (its scheduler, the
// other processes on its cores). A plan that counted its holds as set
// would promise a tail the calls do not live (policy.livedHold,
// docs/ALGORITHMS.md, "The tail").
//
// At each decision that waits until WakeAt, the wait's end and the time
// it was set are kept; the first decision at or after that end (the
// timer's, or an event's that came later still) measures the lateness,
// less the part the poller's whole milliseconds explain: what is left is
// the host's, which the plan adds to the whole milliseconds of its holds.
// Decisions of one model come one at a time (under its queue's lock), so
// the atomics are for the plan's reads only.
type timerLate struct {
	wakeAt, setAt atomic.Int64 // UnixNano; wakeAt 0: no wait pending
	// counts are the measured lateness beyond the whole milliseconds
	// since the last plan, in lateBucket steps from -lateOffset (a busy
	// process checks its timers before the poller's wait ends, down to a
	// millisecond early); hist their decayed sum.
	counts [lateBuckets]atomic.Int64
	hist   [lateBuckets]float64
	p      atomic.Uint64 // math.Float64bits of the last quantile, ms
	n      atomic.Int64  // the decayed count behind it
}

// The lateness histogram: lateBucket wide, from -lateOffset up to
// lateBuckets*lateBucket - lateOffset (longer waits fall in the last).
const (
	lateOffset  = time.Millisecond
	lateBucket  = 25 * time.Microsecond
	lateBuckets = 1280 // 31 ms of lateness
)

func lateIndex(late time.Duration) int {
	return min(max(int((late+lateOffset)/lateBucket), 0), lateBuckets-1)
}

// lateQuantile is the quantile of the lateness the plan counts: the holds
// that make a p99 are those that end at their bound, so a high one.
const lateQuantile = 0.9

// lateDecay is the weight the lateness measured keeps at each plan: a
// half-life of about 70 slices, following the host's load.
const lateDecay = 0.99

// observe takes one decision.
func (t *timerLate) observe(d dispatcher.Decision) {
	now := d.At.UnixNano()
	if w := t.wakeAt.Load(); w != 0 && now >= w {
		set := time.Duration(w - t.setAt.Load())
		late := time.Duration(now-w) - wholeMsLate(set)
		t.counts[lateIndex(late)].Add(1)
		t.wakeAt.Store(0)
	}
	switch {
	case d.Send == 0 && d.WakeAt.After(d.At):
		t.setAt.Store(now)
		t.wakeAt.Store(d.WakeAt.UnixNano())
	case d.Send >= d.Rows:
		t.wakeAt.Store(0) // nothing waits: no wait to end
	}
}

// wholeMsLate is how late the poller's whole milliseconds alone end a wait
// of d: up to the next millisecond.
func wholeMsLate(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	ms := time.Millisecond
	return (d+ms-1)/ms*ms - d
}

// take folds the lateness measured since the last plan into the decayed
// distribution and returns what the plan counts.
func (t *timerLate) take() policy.TimerLate {
	n := 0.0
	for i := range t.counts {
		t.hist[i] = lateDecay*t.hist[i] + float64(t.counts[i].Swap(0))
		n += t.hist[i]
	}
	if n < 1 {
		return policy.TimerLate{}
	}
	target, cum, at := lateQuantile*n, 0.0, lateBuckets-1
	for i, c := range t.hist {
		if cum += c; cum >= target {
			at = i
			break
		}
	}
	// The bucket's middle.
	ms := (float64(at)+0.5)*float64(lateBucket)/float64(time.Millisecond) - float64(lateOffset)/float64(time.Millisecond)
	t.p.Store(math.Float64bits(ms))
	t.n.Store(int64(math.Round(n)))
	return policy.TimerLate{Waits: int(math.Round(n)), Ms: ms}
}

// snapshot is the last quantile taken and the waits behind it.
func (t *timerLate) snapshot() (ms float64, waits int64) {
	return math.Float64frombits(t.p.Load()), t.n.Load()
}
