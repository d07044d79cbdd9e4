package monitor

import (
	"math"
	"time"

	"github.com/ratebatch/ratebatch/policy"
)

// observeCall takes one call's latency inside the proxy, from its
// arrival to its answer being written, into the slice it is answered in,
// if it arrived in that slice or the one before. Counting only the calls
// that arrived and were answered in one slice would drop those that
// straddle its end, the longer the call the likelier: a rule that holds
// calls would read a lower mean and p99 than its calls lived. A call
// that arrived earlier is not counted. The budget policy counts a slice
// only when the slice before ran a rule of its kind (the first slice
// under a new rule settles), so the calls it holds to a promise are
// calls that rule's kind served alone.
func (m *Monitor) observeCall(arrived time.Time, latency time.Duration) {
	if arrived.UnixNano() < m.prevStart.Load() {
		return
	}
	m.liveNs.Add(int64(latency))
	m.liveCalls.Add(1)
	m.liveHist[policy.HistBucket(latency)].Add(1)
}

// live takes the calls' mean latency since the last plan and starts a new
// sum.
func (m *Monitor) live(now time.Time) policy.Live {
	m.prevStart.Store(m.sliceStart.Swap(now.UnixNano()))
	n := m.liveCalls.Swap(0)
	ns := m.liveNs.Swap(0)
	h := new(policy.Hist)
	for i := range m.liveHist {
		if c := m.liveHist[i].Swap(0); c > 0 {
			h.Add(i, float64(c))
		}
	}
	m.lived.Scale(livedDecay)
	m.lived.Merge(h, 1)
	m.livedNs, m.livedCalls = livedDecay*m.livedNs+float64(ns), livedDecay*m.livedCalls+float64(n)
	if m.livedCalls > 0 {
		m.livedP99.Store(math.Float64bits(m.lived.QuantileMs(0.99)))
		m.livedMean.Store(math.Float64bits(m.livedNs / m.livedCalls / float64(time.Millisecond)))
	}
	if n <= 0 {
		return policy.Live{}
	}
	return policy.Live{Calls: int(n), MeanMs: float64(ns) / float64(n) / float64(time.Millisecond), Hist: h}
}

// livedDecay is the weight a slice's calls keep at the next plan in the
// lived distribution /status shows: a half-life of about 70 slices (7 s
// at the default window), long enough for a p99 over thousands of calls
// at a few hundred a second, short enough to follow a change of rule.
const livedDecay = 0.99
