package monitor

import (
	"time"

	"github.com/ratebatch/ratebatch/policy"
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

// Rule returns the rule in force.
func (m *Monitor) Rule() policy.Rule { return m.current.Load().rule }

// Predict is the round trip the current plan expects of a batch of rows:
// tau(b) as the policy plans with it. The dispatcher judges hung batches
// by it (dispatcher.Predictor).
func (m *Monitor) Predict(rows int) time.Duration {
	l := m.current.Load().est.Latency
	return time.Duration((l.AlphaMs*float64(rows) + l.Tau0Ms) * float64(time.Millisecond))
}

// Changed delivers a value after each new rule is published, so that a
// queue waiting on the old rule re-decides at once.
func (m *Monitor) Changed() <-chan struct{} { return m.changed }
