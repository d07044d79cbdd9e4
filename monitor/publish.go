package monitor

import (
	"time"

	"github.com/ratebatch/ratebatch/policy"
	"github.com/ratebatch/ratebatch/policy/batchcost"
	"github.com/ratebatch/ratebatch/regression"
)

// published is one plan: the rule and what it was planned from.
type published struct {
	rule policy.Rule
	est  policy.Estimate
	fit  regression.Fit
	// objective is what the policy's plan optimises (policy.Objectiver),
	// "" for a policy that weighs no energy.
	objective string
}

// publish stores the plan's rule (held to its bounds: policy.BoundHolds)
// with one atomic pointer store and wakes the queue, which re-decides at
// once. A plan that failed (ok false) publishes nothing: the last plan's
// rule stays, or, before any, the rule of adhoc, which sends what waits at
// once. planned, when not nil, is closed: SetPolicy's caller waits on it.
func (m *Monitor) publish(rule policy.Rule, ok bool, e policy.Estimate, fit regression.Fit, objective string, planned chan struct{}) {
	if ok {
		m.current.Store(&published{rule: policy.BoundHolds(rule, e), est: e, fit: fit, objective: objective})
	} else if m.current.Load() == nil {
		m.current.Store(&published{rule: policy.Adhoc{}.Plan(e), est: e, fit: fit})
	}
	if planned != nil {
		close(planned)
	}
	select {
	case m.changed <- struct{}{}:
	default: // a wake-up is already pending
	}
}

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
