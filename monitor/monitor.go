// Package monitor runs the slow half of a batching policy for one model: it
// counts arrivals per window, keeps the online fit of the batch latency
// tau(b), calls the policy's Plan once per window and publishes the Rule
// atomically. The request path only increments a counter and loads a
// pointer; it never waits on the monitor.
package monitor

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratebatch/ratebatch/policy"
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
	Energy *EnergyLine
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// EnergyLine is zeta(b) = BetaMJ*b + Zeta0MJ.
type EnergyLine struct{ BetaMJ, Zeta0MJ float64 }

// DefaultSeed is the tau(b) line assumed before anything is measured: a
// millisecond per batch plus a tenth per row, small enough that batching
// starts only once the measured line says it pays.
var DefaultSeed = regression.Line{AlphaMs: 0.1, Tau0Ms: 1}

// guessedSeedWeight is how many samples DefaultSeed counts as.
const guessedSeedWeight = 0.1

// Monitor is the monitor of one model. Its methods are safe for concurrent use.
type Monitor struct {
	model  string
	window time.Duration
	now    func() time.Time
	est    *regression.Estimator
	energy *EnergyLine

	arrivals atomic.Int64 // rows since the last window; reset only by the monitor
	total    atomic.Int64
	current  atomic.Pointer[published]
	changed  chan struct{}
	replan   chan struct{} // asks Run to plan again now
	running  atomic.Bool

	mu        sync.Mutex // guards what Plan reads and the window start
	pol       policy.Policy
	planned   chan struct{} // closed once pol's first rule is published
	maxBatch  int
	instances int
	last      time.Time
}

// published is one plan: the rule and what it was planned from.
type published struct {
	rule policy.Rule
	est  policy.Estimate
	fit  regression.Fit
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
	est, err := regression.NewEstimator(regression.Options{Prior: &seed, PriorWeight: weight, MaxBatch: c.MaxBatch})
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
		energy:    c.Energy,
		changed:   make(chan struct{}, 1),
		replan:    make(chan struct{}, 1),
		pol:       c.Policy,
		maxBatch:  c.MaxBatch,
		instances: max(c.Instances, 1),
	}
	m.last = now()
	m.plan(m.last, 0, 0) // the policy's starting rule
	return m, nil
}

// Arrive counts rows that entered the queue. It is the request path's only
// call into the monitor.
func (m *Monitor) Arrive(rows int) {
	m.arrivals.Add(int64(rows))
	m.total.Add(int64(rows))
}

// Observe feeds one completed batch into the tau(b) fit.
func (m *Monitor) Observe(rows int, latency time.Duration) {
	// A bad sample (never produced by the dispatcher) is simply not learnt.
	_ = m.est.Observe(rows, float64(latency)/float64(time.Millisecond))
}

// Rule returns the rule in force.
func (m *Monitor) Rule() policy.Rule { return m.current.Load().rule }

// Changed delivers a value after each new rule is published, so that a
// queue waiting on the old rule re-decides at once.
func (m *Monitor) Changed() <-chan struct{} { return m.changed }

// SetPolicy replaces the policy and re-plans with the last window's
// figures: in Run's goroutine when it runs (a plan may be a slow SMDP
// solve, which must not hold up the caller), else at once. The returned
// channel is closed once a rule of p (or of a later policy) is published, so
// a caller that wants to report the new state, as PUT /policy does, can wait
// for it.
func (m *Monitor) SetPolicy(p policy.Policy) <-chan struct{} {
	m.mu.Lock()
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
	m.plan(m.now(), prev.Window, prev.Arrivals)
}

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
	if !same {
		m.requestPlan()
	}
}

// Run ends a window every Window until ctx is done.
func (m *Monitor) Run(ctx context.Context) {
	m.running.Store(true)
	defer m.running.Store(false)
	t := time.NewTicker(m.window)
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

// Tick ends the current window now: it takes the arrival count, re-fits
// tau(b) and publishes the policy's new rule. Run calls it; tests may too.
func (m *Monitor) Tick() {
	now := m.now()
	n := m.arrivals.Swap(0)
	m.mu.Lock()
	elapsed := now.Sub(m.last)
	m.last = now
	m.mu.Unlock()
	if elapsed <= 0 {
		elapsed = m.window
	}
	m.plan(now, elapsed, int(n))
}

func (m *Monitor) plan(now time.Time, window time.Duration, arrivals int) {
	fit, err := m.est.Fit()
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
		AlphaMs:   fit.AlphaMs,
		Tau0Ms:    fit.Tau0Ms,
		FitR2:     fit.R2,
		MaxBatch:  maxBatch,
		Instances: instances,
	}
	if window > 0 {
		e.RatePerSec = float64(arrivals) / window.Seconds()
	}
	if m.energy != nil {
		e.BetaMJ, e.Zeta0MJ, e.HasEnergy = m.energy.BetaMJ, m.energy.Zeta0MJ, true
	}
	m.current.Store(&published{rule: pol.Plan(e), est: e, fit: fit})
	if planned != nil {
		close(planned)
	}
	select {
	case m.changed <- struct{}{}:
	default: // a wake-up is already pending
	}
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
	AlphaMs    float64       `json:"alpha_ms"`
	Tau0Ms     float64       `json:"tau0_ms"`
	R2         float64       `json:"r2"`
	Samples    int           `json:"samples"`
	MaxBatch   int           `json:"max_batch_size"`
	Instances  int           `json:"instances"`
	Arrivals   int64         `json:"arrivals_total"`
}

// Snapshot returns the current state.
func (m *Monitor) Snapshot() Snapshot {
	p := m.current.Load()
	st := p.rule.Status()
	return Snapshot{
		Model:      m.model,
		Policy:     st.Policy,
		BatchSize:  st.BatchSize,
		MaxWait:    st.MaxWait,
		MaxWaitMs:  float64(st.MaxWait) / float64(time.Millisecond),
		Note:       st.Note,
		RatePerSec: p.est.RatePerSec,
		Window:     p.est.Window,
		AlphaMs:    p.fit.AlphaMs,
		Tau0Ms:     p.fit.Tau0Ms,
		R2:         p.fit.R2,
		Samples:    m.est.Observed(),
		MaxBatch:   p.est.MaxBatch,
		Instances:  p.est.Instances,
		Arrivals:   m.total.Load(),
	}
}
