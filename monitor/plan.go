package monitor

import (
	"math"
	"time"

	"github.com/ratebatch/ratebatch/internal/guard"
	"github.com/ratebatch/ratebatch/policy"
	"github.com/ratebatch/ratebatch/regression"
)

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

// plan fits tau(b), builds the slice's estimate, runs the policy's Plan
// and publishes its rule.
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
	e := m.estimate(now, window, arrivals, decided, fit, maxBatch, instances)
	objective := ""
	if o, ok := pol.(policy.Objectiver); ok {
		objective = o.Objective(e.HasEnergy)
	}
	rule, ok := safePlan(pol, e)
	m.publish(rule, ok, e, fit, objective, planned)
}

// estimate is what the policy plans from at now: the slice's rate and
// decisions, the fit's line as the proxy lives it (plannedLine), the costs
// outside it, the calls lived and the callers.
func (m *Monitor) estimate(now time.Time, window time.Duration, arrivals int, decided decisionCount, fit regression.Fit, maxBatch, instances int) policy.Estimate {
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
		e.Latency = m.plannedLine(e.Latency)
	}
	if en := m.energy.Load(); en != nil {
		e.Energy, e.HasEnergy = *en, true
	}
	return e
}

// plannedLine is the server's compute line as the policy plans with it:
// as the proxy lives it. The proxy sends an instance its next batch only
// once the last one's answer is back, so the round trip beyond the
// server's compute holds the instance like compute does. The fit and the
// status keep the two apart; only the plan adds them.
func (m *Monitor) plannedLine(l regression.Line) regression.Line {
	if m.overheadN.Load() == 0 {
		// No round trip measured against the statistics yet: until
		// one is, the round trips alone are the line as the proxy
		// lives it, not the compute without what comes around it.
		if rt, err := m.est.Fit(); err == nil {
			return rt.Line
		}
		return l
	}
	mean := math.Float64frombits(m.overhead.Load())
	o0, o1 := m.overheadLine(mean)
	if l.AlphaMs+o1 <= 0 {
		o0, o1 = max(mean, 0), 0
	}
	l.Tau0Ms += o0
	l.AlphaMs += o1
	return l
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
