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
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratebatch/ratebatch/policy"
	"github.com/ratebatch/ratebatch/policy/batchcost"
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
