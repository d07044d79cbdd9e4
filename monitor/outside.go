package monitor

import (
	"math"
	"time"

	"github.com/ratebatch/ratebatch/policy/smdp"
)

// gapHalfLife is the half-life of the sums the round trip's overhead over
// the server's compute is measured from (gapSums): short enough to follow
// the host's load, long enough that the sums hold thousands of batches at
// any rate worth batching.
const gapHalfLife = 10 * time.Second

// gapSums measures the round trip beyond the server's compute for one
// batch size: the proxy's round trips and the server's compute of the
// same batches (its statistics, read at the same moments), each summed
// and decayed alike. The difference of their means is the overhead.
//
// Taking each round trip less the fit's tau(b), as the monitor did, put
// every batch's own spread into the overhead: a batch the server ran
// several times slower, or one that stalled, counted whole as overhead,
// and the plans and the simulator given that line read it too high
// (docs/ALGORITHMS.md, "Costs outside tau(b)"). Summed against the same
// batches' compute, a slow batch is in both sums and cancels.
//
// The round trips' squares are summed too: their spread per size is the
// service time's, which the near-overload test reads (ServiceSCV).
type gapSums struct {
	rtN, rtMs, rtSq float64 // the proxy's round trips, decayed
	compN, compMs   float64 // the server's compute over the same reads, decayed
	// pendN, pendMs and pendSq are the round trips since the last read.
	pendN          int64
	pendMs, pendSq float64
}

// weight is how many batches the size's overhead is measured over.
func (g *gapSums) weight() float64 { return min(g.rtN, g.compN) }

// gap is the size's mean round trip less its mean compute.
func (g *gapSums) gap() float64 { return g.rtMs/g.rtN - g.compMs/g.compN }

// read closes a read of the server's statistics: the sums decay by d and
// take the round trips since the last read, with the server's n batches
// that took ms in all; past means the server's statistics of this size
// are past their warm-up (ObserveServer), else the round trips are
// dropped with the reads they match.
func (g *gapSums) read(d float64, past bool, n int64, ms float64) {
	g.rtN, g.rtMs, g.rtSq, g.compN, g.compMs = g.rtN*d, g.rtMs*d, g.rtSq*d, g.compN*d, g.compMs*d
	if past {
		g.rtN += float64(g.pendN)
		g.rtMs += g.pendMs
		g.rtSq += g.pendSq
		g.compN += float64(n)
		g.compMs += ms
	}
	g.pendN, g.pendMs, g.pendSq = 0, 0, 0
}

// rtVar is the variance of the size's round trips, and their mean.
func (g *gapSums) rtVar() (v, mean float64) {
	mean = g.rtMs / g.rtN
	return max(g.rtSq/g.rtN-mean*mean, 0), mean
}

// outsideMeans are moving averages of the proxy's time around a batch, for
// batches of one caller (lone) and of several (merged).
type outsideMeans struct {
	holdLone, holdMerged, afterLone, afterMerged mean
}

// outsideGain is the weight of the newest value in the moving averages of
// the proxy's time around a batch (mean). The first 1/outsideGain values
// are averaged plainly instead (the weight of the n-th is 1/n): an average
// that started from 0 would plan, for its first few dozen batches, as if
// the time were not there.
const outsideGain = 0.05

// mean is a moving average whose first 1/outsideGain values are averaged
// plainly (see outsideGain).
type mean struct {
	v float64
	n int64
}

func (a *mean) add(x float64) {
	a.n++
	a.v += max(outsideGain, 1/float64(a.n)) * (x - a.v)
}

// observeHold takes how long a batch of calls callers held its instance
// beyond the upstream's round trip.
func (m *Monitor) observeHold(calls int, beyond time.Duration) {
	m.observeOutside(&m.outside.holdLone, &m.outside.holdMerged, calls, beyond)
}

// observeAfter takes a caller's wait for its answer after its batch of
// calls callers ended.
func (m *Monitor) observeAfter(calls int, after time.Duration) {
	m.observeOutside(&m.outside.afterLone, &m.outside.afterMerged, calls, after)
}

// observeOutside adds d, in milliseconds and at least 0, to lone's mean
// for a batch of one caller, else to merged's.
func (m *Monitor) observeOutside(lone, merged *mean, calls int, d time.Duration) {
	ms := max(float64(d)/float64(time.Millisecond), 0)
	m.outsideMu.Lock()
	if calls <= 1 {
		lone.add(ms)
	} else {
		merged.add(ms)
	}
	m.outsideMu.Unlock()
}

// Extra is the time outside tau(b) the plan counts: the measured means,
// a kind of batch not seen yet taking the other kind's, zero before any
// batch. Requests are taken as one row each (the model's batch size is in
// rows, the costs are per caller).
func (m *Monitor) Extra() smdp.Extra {
	m.outsideMu.Lock()
	o := m.outside
	m.outsideMu.Unlock()
	pick := func(a, b mean) float64 {
		if a.n > 0 {
			return a.v
		}
		return b.v
	}
	return smdp.Extra{
		HoldLoneMs: pick(o.holdLone, o.holdMerged), HoldMergedMs: pick(o.holdMerged, o.holdLone),
		AfterLoneMs: pick(o.afterLone, o.afterMerged), AfterMergedMs: pick(o.afterMerged, o.afterLone),
	}
}

// readGaps closes a read of the server's statistics in the overhead's
// sums (gapSums) and publishes their mean over the sizes. A round trip
// and its batch's compute may fall in neighbouring reads (the answer on
// its way when the statistics were read); the decayed sums hold
// thousands of batches, so one batch counted a read late moves the mean
// by its share of them.
func (m *Monitor) readGaps(d float64, reads map[int]serverRead) {
	m.outsideMu.Lock()
	var sw, sg, matched, sv, sm float64
	for i := range m.gapBySize {
		g := &m.gapBySize[i]
		r, past := reads[i+1]
		if past {
			matched += float64(g.pendN)
		}
		g.read(d, past, r.n, r.ms)
		if w := g.weight(); w > 0 && g.rtN > 0 && g.compN > 0 {
			sw, sg = sw+w, sg+w*g.gap()
		}
		if g.rtN >= overheadMinBatches {
			v, mean := g.rtVar()
			sv, sm = sv+g.rtN*v, sm+g.rtN*mean*mean
		}
	}
	m.outsideMu.Unlock()
	if sw > 0 {
		m.overhead.Store(math.Float64bits(sg / sw))
		m.overheadN.Add(int64(matched))
	}
	if sm > 0 {
		m.serviceSCV.Store(math.Float64bits(sv / sm))
	}
}

// overheadMinBatches is how many round trips of a batch size its mean
// overhead needs before the overhead's line takes it.
const overheadMinBatches = 20

// overheadLine is the round trip beyond the server's compute as a line in
// the batch size, o0 + o1*b, fitted by least squares to the mean overhead
// of each size seen overheadMinBatches times, weighted by its count. The
// overhead is not one figure per batch: the server's own handling of a
// request outside its compute statistics (decoding inputs, a Python
// backend's per-request work) grows with the rows, so a constant, the
// mean over a mix of mostly small batches, under-prices the larger batches
// a batching policy forms, which is where its plan then goes wrong
// (docs/ALGORITHMS.md, "Costs outside tau(b)"). With fewer than two sizes
// (at high load nearly every batch is B_max) the slope cannot be told, and
// the line is the constant mean, as is any line that would give a size a
// negative overhead or the batch time a slope <= 0.
func (m *Monitor) overheadLine(mean float64) (o0, o1 float64) {
	m.outsideMu.Lock()
	var sw, sb, sg, sbb, sbg float64
	sizes := 0
	for i := range m.gapBySize {
		g := &m.gapBySize[i]
		w := g.weight()
		if w < overheadMinBatches {
			continue
		}
		b, v := float64(i+1), g.gap()
		sw, sb, sg, sbb, sbg = sw+w, sb+w*b, sg+w*v, sbb+w*b*b, sbg+w*b*v
		sizes++
	}
	maxB := len(m.gapBySize)
	m.outsideMu.Unlock()
	constant := max(mean, 0)
	if sizes < 2 {
		return constant, 0
	}
	den := sw*sbb - sb*sb
	if den <= 0 {
		return constant, 0
	}
	o1 = (sw*sbg - sb*sg) / den
	o0 = (sg - o1*sb) / sw
	if o0 < 0 || o0+o1*float64(maxB) < 0 {
		// The round trip has a fixed part (a request's exchange) that no
		// size can go below; a line through a negative one is a fit of
		// stalls that hit the large batches, not a per-row cost (as
		// measured live on a loaded machine; docs/ALGORITHMS.md, "Costs
		// outside tau(b)").
		return constant, 0
	}
	return o0, o1
}
