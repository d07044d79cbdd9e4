package policy

import (
	"fmt"
	"time"

	"github.com/ratebatch/ratebatch/policy/smdp"
)

// guard adds the slack rule's deadline check when an SLA is configured.
func (p *Budget) guard(r Rule, e Estimate) Rule {
	if p.SLA <= 0 {
		return r
	}
	s := Slack{SLA: p.SLA, Safety: p.Safety, Target: TargetMax}.Plan(e).(SlackRule)
	return guarded{Rule: r, slack: s}
}

// guarded sends a partial batch early when the slack rule says a deadline
// would slip; otherwise the inner rule decides.
type guarded struct {
	Rule
	slack SlackRule
}

// Decide implements Rule.
func (g guarded) Decide(q Queue) Decision {
	d := g.Rule.Decide(q)
	if d.Rows > 0 || q.Rows <= 0 || !q.Free() {
		return d
	}
	s := g.slack.Decide(q)
	if s.Rows > 0 {
		return s
	}
	if !s.WakeAt.IsZero() && (d.WakeAt.IsZero() || s.WakeAt.Before(d.WakeAt)) {
		d.WakeAt = s.WakeAt
	}
	return d
}

// Status implements Rule.
func (g guarded) Status() Status {
	st := g.Rule.Status()
	st.Note += fmt.Sprintf("; SLA guard %v", g.slack.sla)
	return st
}

// BudgetRule is one planned constrained optimum: the control limits of its
// two policies and the probability of following the second where they
// differ.
type BudgetRule struct {
	first, second Limit
	mix           float64
	seed          uint64
	constrained   smdp.Constrained
	model         smdp.Model
	trimNote      string // the live trim's state when the rule was handed out
	solveNote     string // set when the rule was solved for another rate
	// tail is the tail model's prediction for the rule (nil: none).
	tail *tailPlan
}

// Decide implements Rule.
func (r BudgetRule) Decide(q Queue) Decision {
	if q.SourcesKnown && q.IdleSources == 0 && q.Rows > 0 && q.Free() {
		// No caller that could send is idle: the arrival rate during a
		// wait is zero, and the optimum of the model with that rate
		// sends at once (docs/ALGORITHMS.md, "Sources").
		n := q.Rows
		if q.MaxBatch > 0 {
			n = min(n, q.MaxBatch)
		}
		return Send(n)
	}
	lo, hi := r.first.Limit, r.second.Limit
	if q.Rows >= min(lo, hi) && q.Rows < max(lo, hi) && r.mix > 0 && draw(r.seed, q.OldestArrival, q.Rows) < r.mix {
		return r.second.Decide(q)
	}
	return r.first.Decide(q)
}

// draw is a uniform number in [0, 1) that depends only on its arguments
// (splitmix64 of their mix): the same queue state always gets the same
// draw, distinct states independent-looking ones.
func draw(seed uint64, oldest time.Time, rows int) float64 {
	x := seed ^ uint64(oldest.UnixNano()) ^ uint64(rows)*0x9e3779b97f4a7c15
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	x ^= x >> 31
	return float64(x>>11) / (1 << 53)
}

// Status implements Rule. BatchSize is the first (smaller) control limit.
func (r BudgetRule) Status() Status {
	st := r.first.Status()
	st.BatchSize = min(r.first.Limit, r.second.Limit)
	st.Note += r.solveNote + r.trimNote
	if r.tail != nil {
		st.PlannedMeanMs, st.PlannedP99Ms = r.tail.planned.MeanMs, r.tail.planned.P99Ms
	}
	return st
}

// Limits returns the two control limits and the share of the second.
func (r BudgetRule) Limits() (first, second int, mix float64) {
	return r.first.Limit, r.second.Limit, r.mix
}

// Constrained is the optimum the rule came from, with the model it was
// solved for (the grid rate, not the measured one).
func (r BudgetRule) Constrained() (smdp.Constrained, smdp.Model) { return r.constrained, r.model }
