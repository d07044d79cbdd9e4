// Package monitor runs the slow half of a batching policy for one model: it
// counts arrivals, estimates the arrival rate, keeps the online fit of the
// batch latency tau(b), calls the policy's Plan and publishes the Rule
// atomically. The request path only increments a counter and loads a
// pointer; it never waits on the monitor.
//
// The live proxy and the simulator run the same Monitor; only the clock
// differs (Config.Now, and who calls Tick).
package monitor

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratebatch/ratebatch/dispatcher"
	"github.com/ratebatch/ratebatch/internal/guard"
	"github.com/ratebatch/ratebatch/policy"
	"github.com/ratebatch/ratebatch/policy/batchcost"
	"github.com/ratebatch/ratebatch/policy/smdp"
	"github.com/ratebatch/ratebatch/regression"
)

// Config describes one model's monitor.
type Config struct {
	Model  string
	Policy policy.Policy
	// Window is how often arrivals are counted and the rule re-planned.
	Window time.Duration
	// MaxBatch and Instances describe the upstream model; SetLimits updates
	// them when the upstream's config changes.
	MaxBatch  int
	Instances int
	// Seed is the starting line of the tau(b) fit (a profile run, or the
	// upstream's per-batch-size statistics); nil starts from Default.
	Seed *regression.Line
	// Energy, when known, is the per-batch energy line zeta(b) in mJ.
	Energy *batchcost.Energy
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// DefaultSeed is the tau(b) line assumed before anything is measured: a
// millisecond per batch plus a tenth per row, small enough that batching
// starts only once the measured line says it pays.
var DefaultSeed = regression.Line{AlphaMs: 0.1, Tau0Ms: 1}

// guessedSeedWeight is how many samples DefaultSeed counts as.
const guessedSeedWeight = 0.1

// Slices is how many times per window the monitor counts arrivals and
// re-plans. See rateEstimator.
const Slices = 4

// MaxRelErr is the largest relative standard error of alpha or tau0 (see
// regression.Fit.RelErr) at which the fit is trusted: until then the
// estimate carries a FitDoubt and the batching rules stay work-conserving.
// At 20% a batch size chosen from the line is still close to right; a line
// known worse than that (a slope "learnt" from one or two batch sizes in
// noise) picks batch sizes that cost latency for nothing.
const MaxRelErr = 0.2

// serverHalfLife is the half-life of the per-size batch counts of the
// server's statistics: long, because a model's line does not drift, and the
// memory of sizes seen earlier is what keeps the line identified.
const serverHalfLife = time.Minute

// sizeMean is the decayed batch count and summed time of one batch size,
// and the mean time of its batches in each of the last recentWindows reads
// that ran any (a ring, next is where the next one goes).
type sizeMean struct {
	n, ms  float64
	recent []float64
	next   int
}

// recentWindows is how many per-read means of a size its typical time is
// the median of: enough for a stable median, few enough to follow a change.
const recentWindows = 64

// add records n batches that took ms in all since the last read.
func (a *sizeMean) add(n int64, ms float64) {
	a.n += float64(n)
	a.ms += ms
	mean := ms / float64(n)
	if len(a.recent) < recentWindows {
		a.recent = append(a.recent, mean)
		return
	}
	a.recent[a.next] = mean
	a.next = (a.next + 1) % recentWindows
}

// typical is the median of the size's recent per-read means.
func (a *sizeMean) typical() float64 {
	v := slices.Clone(a.recent)
	slices.Sort(v)
	k := len(v)
	if k%2 == 1 {
		return v[k/2]
	}
	return (v[k/2-1] + v[k/2]) / 2
}

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

// Monitor is the monitor of one model. Its methods are safe for concurrent use.
type Monitor struct {
	model  string
	window time.Duration
	now    func() time.Time
	est    *regression.Estimator
	energy atomic.Pointer[batchcost.Energy] // nil: unknown; SetEnergy replaces it

	arrivals atomic.Int64 // rows since the last slice; reset only by the monitor
	// Decisions since the last slice, and those at which a partner could
	// have come (Decided); reset only by the monitor.
	decisions, openDecisions atomic.Int64
	// callers reads what the dispatcher has learnt of the model's callers
	// (WatchCallers); nil until it has been given.
	callers atomic.Pointer[func(time.Time) policy.Callers]

	total   atomic.Int64
	rate    rateEstimator // guarded by mu
	guessed bool          // the fit started from DefaultSeed, not a measurement

	// The server's own statistics, once it has any: they feed the fit, and
	// the round trip only measures the overhead around them.
	serverMu      sync.Mutex
	lastTotals    map[int]BatchTotal
	perSize       map[int]*sizeMean
	lastRead      time.Time
	fitOpts       regression.Options // for fits of the server's means
	serverBatches atomic.Int64
	serverFed     atomic.Bool
	overhead      atomic.Uint64 // math.Float64bits of the mean overhead in ms
	overheadN     atomic.Int64  // batches matched by the overhead's sums so far
	// serviceSCV is math.Float64bits of the round trips' squared
	// coefficient of variation, pooled over the sizes (readGaps).
	serviceSCV atomic.Uint64
	// outside is the proxy's own time around a batch (BatchEnded,
	// Answered), which the plan counts beside tau(b).
	outsideMu sync.Mutex
	outside   outsideMeans
	// liveNs and liveCalls sum the latencies inside the proxy of the
	// calls answered since the last plan that arrived after the plan
	// before it (Answered), for Estimate.Live; sliceStart is the last
	// plan's time and prevStart the one before (UnixNano).
	liveNs, liveCalls, sliceStart, prevStart atomic.Int64
	// liveHist counts the same calls by latency (policy.HistBucket), for
	// the distribution the budget's trim holds to its p99 bound; lived
	// is its decayed sum over the slices, and livedP99 and livedMean
	// (math.Float64bits, ms) what /status shows of it.
	liveHist            [policy.HistBuckets]atomic.Int64
	lived               policy.Hist
	livedNs, livedCalls float64
	livedP99, livedMean atomic.Uint64
	// late is how late the rule's timed waits ended (timerlate.go).
	late timerLate
	// gapBySize measures the round trip beyond the server's compute per
	// batch size (index b-1), for the overhead's line (overheadLine).
	gapBySize []gapSums
	current   atomic.Pointer[published]
	changed   chan struct{}
	replan    chan struct{} // asks Run to plan again now
	running   atomic.Bool

	mu        sync.Mutex // guards what Plan reads and the window start
	pol       policy.Policy
	retired   map[string]policy.Policy // the last policy of each name, for Resume
	planned   chan struct{}            // closed once pol's first rule is published
	maxBatch  int
	instances int
	last      time.Time
}

// published is one plan: the rule and what it was planned from.
type published struct {
	rule policy.Rule
	est  policy.Estimate
	fit  regression.Fit
	// objective is what the policy's plan optimises (policy.Objectiver),
	// "" for a policy that weighs no energy.
	objective string
}

// New returns a monitor with its starting rule already published.
func New(c Config) (*Monitor, error) {
	switch {
	case c.Policy == nil:
		return nil, fmt.Errorf("monitor %s: no policy", c.Model)
	case c.Window <= 0:
		return nil, fmt.Errorf("monitor %s: window must be > 0, got %v", c.Model, c.Window)
	case c.MaxBatch < 1:
		return nil, fmt.Errorf("monitor %s: max batch must be >= 1, got %d", c.Model, c.MaxBatch)
	}
	// A measured seed (profile, upstream statistics) keeps the regression's
	// default pull; the guessed DefaultSeed only bridges the first batches.
	seed, weight := DefaultSeed, guessedSeedWeight
	if c.Seed != nil {
		if err := c.Seed.Validate(); err != nil {
			return nil, fmt.Errorf("monitor %s: seed: %w", c.Model, err)
		}
		seed, weight = *c.Seed, 0
	}
	fitOpts := regression.Options{Prior: &seed, PriorWeight: weight, MaxBatch: c.MaxBatch}
	est, err := regression.NewEstimator(fitOpts)
	if err != nil {
		return nil, fmt.Errorf("monitor %s: %w", c.Model, err)
	}
	now := c.Now
	if now == nil {
		now = time.Now
	}
	m := &Monitor{
		model:     c.Model,
		window:    c.Window,
		now:       now,
		est:       est,
		rate:      rateEstimator{window: c.Window},
		fitOpts:   fitOpts,
		guessed:   c.Seed == nil,
		changed:   make(chan struct{}, 1),
		replan:    make(chan struct{}, 1),
		pol:       c.Policy,
		maxBatch:  c.MaxBatch,
		instances: max(c.Instances, 1),
	}
	m.energy.Store(c.Energy)
	m.gapBySize = make([]gapSums, c.MaxBatch)
	m.last = now()
	m.plan(m.last, 0, 0, decisionCount{}) // the policy's starting rule
	return m, nil
}

// The monitor learns from its model's dispatcher as a dispatcher.Observer:
// each event's method only counts and sums (atomics, or a short lock); the
// plan reads the sums at its next slice.
var _ dispatcher.Observer = (*Monitor)(nil)

// Arrived counts the rows of a call that entered the queue.
func (m *Monitor) Arrived(a dispatcher.Arrival) { m.arrive(a.Rows) }

// Decided counts a decision of the rule, and whether a partner could have
// come at it.
func (m *Monitor) Decided(d dispatcher.Decision) {
	m.observeDecision(d.PartnerPossible())
	m.late.observe(d)
}

// BatchStarted implements dispatcher.Observer: a batch teaches the monitor
// nothing until it ends.
func (m *Monitor) BatchStarted(*dispatcher.Batch) {}

// BatchEnded learns the round trip and the hold of a batch the upstream
// answered in full.
func (m *Monitor) BatchEnded(_ *dispatcher.Batch, e dispatcher.BatchEnd) {
	if !e.OK {
		return
	}
	m.observe(e.Rows, e.RoundTrip)
	m.observeHold(e.Calls, e.Hold)
}

// Answered learns a call's latency inside the proxy and its wait after its
// batch ended.
func (m *Monitor) Answered(a dispatcher.Answer) {
	m.observeAfter(a.Calls, a.After)
	m.observeCall(a.Arrived, a.Latency)
}

// arrive counts rows that entered the queue.
func (m *Monitor) arrive(rows int) {
	m.arrivals.Add(int64(rows))
	m.total.Add(int64(rows))
}

// observe takes one completed batch and its round trip as the proxy
// measured it. Until the server's own statistics arrive (ObserveServer) the
// round trip feeds the tau(b) fit; afterwards it only measures the overhead
// around the server's figure (network, HTTP, queueing in the server), which
// must not be mixed into tau(b): tau(b) decides how long a batch holds the
// device, and the overhead is paid by every request alike.
func (m *Monitor) observe(rows int, latency time.Duration) {
	ms := float64(latency) / float64(time.Millisecond)
	if !m.serverFed.Load() {
		// A bad sample (never produced by the dispatcher) is simply not learnt.
		_ = m.est.Observe(rows, ms)
		return
	}
	// Set against the server's compute at its next read (ObserveServer).
	m.outsideMu.Lock()
	if rows >= 1 && rows <= len(m.gapBySize) {
		g := &m.gapBySize[rows-1]
		g.pendN++
		g.pendMs += ms
		g.pendSq += ms * ms
	}
	m.outsideMu.Unlock()
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
	ms := max(float64(beyond)/float64(time.Millisecond), 0)
	m.outsideMu.Lock()
	if calls <= 1 {
		m.outside.holdLone.add(ms)
	} else {
		m.outside.holdMerged.add(ms)
	}
	m.outsideMu.Unlock()
}

// observeAfter takes a caller's wait for its answer after its batch of
// calls callers ended.
func (m *Monitor) observeAfter(calls int, after time.Duration) {
	ms := max(float64(after)/float64(time.Millisecond), 0)
	m.outsideMu.Lock()
	if calls <= 1 {
		m.outside.afterLone.add(ms)
	} else {
		m.outside.afterMerged.add(ms)
	}
	m.outsideMu.Unlock()
}

// observeDecision counts a decision of the rule, and whether a partner
// could have come at it.
func (m *Monitor) observeDecision(partnerPossible bool) {
	m.decisions.Add(1)
	if partnerPossible {
		m.openDecisions.Add(1)
	}
}

// WatchCallers gives the monitor a reader of the model's callers
// (dispatcher.ModelSpec.WatchCallers); each plan reads it once, so the
// budget policy can plan for a closed loop of synchronous clients.
func (m *Monitor) WatchCallers(read func(now time.Time) policy.Callers) {
	m.callers.Store(&read)
}

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

// BatchTotal is a server's cumulative account of one batch size: how many
// batches of that size ran and their summed compute time (Triton's
// batch_stats: compute_input + compute_infer + compute_output).
type BatchTotal struct {
	Batch int
	Count int64
	Time  time.Duration
}

// ObserveServer takes the server's cumulative per-batch-size statistics.
// The first call only sets the baseline. Each later one adds the batches
// run since the call before to a mean per batch size, whose weight (the
// batch count) halves every serverHalfLife: the fit then runs on one
// point per size, each as sure as the batches behind it. A size the traffic
// has not formed lately keeps its mean, with a fading weight, so the line
// stays anchored when load concentrates on a few sizes (at high load nearly
// every batch is B_max, and the intercept would otherwise be a guess). A
// count that went down (the server restarted) starts a new baseline for
// that size.
func (m *Monitor) ObserveServer(totals []BatchTotal) {
	m.serverMu.Lock()
	defer m.serverMu.Unlock()
	first := m.lastTotals == nil
	if first {
		m.lastTotals = make(map[int]BatchTotal, len(totals))
		m.perSize = map[int]*sizeMean{}
	}
	now := m.now()
	since := float64(now.Sub(m.lastRead))
	decay := math.Exp2(-since / float64(serverHalfLife))
	m.lastRead = now
	for _, a := range m.perSize {
		a.n *= decay
		a.ms *= decay
	}
	reads := make(map[int]serverRead, len(totals))
	for _, t := range totals {
		if t.Batch < 1 || t.Count < 0 {
			continue
		}
		prev, seen := m.lastTotals[t.Batch]
		m.lastTotals[t.Batch] = t
		if first || t.Count < prev.Count || t.Time < prev.Time {
			continue
		}
		if !seen || prev.Count == 0 {
			// The first executions of a size on this server include its
			// warm-up (a Python backend's first call takes hundreds of
			// ms; caches, autotuning): they set the baseline, they are
			// not learnt.
			continue
		}
		n := t.Count - prev.Count
		ms := float64(t.Time-prev.Time) / float64(time.Millisecond)
		reads[t.Batch] = serverRead{n: n, ms: ms}
		if n == 0 {
			continue
		}
		a := m.perSize[t.Batch]
		if a == nil {
			a = &sizeMean{}
			m.perSize[t.Batch] = a
		}
		a.add(n, ms)
		m.serverBatches.Add(n)
		m.serverFed.Store(true)
	}
	m.readGaps(math.Exp2(-since/float64(gapHalfLife)), reads)
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

// serverRead is one batch size's executions between two reads of the
// server's statistics: n batches that took ms in all.
type serverRead struct {
	n  int64
	ms float64
}

// serverSamples is the typical time of each batch size in the server's
// statistics (see serverFit), weighted by its decayed batch count, and the
// decayed counts and summed times behind them.
func (m *Monitor) serverSamples() (typical []regression.Sample, counts map[int]float64, totalMs float64) {
	m.serverMu.Lock()
	defer m.serverMu.Unlock()
	typical = make([]regression.Sample, 0, len(m.perSize))
	counts = make(map[int]float64, len(m.perSize))
	for b, a := range m.perSize {
		if a.n > 0 && a.ms > 0 && len(a.recent) > 0 {
			typical = append(typical, regression.Sample{Batch: b, LatencyMs: a.typical(), Weight: a.n})
			counts[b] = a.n
			totalMs += a.ms
		}
	}
	slices.SortFunc(typical, func(x, y regression.Sample) int { return x.Batch - y.Batch })
	return typical, counts, totalMs
}

// serverFit fits the line to the server's statistics in two steps.
//
// The line that matters is the mean one: throughput b/tau(b) and Triton's
// summed statistics both include the rare slow batches (a GC pause, a
// clock drop, a page fault storm). But a size's mean is a poor point to
// fit when sizes are seen at very different rates, as at high load, where
// nearly every batch is B_max and the sizes below it are formed a few dozen
// times: a 1-in-100 slow batch is in B_max's mean and missing from most
// small sizes' samples, so those read low, the slope steepens and tau0,
// extrapolated across the sizes, reads low (docs/LEARNING.md, "Learning
// tau(b) from the right signal").
//
// So the shape comes from each size's typical time (the median of its
// per-read means), which does not depend on how often the size was seen,
// and the level from all batches pooled: the line is scaled so that it
// accounts for the time the server really spent on the batches it ran.
// The scale is known as well as the busiest size's mean, the best-measured
// figure there is.
func (m *Monitor) serverFit() (regression.Fit, error) {
	typical, counts, totalMs := m.serverSamples()
	// One point per size, each over many batches: a size's point is no
	// outlier to reject, and a robust scale over a few unequally weighted
	// points would reject all but the heaviest.
	o := m.fitOpts
	o.OutlierCut = -1
	f, err := regression.FitSamples(typical, o)
	if err != nil || f.N == 0 {
		return f, err
	}
	var predicted float64
	for b, n := range counts {
		predicted += n * f.TauMs(b)
	}
	if predicted <= 0 || totalMs <= 0 {
		return f, nil
	}
	c := totalMs / predicted
	f.AlphaMs *= c
	f.Tau0Ms *= c
	f.SEAlphaMs *= c
	f.SETau0Ms *= c
	return f, nil
}

// fit is the current tau(b) fit: of the server's statistics once they
// arrive, else of the round trips.
func (m *Monitor) fit() (regression.Fit, error) {
	if m.serverFed.Load() {
		return m.serverFit()
	}
	return m.est.Fit()
}

// Samples returns the recent (batch size, latency) observations the tau(b)
// fit is made from, oldest first.
func (m *Monitor) Samples() []regression.Sample { return m.est.Samples() }

// Rule returns the rule in force.
func (m *Monitor) Rule() policy.Rule { return m.current.Load().rule }

// Predict is the round trip the current plan expects of a batch of rows:
// tau(b) as the policy plans with it. The dispatcher judges hung batches
// by it (dispatcher.Predictor).
func (m *Monitor) Predict(rows int) time.Duration {
	return m.Line().TauDuration(rows)
}

// Line is the batch line the rule in force was planned with: tau(b) as
// the proxy lives it, with the round trip beyond the server's compute
// (Predict reads it, the what-if replays on it).
func (m *Monitor) Line() batchcost.Latency { return m.current.Load().est.Latency }

// Changed delivers a value after each new rule is published, so that a
// queue waiting on the old rule re-decides at once.
func (m *Monitor) Changed() <-chan struct{} { return m.changed }

// SetPolicy replaces the policy and re-plans with the last window's
// figures: in Run's goroutine when it runs (a plan may be a slow SMDP
// solve, which must not hold up the caller), else at once. The returned
// channel is closed once a rule of p (or of a later policy) is published, so
// a caller that wants to report the new state, as PUT /policy does, can wait
// for it.
//
// A policy that learns from live traffic (policy.Resumer) takes over what
// the last policy of its name learned on this model, so switching to a
// baseline and back (an A/B through PUT /policy) does not start it over.
func (m *Monitor) SetPolicy(p policy.Policy) <-chan struct{} {
	m.mu.Lock()
	if m.pol != nil {
		if m.retired == nil {
			m.retired = map[string]policy.Policy{}
		}
		m.retired[m.pol.Name()] = m.pol
	}
	if r, ok := p.(policy.Resumer); ok && p != m.retired[p.Name()] && m.retired[p.Name()] != nil {
		r.Resume(m.retired[p.Name()])
	}
	m.pol = p
	if m.planned == nil {
		m.planned = make(chan struct{})
	}
	done := m.planned
	m.mu.Unlock()
	m.requestPlan()
	return done
}

func (m *Monitor) requestPlan() {
	if !m.running.Load() {
		m.replanNow()
		return
	}
	select {
	case m.replan <- struct{}{}:
	default: // one is already pending
	}
}

func (m *Monitor) replanNow() {
	prev := m.current.Load().est
	m.plan(m.now(), prev.Window, prev.Arrivals, decisionCount{}) // a new policy plans
}

// SetEnergy replaces the batch energy line zeta(b) (nil: unknown), as a
// meter's fit learns it; the next window plans with it.
func (m *Monitor) SetEnergy(line *batchcost.Energy) { m.energy.Store(line) }

// Energy returns the batch energy line zeta(b) in force; nil when unknown.
func (m *Monitor) Energy() *batchcost.Energy { return m.energy.Load() }

// SetLimits updates the model's max batch size and instance count, as read
// from the upstream's model config, and re-plans.
func (m *Monitor) SetLimits(maxBatch, instances int) {
	if maxBatch < 1 {
		return
	}
	m.mu.Lock()
	same := m.maxBatch == maxBatch && m.instances == max(instances, 1)
	m.maxBatch, m.instances = maxBatch, max(instances, 1)
	m.mu.Unlock()
	m.outsideMu.Lock()
	if len(m.gapBySize) != maxBatch {
		m.gapBySize = make([]gapSums, maxBatch)
	}
	m.outsideMu.Unlock()
	if !same {
		m.requestPlan()
	}
}

// TickEvery is how often Tick should be called: a slice of the window.
func (m *Monitor) TickEvery() time.Duration { return max(m.window/Slices, time.Microsecond) }

// Run calls Tick every TickEvery until ctx is done.
func (m *Monitor) Run(ctx context.Context) {
	m.running.Store(true)
	defer m.running.Store(false)
	t := time.NewTicker(m.TickEvery())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			m.Tick()
		case <-m.replan:
			m.replanNow()
		}
	}
}

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

func (m *Monitor) plan(now time.Time, window time.Duration, arrivals int, decided decisionCount) {
	fit, err := m.fit()
	if err != nil {
		// Only possible without samples and without a seed, which New
		// prevents; keep planning on the seed-free default.
		fit = regression.Fit{Line: DefaultSeed}
	}
	m.mu.Lock()
	pol, maxBatch, instances := m.pol, m.maxBatch, m.instances
	planned := m.planned
	m.planned = nil
	m.mu.Unlock()
	e := policy.Estimate{
		Now:       now,
		Window:    window,
		Arrivals:  arrivals,
		Latency:   fit.Line,
		FitR2:     fit.R2,
		FitDoubt:  m.doubt(fit),
		MaxBatch:  maxBatch,
		Instances: instances,
		Extra:     m.Extra(),
		// Zero until the statistics are read: without them the round
		// trips feed the fit, and their spread is not measured.
		ServiceSCV: math.Float64frombits(m.serviceSCV.Load()),
		Live:       m.live(now),
		TimerLate:  m.late.take(),
		Decisions:  int(decided.all), OpenDecisions: int(decided.open),
	}
	if read := m.callers.Load(); read != nil {
		e.Callers = (*read)(now)
	}
	if window > 0 {
		e.RatePerSec = float64(arrivals) / window.Seconds()
		// Short of a whole window by more than half a slice (the
		// estimator's own tolerance): the rate has not held for a window.
		e.Stepped = window < m.window-m.TickEvery()/2
	}
	if m.serverFed.Load() {
		// The policy plans with the line as the proxy lives it: the proxy
		// sends an instance its next batch only once the last one's answer
		// is back, so the round trip beyond the server's compute holds the
		// instance like compute does. The fit and the status keep the two
		// apart; only the plan adds them.
		if m.overheadN.Load() == 0 {
			// No round trip measured against the statistics yet: until
			// one is, the round trips alone are the line as the proxy
			// lives it, not the compute without what comes around it.
			if rt, err := m.est.Fit(); err == nil {
				e.Latency = rt.Line
			}
		} else {
			mean := math.Float64frombits(m.overhead.Load())
			o0, o1 := m.overheadLine(mean)
			if e.Latency.AlphaMs+o1 <= 0 {
				o0, o1 = max(mean, 0), 0
			}
			e.Latency.Tau0Ms += o0
			e.Latency.AlphaMs += o1
		}
	}
	if en := m.energy.Load(); en != nil {
		e.Energy, e.HasEnergy = *en, true
	}
	objective := ""
	if o, ok := pol.(policy.Objectiver); ok {
		objective = o.Objective(e.HasEnergy)
	}
	if rule, ok := safePlan(pol, e); ok {
		m.current.Store(&published{rule: policy.BoundHolds(rule, e), est: e, fit: fit, objective: objective})
	} else if m.current.Load() == nil {
		// No rule yet to keep: send what waits at once, as adhoc does,
		// until a plan succeeds.
		m.current.Store(&published{rule: policy.Adhoc{}.Plan(e), est: e, fit: fit})
	} // else the rule of the last plan stays, and the queue decides on
	if planned != nil {
		close(planned)
	}
	select {
	case m.changed <- struct{}{}:
	default: // a wake-up is already pending
	}
}

// safePlan is pol.Plan(e) with a panic of the policy (a solver's bug on
// an odd estimate) contained: ok is false and the panic is counted and
// logged, and the caller keeps the last rule; the next window plans again.
func safePlan(pol policy.Policy, e policy.Estimate) (rule policy.Rule, ok bool) {
	defer func() {
		if v := recover(); v != nil {
			guard.Recovered(nil, "plan", v)
			rule, ok = nil, false
		}
	}()
	return pol.Plan(e), true
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

// doubt says why the fit is not to be trusted yet, "" when it is.
func (m *Monitor) doubt(f regression.Fit) string {
	switch {
	case f.N == 0 && m.guessed:
		return "no batch measured yet"
	case f.N == 0:
		return "" // a measured seed (profile, server statistics) and nothing newer
	case !m.guessed && f.N-f.Outliers < 3:
		return "" // a measured seed, and too few samples yet to judge it by
	case m.guessed && f.KeptSizes < 2:
		return fmt.Sprintf("one batch size among %d samples kept: the slope is unknown", f.N-f.Outliers)
	case f.RelErr() > MaxRelErr:
		return fmt.Sprintf("tau(b) fit uncertain: alpha %.3g ± %.2g ms, tau0 %.3g ± %.2g ms", f.AlphaMs, f.SEAlphaMs, f.Tau0Ms, f.SETau0Ms)
	}
	return ""
}

// Snapshot is the monitor's state for metrics and the status endpoint.
type Snapshot struct {
	Model      string        `json:"model"`
	Policy     string        `json:"policy"`
	BatchSize  int           `json:"batch_size"`
	MaxWait    time.Duration `json:"-"`
	MaxWaitMs  float64       `json:"max_wait_ms"`
	Note       string        `json:"note,omitempty"`
	RatePerSec float64       `json:"rate_rps"`
	Window     time.Duration `json:"-"`
	batchcost.Latency
	R2 float64 `json:"r2"`
	// SEAlphaMs and SETau0Ms are the fit's standard errors (null while the
	// samples cannot tell), FitDoubt why the rule does not trust it yet.
	SEAlphaMs *float64 `json:"se_alpha_ms"`
	SETau0Ms  *float64 `json:"se_tau0_ms"`
	Outliers  int      `json:"outliers"`
	FitDoubt  string   `json:"fit_doubt,omitempty"`
	// FitSource is where tau(b) is learnt from: "server statistics" (the
	// upstream's per-batch-size compute times) or "round trip" (the
	// proxy's own timing, for servers without statistics).
	FitSource string `json:"fit_source"`
	// OverheadMs is the mean round trip beyond the server's own tau(b)
	// (network, HTTP, the server's queue); null without server statistics.
	OverheadMs *float64 `json:"overhead_ms"`
	// Outside is the proxy's own time around a batch that the planning
	// policies count beside tau(b) (smdp.Extra): instance time beyond the
	// round trip (hold) and a caller's wait after its batch (after), for
	// batches of one caller and of several. A simulation takes it with
	// ratebatch sim --overheads.
	Outside   Outside `json:"outside"`
	Samples   int     `json:"samples"`
	MaxBatch  int     `json:"max_batch_size"`
	Instances int     `json:"instances"`
	Arrivals  int64   `json:"arrivals_total"`
	// PlannedMeanMs and PlannedP99Ms are the rule's predicted latency
	// (the budget policy's tail model; 0 when the rule predicts none),
	// LivedMeanMs and LivedP99Ms the calls' inside the proxy over the
	// last seconds (arrival to answer, decayed with a half-life of about
	// 70 plans).
	PlannedMeanMs float64 `json:"planned_mean_ms"`
	PlannedP99Ms  float64 `json:"planned_p99_ms"`
	LivedMeanMs   float64 `json:"lived_mean_ms"`
	LivedP99Ms    float64 `json:"lived_p99_ms"`
	// Objective is what the policy's plan optimises, for a policy that
	// weighs energy (budget, smdp): without an energy line it says what
	// the plan optimises instead of joules.
	Objective string `json:"objective,omitempty"`
	// Phase is where a policy that earns its holds stands (the budget's:
	// learning, holding or adhoc; policy.Phaser) and PhaseReason why;
	// empty for the other policies.
	Phase       string `json:"phase,omitempty"`
	PhaseReason string `json:"phase_reason,omitempty"`
}

// Snapshot returns the current state.
func (m *Monitor) Snapshot() Snapshot {
	p := m.current.Load()
	st := p.rule.Status()
	s := Snapshot{
		Model:      m.model,
		Policy:     st.Policy,
		BatchSize:  st.BatchSize,
		MaxWait:    st.MaxWait,
		MaxWaitMs:  float64(st.MaxWait) / float64(time.Millisecond),
		Note:       st.Note,
		RatePerSec: p.est.RatePerSec,
		Window:     p.est.Window,
		Latency:    p.fit.Line,
		R2:         p.fit.R2,
		SEAlphaMs:  finite(p.fit.SEAlphaMs),
		SETau0Ms:   finite(p.fit.SETau0Ms),
		Outliers:   p.fit.Outliers,
		FitDoubt:   p.est.FitDoubt,
		FitSource:  "round trip",
		Samples:    m.est.Observed() + int(m.serverBatches.Load()),
		MaxBatch:   p.est.MaxBatch,
		Instances:  p.est.Instances,
		Arrivals:   m.total.Load(),
		Outside:    m.outsideSnapshot(p.est.Extra),

		PlannedMeanMs: st.PlannedMeanMs,
		PlannedP99Ms:  st.PlannedP99Ms,
		LivedMeanMs:   math.Float64frombits(m.livedMean.Load()),
		LivedP99Ms:    math.Float64frombits(m.livedP99.Load()),
		Objective:     p.objective,
	}
	m.mu.Lock()
	pol := m.pol
	m.mu.Unlock()
	if ph, ok := pol.(policy.Phaser); ok {
		s.Phase, s.PhaseReason = ph.Phase()
	}
	if m.serverFed.Load() {
		s.FitSource = "server statistics"
		s.OverheadMs = finite(math.Float64frombits(m.overhead.Load()))
	}
	return s
}

// Outside is the time outside tau(b) as /status shows it.
type Outside struct {
	HoldLoneMs    float64 `json:"hold_lone_ms"`
	HoldMergedMs  float64 `json:"hold_merged_ms"`
	AfterLoneMs   float64 `json:"after_lone_ms"`
	AfterMergedMs float64 `json:"after_merged_ms"`
	// LoneBatches and MergedBatches count the batches measured.
	LoneBatches   int64 `json:"lone_batches"`
	MergedBatches int64 `json:"merged_batches"`
	// OverheadMs and OverheadPerRowMs are the round trip beyond the
	// server's compute as the plan takes it, o0 + o1*b (overheadLine);
	// zero without server statistics, where the round trip is the fit.
	OverheadMs       float64 `json:"overhead_ms"`
	OverheadPerRowMs float64 `json:"overhead_per_row_ms"`
	// ServiceSCV is the round trips' squared coefficient of variation
	// (policy.Estimate.ServiceSCV); 0 without server statistics.
	ServiceSCV float64 `json:"service_scv"`
	// TimerLateMs is how late the rule's timed waits end past the whole
	// milliseconds Go's poller waits (its 90th percentile,
	// policy.Estimate.TimerLate), over TimedWaits waits (decayed).
	TimerLateMs float64 `json:"timer_late_ms"`
	TimedWaits  int64   `json:"timed_waits"`
}

func (m *Monitor) outsideSnapshot(x smdp.Extra) Outside {
	m.outsideMu.Lock()
	lone, merged := m.outside.holdLone.n, m.outside.holdMerged.n
	m.outsideMu.Unlock()
	o := Outside{HoldLoneMs: x.HoldLoneMs, HoldMergedMs: x.HoldMergedMs, AfterLoneMs: x.AfterLoneMs, AfterMergedMs: x.AfterMergedMs,
		LoneBatches: lone, MergedBatches: merged}
	o.TimerLateMs, o.TimedWaits = m.late.snapshot()
	if m.serverFed.Load() && m.overheadN.Load() > 0 {
		o.OverheadMs, o.OverheadPerRowMs = m.overheadLine(math.Float64frombits(m.overhead.Load()))
		o.ServiceSCV = math.Float64frombits(m.serviceSCV.Load())
	}
	return o
}

func finite(v float64) *float64 {
	if math.IsInf(v, 0) || math.IsNaN(v) {
		return nil
	}
	return &v
}
